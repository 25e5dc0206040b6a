"""What one execution returned, and the helpers that shape it: output budget, ANSI stripping, traceback cut."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

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


def cut_end(text: str, limit: int) -> str:
    """The start of `text` and a note of how much was cut, within `limit` characters (the kernel cuts an
    exception's message the same way, `kernel_boot.cut_start`: what it cut is not cut again here)."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(f" [... {len(text)} characters cut]"))
    return f"{text[:keep]} [... {len(text) - keep} characters cut]"


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


OUTPUT_NOTICE = "dareforge_output_dropped"
"""iopub message type of the kernel's per-execution count of output it dropped (see `kernel_boot`)."""
OUTPUT_TAIL_BYTES = 2000
"""At most this much of the end of a truncated stream is kept (and never more than a tenth of the limit)."""


def tail_bytes(limit: int) -> int:
    return min(OUTPUT_TAIL_BYTES, limit // 10)


class OutputBudget:
    """Captured output (stdout, stderr, result text) shares one byte budget; what is past it is dropped.

    The kernel caps output where it is written and reports what it dropped (`kernel_notice`), with the end of
    each truncated stream; this budget is the host's second line: it keeps at most `limit` bytes of what
    arrives, whatever the kernel sends. Each stream that lost bytes ends with a note saying how many, the
    setting that limits them, and the kept end; the kernel still runs to completion.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.tail_limit = tail_bytes(limit)
        self.used = 0
        self.dropped: dict[str, int] = {}
        self.kernel_dropped: dict[str, int] = {}
        self.tails: dict[str, str] = {}
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

    def kernel_notice(self, content: dict[str, Any]) -> None:
        """The kernel's running count of bytes it dropped per stream this execution, and each stream's end.

        Notices repeat with growing counts; a malformed one (the kernel is not trusted) is ignored."""
        dropped, tails = content.get("dropped"), content.get("tails")
        if not isinstance(dropped, dict) or not isinstance(tails, dict):
            return
        for stream, count in dropped.items():
            if stream in self.parts and isinstance(count, int) and count > 0:
                self.kernel_dropped[stream] = max(self.kernel_dropped.get(stream, 0), count)
        for stream, tail in tails.items():
            if stream in self.parts and isinstance(tail, str):
                end = tail.encode("utf-8", "replace")[-self.tail_limit :] if self.tail_limit else b""
                self.tails[stream] = end.decode("utf-8", "ignore")

    def text(self, stream: str, sep: str = "") -> str:
        text = sep.join(self.parts[stream])
        dropped = self.dropped.get(stream, 0) + self.kernel_dropped.get(stream, 0)
        if dropped:
            tail = self.tails.get(stream, "")
            text += (
                f"\n[output truncated: {dropped} bytes of {stream} past the {self.limit}-byte limit of this "
                "execution were dropped (setting sandbox.max_output_bytes)"
            )
            text += f"; its last {len(tail.encode())} bytes follow]\n{tail}" if tail else "]\n"
        return text

    @property
    def flooded(self) -> bool:
        """More arrived past the limit than the limit itself: the kernel's own cap (`kernel_boot`) would have
        dropped it, so the kernel is not the one dareforge started (agent code took over its sockets)."""
        return sum(self.dropped.values()) > self.limit

    @property
    def truncated(self) -> bool:
        return bool(self.dropped or self.kernel_dropped)
