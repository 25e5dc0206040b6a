"""Processes an execution leaves running besides the kernel (a background job, a `Popen` never waited for,
joblib's worker pool): stopped (SIGSTOP) when the execution ends and continued (SIGCONT) when the next one
begins, so nothing of the agent's runs between executions. Paused, not killed: a worker pool the code keeps
must find its workers at the next execution (joblib raises TerminatedWorkerError otherwise), and a paused
process uses no CPU while the agent thinks."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

from dareforge.sandbox import processes

STRAY_ROUNDS = 20
"""Passes of stopping a finished execution's leftover processes before the sandbox is replaced instead (a fork
bomb may start processes as fast as they are stopped)."""


def pause(find: Callable[[], list[int]]) -> int | None:
    """Stop the processes `find` lists: how many, or None if they kept coming."""
    paused: set[int] = set()
    for _ in range(STRAY_ROUNDS):
        running = [pid for pid in find() if processes.state(pid) not in ("T", "t")]
        if not running:
            return len(paused)
        for pid in running:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        paused.update(running)
        deadline = time.monotonic() + processes.STOP_TIMEOUT_S
        while time.monotonic() < deadline and any(
            processes.state(p) not in ("T", "t", "Z", "X") for p in running
        ):
            time.sleep(0.002)
    return None


def resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)
