"""Why a kernel ended, or would not end, in the words an execution's error and a failed start give: its exit
status read as a signal or a code (a SIGKILL told apart by the control group's count of out-of-memory kills),
a kernel stopped by a signal, a kernel that did not stop when interrupted."""

from __future__ import annotations

import signal

from dareforge.config import SandboxConfig
from dareforge.sandbox import processes
from dareforge.sandbox.connection import Reading

STOPPED = "the kernel was stopped by a signal (SIGSTOP, or a trace stop)"


def stopped(pid: int | None) -> bool:
    return pid is not None and processes.state(pid) in ("T", "t")


def exit_reason(code: int, config: SandboxConfig, oom_killed: bool) -> str:
    """What ended a kernel with exit `code` (negative: the signal; past 128: a shell's signal status)."""
    signo = -code if code < 0 else code - 128 if 128 < code <= 128 + signal.SIGRTMAX else 0
    if signo == signal.SIGKILL and oom_killed:
        return (
            f"the sandbox's processes together reached its memory limit ({config.memory_mb} MB, "
            "setting sandbox.memory_mb)"
        )
    if signo == signal.SIGXCPU:
        return f"the CPU time limit ({config.cpu_seconds} s) was reached"
    if signo == signal.SIGKILL:
        return (
            f"killed by SIGKILL (out of memory, the CPU hard limit, or a kill; limit {config.memory_mb} MB)"
        )
    if signo:
        return f"ended by {processes.signal_name(signo)}"
    return f"exited with status {code}"


def why_not_interrupted(outcome: str, reading: Reading, kernel_pid: int | None) -> str:
    if outcome == "died":
        return "the kernel died when interrupted"
    if outcome == "broke":
        return reading.broke or "the kernel broke the protocol"
    if stopped(kernel_pid):
        return f"{STOPPED} and could not be interrupted"
    return "did not stop when interrupted"
