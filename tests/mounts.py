"""Small file systems made by the tests, for what a user's disk can do to a run: fill up, turn read-only."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(folder: Path, size_kib: int, *options: str) -> Iterator[Callable[..., None]]:
    """A tmpfs at `folder` (the test is skipped where mounting is not permitted); yields `remount(*options)`."""
    folder.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", ",".join((f"size={size_kib}k", *options)), "tmpfs", str(folder)],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        pytest.skip("no `mount` command here")
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root with CAP_SYS_ADMIN: {mounted.stderr.strip()}")

    def remount(*changes: str) -> None:
        subprocess.run(["mount", "-o", ",".join(("remount", *changes)), str(folder)], check=True)

    try:
        yield remount
    finally:
        # Lazy: detached at once even if a process of the run still holds a file there.
        subprocess.run(["umount", "--lazy", str(folder)], check=True)
