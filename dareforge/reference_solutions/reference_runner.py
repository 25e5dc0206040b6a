"""Run reference scripts in isolated, seeded worker processes with pinned thread counts."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from dareforge.child_python import child_env, python_argv
from dareforge.reference_solutions.worker import PARENT_PID, READY
from dareforge.report import process_cpu_seconds

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")

STACK = ("numpy", "pandas", "scikit-learn", "scipy")
"""The libraries a reference's predictions depend on: recorded with every task, so an IF answer is exact for them."""


def package_versions() -> list[str]:
    return list(_installed_stack())


@functools.cache
def _installed_stack() -> tuple[str, ...]:
    """Read once per process: each lookup scans the installed distributions (about 8 ms for the four), which
    every task written and every Harbor control key asked for again."""
    return (f"python=={platform.python_version()}", *(f"{name}=={version(name)}" for name in STACK))


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

READY_TIMEOUT_S = 300
"""Wall seconds a fresh worker may take to say its ready line (importing scikit-learn: about 2 s unloaded).
A guard against a worker that never answers, not a measure: generous, and `generate.reference_ready_timeout_s`
sets it."""
MAX_LINE_BYTES = 1 << 20
"""A worker's answer is one short JSON line (its error cut to 4,000 characters); more without a line end is not
an answer."""
EXIT_WAIT_S = 5.0
"""Wall seconds a worker that closed its output is given to exit before it is killed."""


class Late(Exception):
    """A worker did not answer within its deadline."""


class WorkerLost(Exception):
    """The worker cannot run this script (it did not start, died, or answered out of turn); the message says
    why. A worker that died is restarted once before the script fails with this reason."""


