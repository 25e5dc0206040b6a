"""Run reference scripts in isolated, seeded worker processes with pinned thread counts."""

from __future__ import annotations

import json
import os
import platform
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from dareforge.reference_solutions.worker import READY

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")

STACK = ("numpy", "pandas", "scikit-learn", "scipy")
"""The libraries a reference's predictions depend on: recorded with every task, so an IF answer is exact for them."""


def package_versions() -> list[str]:
    return [f"python=={platform.python_version()}", *(f"{name}=={version(name)}" for name in STACK)]


@dataclass(frozen=True)
class RunOutcome:
    ok: bool
    seconds: float
    error: str | None
    cpu_seconds: float = 0.0


WAITING_FACTOR = 10
"""A script that has not answered after this many times its CPU budget in wall time is stopped even if it
used no CPU (a script blocked on something): no load on 2 cores slows a running script down that much."""
POLL_S = 1.0


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a live process so far (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ReferenceRunner:
    """One long-lived worker process; restarted after a timeout or a crash.

    Thread counts are set in the worker's environment before numpy loads, and PYTHONHASHSEED is fixed, so a
    script's output depends only on the script, its inputs and the library versions. `timeout_s` is CPU time:
    certified on a loaded machine (a whole-catalog refresh beside another) a wide source's reference ran out
    of wall time in one of two identical runs, and their releases differed by that task.
    """

    def __init__(self, threads: int = 1, timeout_s: float = 600):
        self.threads = threads
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen | None = None
        self._cpu_at_submit = 0.0
        self._ready = False

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "PYTHONHASHSEED": "0", **dict.fromkeys(THREAD_VARS, str(self.threads))}
        return subprocess.Popen(
            [sys.executable, "-m", "dareforge.reference_solutions.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )

    def start(self) -> ReferenceRunner:
        """Start the worker now, so its imports overlap with other work."""
        if self._proc is None or self._proc.poll() is not None:
            self._proc, self._ready = self._start(), False
        return self

    def submit(self, code: str, cwd: Path, threads: int | None = None) -> None:
        """Send a script to the worker without waiting; `collect` gets the outcome.

        `threads` overrides the worker's thread count for this script only (threadpoolctl).
        """
        proc = self.start()._proc
        if not self._ready:  # its imports are not the script's CPU
            self._ready = proc.stdout.readline().strip() == READY
        self._cpu_at_submit = process_cpu_seconds(proc.pid)
        proc.stdin.write(
            json.dumps({"code": code, "cwd": str(cwd), "threads": threads or self.threads}) + "\n"
        )
        proc.stdin.flush()

    def collect(self) -> RunOutcome:
        proc = self._proc
        waited_until = time.monotonic() + self.timeout_s * WAITING_FACTOR
        reason = None
        while not select.select([proc.stdout], [], [], POLL_S)[0]:
            try:
                used = process_cpu_seconds(proc.pid) - self._cpu_at_submit
            except OSError:
                break  # gone: the read below finds no answer
            if used > self.timeout_s:
                reason = f"used more than {self.timeout_s:g} CPU seconds"
            elif time.monotonic() > waited_until:
                reason = (
                    f"no answer after {self.timeout_s * WAITING_FACTOR:g}s while using {used:.0f} CPU seconds"
                )
            if reason:
                break
        line = "" if reason else proc.stdout.readline()
        if not line:
            self.close()
            return RunOutcome(False, self.timeout_s if reason else 0.0, reason or "the worker process died")
        answer = json.loads(line)
        return RunOutcome(answer["ok"], answer["seconds"], answer["error"], answer["cpu_seconds"])

    def run(self, code: str, cwd: Path) -> RunOutcome:
        self.submit(code, cwd)
        return self.collect()

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def __enter__(self) -> ReferenceRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
