"""Watching processes a test started end: alive-or-not that sees through zombies, and a wait with a guard."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed process whose parent is gone is reaped by init; until then it is a zombie, which is gone as well.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def waited(condition: Callable[[], bool], what: str, deadline_s: float = 120.0) -> None:
    """Polls `condition` until it holds; the deadline is a guard against a hang, never the verdict's measure."""
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, what
        time.sleep(0.1)