class ReferenceRunner:
    """One long-lived worker process; restarted after a timeout or a crash.

    Thread counts are set in the worker's environment before numpy loads, and PYTHONHASHSEED is fixed, so a
    script's output depends only on the script, its inputs and the library versions. `timeout_s` is CPU time:
    certified on a loaded machine (a whole-catalog refresh beside another) a wide source's reference ran out
    of wall time in one of two identical runs, and their releases differed by that task.

    Every read from the worker has a deadline (`ready_timeout_s` for its ready line, the script's limits for
    its answer): a worker that does not say it is ready or dies is started again once, and then the script
    fails with the reason, so no run waits forever on a child (issue 43: an older clone's worker, run from the
    working folder, never said the new ready line and a run hung).
    """

    def __init__(self, threads: int = 1, timeout_s: float = 600, ready_timeout_s: float = READY_TIMEOUT_S):
        self.threads = threads
        self.timeout_s = timeout_s
        self.ready_timeout_s = ready_timeout_s
        self._proc: subprocess.Popen | None = None
        self._buffer = b""
        self._cpu_at_submit = 0.0
        self._ready = False
        self._request = b""
        self._lost: str | None = None

    def command(self) -> list[str]:
        """The worker's command line: this interpreter, the installed package only (never the working folder's)."""
        return python_argv("-m", "dareforge.reference_solutions.worker")

    def _start(self) -> subprocess.Popen:
        env = child_env(
            {
                "PYTHONHASHSEED": "0",
                PARENT_PID: str(os.getpid()),
                **dict.fromkeys(THREAD_VARS, str(self.threads)),
            }
        )
        return subprocess.Popen(
            self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )

    def start(self) -> ReferenceRunner:
        """Start the worker now, so its imports overlap with other work."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._proc, self._ready = self._start(), False
        return self

    def submit(self, code: str, cwd: Path, threads: int | None = None) -> None:
        """Send a script to the worker without waiting; `collect` gets the outcome.

        `threads` overrides the worker's thread count for this script only (threadpoolctl).
        """
        request = {"code": code, "cwd": str(cwd), "threads": threads or self.threads}
        self._request = (json.dumps(request) + "\n").encode()
        self._lost = self._send()

    def _send(self) -> str | None:
        """Hand the pending request to a ready worker, starting it again once; why not, when it cannot."""
        why = ""
        for attempt in range(2):
            try:
                self._send_once()
                return None
            except WorkerLost as lost:
                self.close()
                why = str(lost) if attempt == 0 else f"{why}; started again: {lost}"
        return why

    def _send_once(self) -> None:
        proc = self.start()._proc
        if not self._ready:  # its imports are not the script's CPU
            until = time.monotonic() + self.ready_timeout_s
            try:
                line = self._line(lambda: time.monotonic() > until)
            except Late as late:
                raise WorkerLost(
                    f"the reference worker did not say it was ready within {self.ready_timeout_s:g}s"
                ) from late
            if line != READY:
                raise WorkerLost(
                    f"the reference worker said {line[:200]!r} instead of its ready line "
                    f"(not this dareforge's worker: {' '.join(self.command())})"
                )
            self._ready = True
        try:
            self._cpu_at_submit = process_cpu_seconds(proc.pid)
            proc.stdin.write(self._request)
            proc.stdin.flush()
        except OSError as exc:
            raise WorkerLost(f"the reference worker died before it read the script ({exc})") from exc

    def collect(self) -> RunOutcome:
        """The outcome of the script `submit` sent. A worker that dies running it is started again once and
        runs it again (a crash of the worker is not yet the script's verdict); then the script fails with why."""
        if self._lost is not None:
            return RunOutcome(False, 0.0, self._lost)
        try:
            return self._collect_once()
        except WorkerLost as first:
            self.close()
            again = self._send()
            if again is not None:
                return RunOutcome(False, 0.0, f"{first}; started again: {again}")
            try:
                return self._collect_once()
            except WorkerLost as second:
                self.close()
                return RunOutcome(False, 0.0, f"{first}; started again, it ran the script again: {second}")

    def _collect_once(self) -> RunOutcome:
        waited_until = time.monotonic() + self.timeout_s * WAITING_FACTOR
        reason: list[str] = []

        def late() -> bool:
            try:
                used = process_cpu_seconds(self._proc.pid) - self._cpu_at_submit
            except OSError:
                return False  # gone: its closed output says so
            if used > self.timeout_s:
                reason.append(f"used more than {self.timeout_s:g} CPU seconds")
            elif time.monotonic() > waited_until:
                wall = self.timeout_s * WAITING_FACTOR
                reason.append(f"no answer after {wall:g}s while using {used:.0f} CPU seconds")
            return bool(reason)

        try:
            line = self._line(late)
        except Late:
            self.close()
            return RunOutcome(False, self.timeout_s, reason[0])
        try:
            answer = json.loads(line)
            return RunOutcome(answer["ok"], answer["seconds"], answer["error"], answer["cpu_seconds"])
        except (ValueError, KeyError, TypeError) as exc:
            raise WorkerLost(f"the reference worker wrote {line[:200]!r} where its answer was due") from exc

    def _line(self, late: Callable[[], bool]) -> str:
        """The worker's next output line, read within `late`'s deadline (checked at least every POLL_S):
        `Late` once `late()` says so, `WorkerLost` when the worker closes its output or floods it."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            if late():
                raise Late
            if not select.select([fd], [], [], POLL_S)[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise WorkerLost(f"the reference worker process died ({self._exit_status()})")
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE_BYTES and b"\n" not in self._buffer:
                raise WorkerLost(f"the reference worker wrote over {MAX_LINE_BYTES} bytes without a line end")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace").strip()

    def _exit_status(self) -> str:
        try:
            code = self._proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return "it closed its output and did not exit"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def run(self, code: str, cwd: Path) -> RunOutcome:
        self.submit(code, cwd)
        return self.collect()

    def close(self) -> None:
        proc, self._proc, self._buffer, self._ready = self._proc, None, b"", False
        if proc is not None:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()

    def __enter__(self) -> ReferenceRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
