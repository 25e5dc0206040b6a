"""`Sandbox`: one persistent, isolated Python kernel per trajectory (state survives between executions).

Process tree: bwrap (host) -> the sandbox's pid 1 (bwrap's reaper) -> the launcher, exec'd into ipykernel
(started by `kernel_boot`, which caps each execution's output where it is written). The host talks to the
kernel over ZeroMQ ipc sockets in a per-launch folder bound into the sandbox; the kernel's own stdout and
stderr go to a pipe the host drains into a bounded tail (`processes.LogTail`).
Per execution: `seconds_per_execution` after the kernel began the code (its execute_input message; a request
it has not begun within `begin_timeout_s` restarts it) the kernel gets SIGINT; if it does not answer within
`interrupt_grace_s`, or processes it started are still running, the whole sandbox is killed (killing bwrap
kills its PID namespace) and a fresh kernel is started on the same folders. A kernel that dies (RLIMIT_CPU,
SIGKILL, a crash) is restarted the same way; `Execution.killed`/`restarted` record it.

The kernel is the agent's: its messages are read as hostile input (`_collect`: a malformed one, a message or
an execution's messages past their byte budget, a dropped connection or a flood end the execution as
`KernelProtocolError`). Processes an
execution leaves running are paused until the next one begins (`strays`). Where the machine allows, the
sandbox's processes share one control group (`cgroups`: memory and process count over all of them) and its
workspace is a tmpfs of `workspace_mb` (`disk`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from dareforge.child_python import python_argv
from dareforge.config import SandboxConfig
from dareforge.sandbox import cgroups, disk, isolation, processes, strays
from dareforge.sandbox.connection import KernelConnection, Reading, socket_paths
from dareforge.sandbox.execution import (
    OUTPUT_NOTICE,
    Execution,
    OutputBudget,
    cut_traceback,
    strip_ansi,
    tail_bytes,
)
from dareforge.sandbox.exit_reasons import STOPPED, exit_reason, stopped, why_not_interrupted
from dareforge.sandbox.host_folders import (
    bounds_workspaces,
    chown_tree,
    read_workspace_file,
    warn_unreadable_inputs,
)
from dareforge.sandbox.kernel_forks import ForkedKernel
from dareforge.sandbox.kernel_launch import (
    JOIN_GROUP,
    KERNEL_ARGS,
    KERNEL_BOOT,
    PLACEHOLDER,
    bwrap_prefix,
    fork_kernel,
    kernel_env,
    read_sandbox_pid,
    wait_placeholder,
    write_connection_file,
)
from dareforge.sandbox.processes import STOP_TIMEOUT_S
from dareforge.sandbox.sandbox_errors import SandboxError
from dareforge.sandbox.zmtp import OverBudget, PeerError
from dareforge.scratch import temp_root

log = logging.getLogger(__name__)

UID_RANGE = (1_000_000, 2_000_000)
"""Each isolated kernel runs as a uid of its own from this range: no host account, its own process budget."""
LOG_TAIL = 2000
LOG_WAIT_S = 2.0
PLUMBING_PROCESSES = 3
"""Processes of a sandbox that are not agent code (bubblewrap, its reaper inside, the kernel's launcher or
placeholder): the control group's process limit is `max_processes` plus these."""


def _pick_uid() -> int:
    return UID_RANGE[0] + secrets.randbelow(UID_RANGE[1] - UID_RANGE[0])


