"""Run reference scripts in isolated, seeded worker processes with pinned thread counts."""

from __future__ import annotations

import json
import os
import platform
import select
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

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


class ReferenceRunner:
    """One long-lived worker process; restarted after a timeout or a crash.

    Thread counts are set in the worker's environment before numpy loads, and PYTHONHASHSEED is fixed, so a
    script's output depends only on the script, its inputs and the library versions.
    """

    def __init__(self, threads: int = 1, timeout_s: float = 600):
        self.threads = threads
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen | None = None

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
            self._proc = self._start()
        return self

    def submit(self, code: str, cwd: Path, threads: int | None = None) -> None:
        """Send a script to the worker without waiting; `collect` gets the outcome.

        `threads` overrides the worker's thread count for this script only (threadpoolctl).
        """
        proc = self.start()._proc
        proc.stdin.write(
            json.dumps({"code": code, "cwd": str(cwd), "threads": threads or self.threads}) + "\n"
        )
        proc.stdin.flush()

    def collect(self) -> RunOutcome:
        proc = self._proc
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
        line = proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            reason = f"timed out after {self.timeout_s:g}s" if not ready else "the worker process died"
            return RunOutcome(False, self.timeout_s if not ready else 0.0, reason)
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
