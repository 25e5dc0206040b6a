"""DARE-bench's own scripts (Snowflake-Labs/dare-bench, Apache-2.0), imported from a copy of its repository on
this machine, never from this one: tests that run them skip where no copy is found.

Where to look: `DARE_BENCH_REPO` (a checkout, or a bare git directory), else a git mirror under /work/.mirror
(`*dare-bench*/repo`). From a git directory the scripts are read with `git show HEAD:scripts/<name>.py` into
the test's temporary folder.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

UNAVAILABLE = "DARE-bench's code is not available here"
MIRRORS = Path("/work/.mirror")


def _repo() -> Path | None:
    given = os.environ.get("DARE_BENCH_REPO")
    candidates = [Path(given)] if given else sorted(MIRRORS.glob("*[dD][aA][rR][eE]-bench*/repo"))
    return next((c for c in candidates if c.exists()), None)


def _source(repo: Path, name: str) -> str | None:
    if (repo / "scripts" / f"{name}.py").is_file():  # a checkout
        return (repo / "scripts" / f"{name}.py").read_text()
    try:
        shown = subprocess.run(
            ["git", "--git-dir", str(repo), "show", f"HEAD:scripts/{name}.py"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return shown.stdout


def dare_bench_script(name: str, folder: Path) -> ModuleType:
    """DARE-bench's `scripts/<name>.py` as a module, or skip the test saying why."""
    repo = _repo()
    source = _source(repo, name) if repo else None
    if source is None:
        pytest.skip(f"{UNAVAILABLE} (set DARE_BENCH_REPO to a checkout of Snowflake-Labs/dare-bench)")
    path = folder / f"dare_bench_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"dare_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        pytest.skip(f"DARE-bench's {name}.py cannot be imported here: {exc}")
    return module
