"""What one execution returned, and the helpers that shape it: output budget, ANSI stripping, traceback cut."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


@dataclass(frozen=True)
class Execution:
    """One `Sandbox.execute` call.

    `error` is "ename: evalue" of an exception, `ExecutionLimit: ...` when the wall-clock limit was hit, or
    `KernelDied: ...` when the kernel process ended (memory, CPU limit, killed). `restarted` means the kernel was
    replaced after this execution: the workspace files remain, the Python state (variables, imports) is gone.
    """

    stdout: str = ""
    stderr: str = ""
    result: str = ""
    error: str | None = None
    traceback: str = ""
    files_written: tuple[str, ...] = ()
    seconds: float = 0.0
    timed_out: bool = False
    killed: bool = False
    restarted: bool = False
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def status(self) -> str:
        """One word for logs and trajectories: ok, error, execution-limit or killed."""
        if self.timed_out:
            return "execution-limit"
        if self.killed:
            return "killed"
        return "ok" if self.error is None else "error"


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def cut_traceback(text: str, limit: int) -> str:
    """Keep the end of a traceback (where the error is) within `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    cut = len(text) - limit
    while True:
        marker = f"[... {cut} characters cut ...]\n"
        keep = limit - len(marker)
        if keep <= 0:
            return text[-limit:]
        if len(text) - keep == cut:
            return marker + text[-keep:]
        cut = len(text) - keep


class OutputBudget:
    """Captured output (stdout, stderr, result text) shares one byte budget; what is past it is dropped.

    Each stream that lost bytes ends with a marker saying so; the kernel still runs to completion.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.dropped: dict[str, int] = {}
        self.parts: dict[str, list[str]] = {"stdout": [], "stderr": [], "result": []}

    def add(self, stream: str, text: str) -> None:
        data = text.encode("utf-8", "replace")
        room = self.limit - self.used
        if len(data) <= room:
            self.parts[stream].append(text)
            self.used += len(data)
            return
        if room > 0:
            self.parts[stream].append(data[:room].decode("utf-8", "ignore"))
            self.used = self.limit
        self.dropped[stream] = self.dropped.get(stream, 0) + len(data) - max(room, 0)

    def text(self, stream: str, sep: str = "") -> str:
        text = sep.join(self.parts[stream])
        if stream in self.dropped:
            text += (
                f"\n[output truncated: the {self.limit}-byte output limit was reached; "
                f"{self.dropped[stream]} more bytes of {stream} dropped]\n"
            )
        return text

    @property
    def truncated(self) -> bool:
        return bool(self.dropped)