class Sandbox:
    """A Python (ipykernel) kernel confined by bubblewrap, for one trajectory.

    Inside, the task's public files are at `input_path` (read-only) and the kernel's working folder is
    `work_path` (read-write; `workspace` on the host). Not thread-safe: one caller drives one sandbox.
    Without isolation (`sandbox.allow_unsandboxed`) the kernel runs on the host with the same resource limits,
    and `input_path`/`work_path` are the host paths.
    """

    def __init__(
        self,
        inputs: Path | str,
        workspace: Path | str,
        config: SandboxConfig,
        seconds_per_execution: float,
        *,
        interrupt_grace_s: float = 2.0,
        start_timeout_s: float = 60.0,
        begin_timeout_s: float | None = None,
    ):
        self.inputs = Path(inputs).resolve()
        self.workspace = Path(workspace).resolve()
        self.config = config
        self.seconds_per_execution = float(seconds_per_execution)
        self.interrupt_grace_s = interrupt_grace_s
        self.start_timeout_s = start_timeout_s
        self.begin_timeout_s = start_timeout_s if begin_timeout_s is None else begin_timeout_s
        """How long a kernel may take to begin a request's code (it answers nothing meanwhile) before it is
        replaced; the per-execution limit counts from when it begins."""
        self.isolated = isolation.require(config)
        as_root = os.geteuid() == 0
        self.uid: int | None = _pick_uid() if self.isolated and as_root else None
        if not self.isolated and as_root:
            log.warning("unsandboxed kernel runs as root: the process limit (max_processes) is not enforced")
        self.restarts = 0
        self.start_seconds = 0.0
        self._conn: KernelConnection | None = None
        self._proc: Any = None
        self._runtime: Path | None = None
        self._log: processes.LogTail | None = None
        self._reaper_pid: int | None = None
        self._kernel_pid: int | None = None
        self._forked: ForkedKernel | None = None
        self._placeholder_pid: int | None = None
        self.forks = self.isolated and self.uid is not None and config.fork_kernels
        """Kernels are forked from the warm fork server into the sandbox bubblewrap builds (`kernel_forks`)."""
        self._launches = 0
        self._mounted = False
        """The workspace is a tmpfs of `workspace_mb` this sandbox mounted (`disk`)."""
        self._group: cgroups.SandboxGroup | None = None
        self._oom_kills = 0
        self._cleanup: list[Path] = []
        self._holder: dict[str, Any] = {}
        self._finalizer = weakref.finalize(self, processes.finalize, self._holder)

    # --- paths as the kernel sees them ---

    @property
    def input_path(self) -> str:
        return isolation.INPUT_DIR if self.isolated else str(self.inputs)

    @property
    def work_path(self) -> str:
        return isolation.WORK_DIR if self.isolated else str(self.workspace)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._exit_code() is None

    # --- lifecycle ---

    def start(self) -> Sandbox:
        if self._proc is not None:
            return self
        if not self.inputs.is_dir():
            raise SandboxError(f"sandbox inputs {self.inputs} is not a folder; pass the task's public folder")
        self.workspace.mkdir(parents=True, exist_ok=True)
        if self.uid is not None and bounds_workspaces(self.config) and not self._mounted:
            self._mount_workspace()
        if self.uid is not None:
            chown_tree(self.workspace, self.uid)
            warn_unreadable_inputs(self.inputs)
        self._runtime = Path(tempfile.mkdtemp(prefix="dfsbx-", dir=temp_root()))
        self._holder["runtime"] = self._runtime
        started = time.perf_counter()
        try:
            memory = self.config.memory_mb * 1024 * 1024
            self._group = cgroups.create(memory, self.config.max_processes + PLUMBING_PROCESSES)
            self._launch()
        except BaseException:
            self.close()
            raise
        self.start_seconds = time.perf_counter() - started
        return self

    def close(self) -> None:
        self._stop()
        if self._group is not None:
            self._group.remove()
            self._group = None
        if self._mounted:
            disk.unmount_keeping_files(self.workspace)
            self._mounted = False
            self._holder["mount"] = None
        if self._runtime is not None:
            shutil.rmtree(self._runtime, ignore_errors=True)
            self._runtime = self._holder["runtime"] = None
        for path in self._cleanup:
            shutil.rmtree(path, ignore_errors=True)
        self._cleanup.clear()

    def move_workspace(self, workspace: Path) -> None:
        """Serve `workspace` (absent or empty) from now on (a pool's hand-over): the kernel's /task/work shows it.
        A bind mount follows the folder, not its name, so a plain workspace is renamed (same file system only);
        a tmpfs one, which cannot be renamed, is bound there."""
        workspace.parent.mkdir(parents=True, exist_ok=True)
        if self._mounted:
            workspace.mkdir(exist_ok=True)
            if any(workspace.iterdir()):  # a rename would refuse it too; a mount would hide what is there
                raise OSError(
                    errno.ENOTEMPTY, "a pooled kernel takes only an empty workspace", str(workspace)
                )
            disk.move(self.workspace, workspace)
            self.workspace.rmdir()
            self._holder["mount"] = workspace
        else:
            os.rename(self.workspace, workspace)
        self.workspace = workspace

    def restart(self) -> None:
        """A fresh kernel on the same inputs and workspace (files stay, Python state is lost)."""
        self._stop()
        self.restarts += 1
        self._launch()

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- execution ---

    def execute(self, code: str) -> Execution:
        """Run `code` in the kernel; never raises for what the code does (errors, timeouts, a dead kernel)."""
        if self._proc is None:
            self.start()
        notes: list[str] = []
        restarted = False
        if not self.running:
            notes.append("[sandbox] the kernel had died since the last execution; a fresh one was started\n")
            self.restart()
            restarted = True
        assert self._conn is not None
        before = processes.snapshot(self.workspace)
        out = OutputBudget(self.config.max_output_bytes)
        for note in notes:
            out.add("stderr", note)
        reading = Reading()
        strays.resume(self._strays())
        self._oom_kills = self._group.oom_kills() if self._group is not None else 0
        started = time.monotonic()
        msg_id = self._conn.execute(code)
        outcome = self._collect(msg_id, out, reading, started)
        timed_out = killed = must_restart = False
        error, traceback = reading.error, reading.traceback
        lost = "the kernel was restarted (files kept, Python state lost)"
        if outcome == "stalled":
            timed_out = must_restart = True
            why = f"the kernel did not begin the code within {self.begin_timeout_s:g} s"
            if stopped(self._kernel_pid):
                why = f"{STOPPED}, before it told the host it had begun the code"
            error = f"ExecutionLimit: {why}; {lost}"
        elif outcome == "timeout":
            timed_out = True
            self._interrupt()
            outcome = self._collect(
                msg_id, out, reading, started, until=time.monotonic() + self.interrupt_grace_s
            )
            limit = f"ExecutionLimit: the execution ran past the {self.seconds_per_execution:g} s per-execution limit"
            traceback = reading.traceback
            if outcome == "done" and not self._strays():
                error = f"{limit} and was interrupted"
            elif outcome == "done":
                error, must_restart = f"{limit} and left processes running; {lost}", True
            else:
                killed = outcome in ("died", "broke")
                why = why_not_interrupted(outcome, reading, self._kernel_pid)
                error, must_restart = f"{limit}; {why}; {lost}", True
        elif outcome == "died":
            killed = must_restart = True
            error = f"KernelDied: {self._death_reason(with_log=False)}; {lost}"
        elif outcome == "broke":
            killed = must_restart = True
            error = f"KernelProtocolError: {reading.broke}; {lost}"
        paused_note = ""
        if not must_restart:
            paused = strays.pause(self._strays)
            if paused is None:
                must_restart = True
                error = (
                    error or f"ProcessLimit: processes this execution started kept starting others; {lost}"
                )
            elif paused:
                paused_note = (
                    f"\n[sandbox] {paused} background process{'es' if paused > 1 else ''} paused until the next "
                    "execution begins (nothing runs between executions)\n"
                )
        seconds = time.monotonic() - started
        if must_restart:
            self.restart()
            restarted = True
        after = processes.snapshot(self.workspace)
        written = tuple(sorted(path for path, sig in after.items() if before.get(path) != sig))
        return Execution(
            stdout=out.text("stdout"),
            stderr=out.text("stderr") + paused_note,
            result=out.text("result", sep="\n") if out.parts["result"] else "",
            error=error,
            traceback=cut_traceback(strip_ansi(traceback), self.config.max_traceback_chars),
            files_written=written,
            seconds=seconds,
            timed_out=timed_out,
            killed=killed,
            restarted=restarted,
            truncated=out.truncated,
        )

    def read_file(self, relpath: str, max_bytes: int | None = None) -> bytes:
        """Read a workspace file written by agent code, safely: no symlinks, no FIFOs, nothing outside."""
        return read_workspace_file(self.workspace, relpath, max_bytes)

    # --- internals ---

    def _mount_workspace(self) -> None:
        """Put the workspace on a tmpfs of `workspace_mb`, with whatever the caller had put there."""
        assert self.uid is not None
        staged = None
        if any(self.workspace.iterdir()):
            staged = Path(tempfile.mkdtemp(prefix=f".{self.workspace.name}-", dir=self.workspace.parent))
            staged.rmdir()
            self.workspace.rename(staged)
            self.workspace.mkdir()
        disk.mount(self.workspace, self.config.workspace_mb * 1024 * 1024, self.uid)
        self._mounted = True
        self._holder["mount"] = self.workspace
        if staged is not None:
            try:
                disk.copy_tree(staged, self.workspace)
            except OSError as exc:
                raise SandboxError(
                    f"the workspace {self.workspace} holds more than sandbox.workspace_mb "
                    f"({self.config.workspace_mb} MB): {exc}"
                ) from exc
            finally:
                shutil.rmtree(staged, ignore_errors=True)

    def _env(self, home: str) -> dict[str, str]:
        return kernel_env(home, self.input_path, self.work_path, self.isolated)

    def _launch(self) -> None:
        assert self._runtime is not None
        self._launches += 1
        ipc = self._runtime / f"ipc{self._launches}"
        ipc.mkdir(mode=0o700)
        conn, info = write_connection_file(ipc, self.uid)
        home = isolation.HOME_DIR if self.isolated else str(self._runtime / "home")
        if not self.isolated:
            (self._runtime / "tmp").mkdir(exist_ok=True)
        spec = {
            "rlimits": isolation.rlimits(self.config),
            "nice": self.config.nice,
            "uid": self.uid,
            "mkdirs": [home],
            "cwd": self.work_path,
        }
        limit = self.config.max_output_bytes
        boot = {
            "limit": limit,
            "tail": tail_bytes(limit),
            "notice": OUTPUT_NOTICE,
            "error_chars": self.config.max_traceback_chars,
        }
        kernel_args = [json.dumps(boot), "-f", str(conn), *KERNEL_ARGS]
        kernel = python_argv("-c", KERNEL_BOOT, *kernel_args)
        launcher = python_argv("-S", "-c", isolation.LAUNCHER, json.dumps(spec), isolated=True)
        # Forked kernels: bubblewrap builds the sandbox around a placeholder that sleeps until the sandbox ends.
        first = [PLACEHOLDER, "infinity"] if self.forks else kernel
        self._log = processes.LogTail(LOG_TAIL)
        fds: list[int] = []
        info_r = None
        deadline = time.monotonic() + self.start_timeout_s
        try:
            try:
                if self.isolated:
                    prefix, info_r, fds = bwrap_prefix(
                        self._runtime, ipc, self.uid, self.inputs, self.workspace, self.config.memory_mb
                    )
                    argv, cwd, group = [*prefix, *launcher, *first], "/", False
                else:
                    argv, cwd, group = [*launcher, *kernel], str(self.workspace), True
                if self._group is not None:
                    argv = [
                        *JOIN_GROUP,
                        str(len(self._group.procs_files)),
                        *map(str, self._group.procs_files),
                        *argv,
                    ]
                self._proc = processes.Spawner.popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=self._log.write_fd,
                    stderr=self._log.write_fd,
                    cwd=cwd,
                    env=self._env(home),
                    pass_fds=fds,
                    start_new_session=group,
                    close_fds=True,
                )
            finally:
                for fd in fds:
                    os.close(fd)
            self._holder.update(proc=self._proc, group=group)
            if info_r is not None:
                self._reaper_pid = read_sandbox_pid(info_r, deadline, self._proc)
                if self._reaper_pid is None and self._proc.poll() is not None:
                    raise SandboxError(f"the sandbox did not start: {self._death_reason()}")
            if self.forks:
                self._fork_kernel(spec, kernel_args, deadline, home)
        finally:
            self._log.close_writer()
            if info_r is not None:
                os.close(info_r)
        self._connect(ipc, info, deadline)
        if self.uid is not None:
            # The kernel has bound its sockets and read its connection file: the folder is the host's again, or
            # code could fill the host's disk through it (a socket in it stays connectable).
            os.chown(conn, 0, 0)
            os.chown(ipc, 0, 0)
        if self._forked is not None:
            self._kernel_pid = self._forked.pid
        else:
            kids = processes.children(self._reaper_pid) if self.isolated and self._reaper_pid else []
            self._kernel_pid = kids[0] if kids else self._proc.pid

    def _fork_kernel(self, spec: dict[str, Any], kernel_args: list[str], deadline: float, home: str) -> None:
        """Once the placeholder runs inside the finished sandbox, have the fork server fork the kernel into it."""
        assert self._log is not None and self.uid is not None
        placeholder = self._placeholder_pid = wait_placeholder(
            self._reaper_pid, self.uid, self.workspace, lambda: self._check_starting(deadline)
        )
        self._forked = fork_kernel(
            placeholder, self._reaper_pid, spec, kernel_args, self._env(home), self.config, self._log.write_fd
        )
        if self._group is not None:
            # Before the kernel has run anything of the agent's: it starts nothing until asked.
            self._group.join(self._forked.pid)

    def _connect(self, ipc: Path, info: dict[str, Any], deadline: float) -> None:
        # Connect only once the kernel has bound its sockets: zmq would otherwise retry every 100 ms.
        while not all(s.exists() for s in socket_paths(ipc, info)):
            self._check_starting(deadline)
            time.sleep(0.002)
        try:
            self._conn = KernelConnection(info, self.config, handshake_s=deadline - time.monotonic())
            self._conn.wait_ready(lambda: self._check_starting(deadline))
        except (OSError, PeerError, OverBudget, ValueError) as exc:  # nothing of the agent's has run yet
            self._check_starting(deadline)  # a kernel that died says why
            raise SandboxError(
                f"the kernel did not answer on its sockets ({exc!r}); log: {self._log_tail()}"
            ) from exc

    def _exit_code(self) -> int | None:
        """The kernel's exit code once it has ended; None while it runs. A forked kernel ends with its sandbox
        (bwrap's exit), or on its own (its code, reported by the fork server)."""
        code = self._proc.poll() if self._proc is not None else None
        if self._forked is not None and self._forked.poll() is not None:
            return self._forked.returncode
        return code

    def _ended(self) -> bool:
        return self._exit_code() is not None

    def _check_starting(self, deadline: float) -> None:
        if self._exit_code() is not None:
            raise SandboxError(f"the kernel died while starting: {self._death_reason()}")
        if time.monotonic() > deadline:
            raise SandboxError(
                f"the kernel did not answer within {self.start_timeout_s:g} s of starting; log: {self._log_tail()}"
            )

    def _collect(
        self, msg_id: str, out: OutputBudget, reading: Reading, sent: float, until: float | None = None
    ) -> str:
        """Read the execution's messages (`KernelConnection.collect`) until "done", "died", "broke", or a deadline:
        `until` if given ("timeout"), else `seconds_per_execution` after the kernel began the code ("timeout"),
        or `begin_timeout_s` after `sent` if it has not begun by then ("stalled").

        The clock starts when the kernel begins, not when the request is sent: before that ipykernel ignores
        SIGINT, so an interrupt sent to a kernel slow to pick up the request (a busy machine) would be lost and
        the kernel replaced for nothing. After an interrupt (`until` given) idle alone is enough: an interrupt
        that lands in ipykernel just before or after the code ends the request without a reply, and the kernel,
        idle and with its state, is fine."""

        def deadline(reading: Reading) -> tuple[float, str]:
            if until is not None:
                return until, "timeout"
            if reading.began is not None:
                return reading.began + self.seconds_per_execution, "timeout"
            return sent + self.begin_timeout_s, "stalled"

        assert self._conn is not None
        outcome = self._conn.collect(
            msg_id, out, reading, deadline, self._ended, idle_is_enough=until is not None
        )
        if outcome != "dropped":
            return outcome
        if self._kernel_pid is None or processes.exiting(self._kernel_pid):
            # Its sockets closed because it is dying: wait for its exit status, for the reason.
            stop = time.monotonic() + STOP_TIMEOUT_S
            while not self._ended() and time.monotonic() < stop:
                time.sleep(0.005)
            return "died"
        reading.broke = "the kernel's connection to the host broke (a socket closed by the code)"
        return "broke"

    def _interrupt(self) -> None:
        """SIGINT to the kernel: from the host by pid (we know it), else as a control-channel request."""
        if self._kernel_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self._kernel_pid, signal.SIGINT)
                return
        if self._conn is not None:
            self._conn.interrupt_request()

    def _strays(self) -> list[int]:
        """Processes left in the sandbox besides the kernel (a fork bomb, a background job)."""
        if self.isolated and self._reaper_pid is not None:
            # A forked kernel's parent is the fork server, outside: what it starts descends from it, and what
            # it orphans goes to the sandbox's pid 1. The placeholder is not a stray.
            inside = processes.descendants(self._reaper_pid)
            if self._forked is not None:
                inside += processes.descendants(self._forked.pid)
            return [p for p in inside if p not in (self._kernel_pid, self._placeholder_pid)]
        return processes.descendants(self._proc.pid)

    def _death_reason(self, with_log: bool = True) -> str:
        code = self._exit_code()
        if code is None:
            return "the kernel stopped answering"
        oom_killed = self._group is not None and self._group.oom_kills() > self._oom_kills
        why = exit_reason(code, self.config, oom_killed)
        tail = self._log_tail() if with_log else ""
        return f"{why}; log: {tail}" if tail else why

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        dead = self._proc is not None and self._exit_code() is not None
        return self._log.text(wait_s=LOG_WAIT_S if dead else 0.0)

    def _stop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self._proc is not None:
            if not self.isolated:
                for pid in processes.descendants(self._proc.pid):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            processes.kill_process(self._holder)
            self._proc = self._holder["proc"] = None
            if self._reaper_pid is not None:
                # The sandbox's pid 1 dies of bwrap's death; once it is gone, so is every process inside
                # (the PID namespace is emptied first), and none can count against the next kernel's limits.
                deadline = time.monotonic() + STOP_TIMEOUT_S
                while not processes.gone(self._reaper_pid) and time.monotonic() < deadline:
                    time.sleep(0.005)
        self._log = None  # its thread ends with the pipe, when the last process in the sandbox is gone
        self._reaper_pid = self._kernel_pid = self._placeholder_pid = None
        self._forked = None
