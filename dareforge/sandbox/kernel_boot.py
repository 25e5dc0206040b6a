"""The kernel's main program inside the sandbox: caps the output of each execution where it is written, then
starts ipykernel. Run as `python -c <this file's source> SPEC -f <connection file> ...` (the sandbox has the
venv's packages but not dareforge, so this file uses only the standard library and ipykernel).

Why here and not on the host: ipykernel buffers what the code prints and sends it to the host in messages of
any size (printing 1 GB made messages of hundreds of MB, held in ZeroMQ queues and decoded on the host: 3 GB of
host memory for 100 KB the agent was shown). Capped at `write`, past the limit nothing is buffered or sent.

Per execution (the parent request's msg_id), stdout, stderr and displayed results share `limit` bytes (UTF-8),
as the host's `OutputBudget` counts them. Past it, bytes are counted and dropped; the last `tail` bytes of each
stream are kept. The counts and tails go to the host in a `notice` message (its type is in SPEC), sent with the
stream's next flush (at the latest the one ipykernel makes before replying), which the host turns into the note
the agent reads.

Where output is written, and how each path is capped:
- `print`, `sys.stdout`/`sys.stderr`: `CappedOutStream.write`.
- File descriptors 1 and 2 (a subprocess, `os.system`, C code, `sys.__stdout__`): ipykernel points them at a
  pipe that a thread of the stream reads; `CappedOutStream._watch_pipe_fd` reads it in large chunks and passes
  the bytes through the same cap (when nothing more fits they are counted, not even decoded). It copies to the
  kernel's log (its original stdout, which the host drains into a bounded tail) only what was admitted, and
  `fileno()` answers the pipe, not that log, so `subprocess.run(..., stdout=sys.stdout)` is captured and capped
  too.
- Displays and the cell's result: only their text/plain form is sent (the host reads nothing else, and an
  image or HTML form can be as large as the code wants), through the same cap.
- An exception's message and traceback (in the error message and the execute reply): the message and each
  traceback entry cut to SPEC's `error_chars`, the traceback to its last entries within `limit`; the host cuts
  it further for the agent.

What is sent is never dropped: ZeroMQ's publisher drops messages past its send high-water mark (1,000 queued
messages), so a host that falls behind (a busy machine deschedules it) while the code prints many small flushed
lines lost the execution's `idle` status with them and waited out the execution's whole time limit. The iopub
socket here has no such mark: what the host has not read yet waits in the kernel's memory, which the sandbox's
memory limit bounds, and the host charges every message it reads to the execution's budgets.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and sys.path and sys.path[0] == "":
    # As ipykernel_launcher does: nothing in the working folder (the agent's workspace) may shadow the modules
    # loaded here. IPython puts the folder back on the path for the agent's code.
    del sys.path[0]

# The imports below come after the path fix above, on purpose.
import codecs
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import zmq
from ipykernel.iostream import OutStream
from ipykernel.kernelapp import IPKernelApp

FD_CHUNK = 1 << 16
"""Bytes read from the fd pipe at once (ipykernel reads 1000: a flood would cost a system call per 1000 bytes)."""
ENCODE_CHUNK = 1 << 20
PARTIAL_ESCAPE = re.compile(r"\x1b[^A-Za-z]*$")
KEPT_EXECUTIONS = 8
"""Counters kept for this many recent executions (output of a background thread may still arrive for one)."""
NEEDED_OUTSTREAM = (
    "_watch_pipe_fd",
    "_flush",
    "_schedule_flush",
    "_is_master_process",
    "_fid",
    "_should_watch",
)
"""ipykernel internals `CappedOutStream` relies on; checked at start-up so a changed ipykernel fails loudly."""
NEEDED_WHEN_WATCHING = ("_original_stdstream_fd", "_original_stdstream_copy")
UNUSED_AT_START = ("debugpy",)
"""Modules ipykernel imports while it starts that no agent uses: debugpy serves a front end's debugger (none
here) and cost about 0.12 of a kernel start's 0.45 CPU-seconds. Hidden only while the kernel starts (ipykernel
then runs without its debugger, as it does where debugpy is not installed); the agent's code may import it."""


def utf8_size(text: str | bytes) -> int:
    """Bytes of `text` in UTF-8, without building a copy of a large string."""
    if isinstance(text, bytes) or text.isascii():
        return len(text)
    return sum(
        len(text[i : i + ENCODE_CHUNK].encode("utf-8", "replace")) for i in range(0, len(text), ENCODE_CHUNK)
    )


def utf8_head(text: str, size: int) -> str:
    """The longest start of `text` that is at most `size` bytes in UTF-8 (whole characters only)."""
    return text[:size].encode("utf-8", "replace")[:size].decode("utf-8", "ignore")


def utf8_end(text: str | bytes, size: int) -> bytes:
    """The last `size` bytes of `text` in UTF-8 (the first character may be cut; the reader drops it)."""
    if isinstance(text, str):
        text = text[-size:].encode("utf-8", "replace")
    return bytes(text[-size:])


class _Execution:
    def __init__(self, parent: dict[str, Any]):
        self.parent = parent
        self.used = 0
        self.dropped: dict[str, int] = {}
        self.tails: dict[str, bytearray] = {}
        self.unsent = False


class OutputCap:
    """Per-execution output budget shared by the streams and displays of one kernel. Thread-safe."""

    def __init__(self, limit: int, tail: int):
        self.limit = limit
        self.tail = tail
        self.on_drop: Callable[[], None] | None = None
        """Called (outside the lock) when an execution's drop counts change and no notice is pending yet."""
        self._lock = threading.Lock()
        self._executions: OrderedDict[Any, _Execution] = OrderedDict()

    def has_room(self, parent: dict[str, Any]) -> bool:
        with self._lock:
            return self._execution(parent).used < self.limit

    def admit(self, parent: dict[str, Any], stream: str, text: str | bytes) -> str | bytes:
        """The part of `text` to publish (all of it while the execution's budget lasts); the rest is counted and
        its end kept. Once anything is dropped the execution's budget is closed, so later small writes cannot
        slip in ahead of the note."""
        with self._lock:
            execution = self._execution(parent)
            room = self.limit - execution.used
            size = utf8_size(text)
            if size <= room:
                execution.used += size
                return text
            head = utf8_head(text, room) if isinstance(text, str) and room > 0 else text[:0]
            execution.used = self.limit
            execution.dropped[stream] = execution.dropped.get(stream, 0) + size - utf8_size(head)
            if self.tail > 0:
                tail = execution.tails.setdefault(stream, bytearray())
                tail += utf8_end(text[len(head) :], self.tail)
                del tail[: -self.tail]
            newly = not execution.unsent
            execution.unsent = True
        if newly and self.on_drop is not None:
            self.on_drop()
        return head

    def notices(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(parent header, notice content) for each execution whose counts changed since its last notice."""
        found = []
        with self._lock:
            for execution in self._executions.values():
                if execution.unsent:
                    execution.unsent = False
                    content = {
                        "limit": self.limit,
                        "dropped": dict(execution.dropped),
                        "tails": {
                            name: bytes(t).decode("utf-8", "ignore") for name, t in execution.tails.items()
                        },
                    }
                    found.append((execution.parent, content))
        return found

    def _execution(self, parent: dict[str, Any]) -> _Execution:
        key = parent.get("msg_id")
        execution = self._executions.get(key)
        if execution is None:
            execution = self._executions[key] = _Execution(parent)
            while len(self._executions) > KEPT_EXECUTIONS:
                self._executions.popitem(last=False)
        return execution


class CappedOutStream(OutStream):
    """ipykernel's stdout/stderr stream with `OutputCap` in front of its buffer and its fd pipe."""

    cap: OutputCap
    notice_type: str

    def write(self, string: str) -> int | None:
        if not isinstance(string, str):
            return super().write(string)  # raises ipykernel's TypeError
        admitted = self.cap.admit(self.parent_header, self.name, string)
        if admitted:
            super().write(admitted)
        return len(string)

    def fileno(self) -> int:
        # ipykernel answers the copy of the original descriptor (the kernel's log): whatever a subprocess wrote
        # there would bypass the cap and never reach the agent. The watched descriptor is the capped pipe.
        if self._should_watch:
            return self._original_stdstream_fd
        return super().fileno()

    def schedule_notice(self) -> None:
        """Have the pending drop counts sent soon: a flush sends them (this stream may have nothing buffered)."""
        if self._is_master_process():
            self._schedule_flush()
        else:
            self.pub_thread.schedule(self._flush)

    def _flush(self) -> None:
        super()._flush()
        for parent, content in self.cap.notices():
            self.session.pid = os.getpid()  # as ipykernel's _flush: the pub thread is fork-safe itself
            message = self.session.msg(self.notice_type, content, parent=parent)
            self.session.send(self.pub_thread, message, ident=b"output_dropped")

    def _watch_pipe_fd(self) -> None:
        if self._fid is None:
            return
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while self._should_watch:
                data = os.read(self._fid, FD_CHUNK)
                if not data:
                    return
                parent = self.parent_header
                if not self.cap.has_room(parent):
                    decoder.reset()
                    self.cap.admit(parent, self.name, data)
                    continue
                admitted = self.cap.admit(parent, self.name, decoder.decode(data))
                if admitted:
                    OutStream.write(self, admitted)
                    os.write(self._original_stdstream_copy, str(admitted).encode("utf-8", "replace"))
        except Exception:
            self._exc = sys.exc_info()


class CappedKernelApp(IPKernelApp):
    """ipykernel's kernel application whose iopub socket never drops a message (see the module's docstring)."""

    def init_iopub(self, context: Any) -> None:
        # A default of the context, so the publisher has it before it binds (a setsockopt after the bind would not
        # reach a host that connected first). The publisher thread's own pipes, made next, take it too.
        context.setsockopt(zmq.SNDHWM, 0)
        super().init_iopub(context)


def cap_displays(shell: Any, cap: OutputCap) -> None:
    """Send only the text/plain form of displays and of the cell's result, through `cap`."""
    publisher = shell.display_pub
    publish = publisher.publish

    def capped_publish(data: dict[str, Any], metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        text = data.get("text/plain")
        if isinstance(text, str):
            publish({"text/plain": cap.admit(publisher.parent_header, "result", text)}, metadata, **kwargs)

    publisher.publish = capped_publish
    hook = shell.displayhook
    write_format_data = hook.write_format_data

    def capped_format_data(format_dict: dict[str, Any], md_dict: dict[str, Any] | None = None) -> None:
        text = format_dict.get("text/plain")
        data = {"text/plain": cap.admit(hook.parent_header, "result", text)} if isinstance(text, str) else {}
        write_format_data(data, md_dict)

    hook.write_format_data = capped_format_data


def cut_start(text: str, chars: int) -> str:
    """The start of `text` and a note of how much was cut, within `chars` characters (never half an ANSI
    escape). The host's `execution.cut_end` cuts the same way (this file cannot import dareforge)."""
    if len(text) <= chars:
        return text
    keep = max(0, chars - len(f" [... {len(text)} characters cut]"))
    return f"{PARTIAL_ESCAPE.sub('', text[:keep])} [... {len(text) - keep} characters cut]"


def cap_errors(session: Any, chars: int, total: int) -> None:
    """In `error` and `execute_reply` messages, cut the exception's message and each traceback entry to `chars`
    characters (keeping their start, where the exception's name is) and the traceback to its last entries
    within `total`: `raise ValueError(huge)` would otherwise send the huge text three times."""
    send = session.send

    def capped_send(stream: Any, msg_or_type: Any, content: Any = None, *args: Any, **kwargs: Any) -> Any:
        message = (
            msg_or_type if isinstance(msg_or_type, dict) else {"msg_type": msg_or_type, "content": content}
        )
        body = message.get("content")
        if message.get("msg_type") in ("error", "execute_reply") and isinstance(body, dict):
            if isinstance(body.get("evalue"), str):
                body["evalue"] = cut_start(body["evalue"], chars)
            if isinstance(body.get("traceback"), list):
                entries = [cut_start(str(entry), chars) for entry in body["traceback"]]
                kept: list[str] = []
                while entries and sum(map(len, kept)) + len(entries[-1]) <= total:
                    kept.insert(0, entries.pop())
                body["traceback"] = (
                    [f"[... {len(entries)} earlier traceback entries cut ...]"] if entries else []
                ) + kept
        return send(stream, msg_or_type, content, *args, **kwargs)

    session.send = capped_send


def main() -> None:
    spec = json.loads(sys.argv.pop(1))
    cap = OutputCap(int(spec["limit"]), int(spec["tail"]))
    CappedOutStream.cap = cap
    CappedOutStream.notice_type = str(spec["notice"])
    app = CappedKernelApp.instance(outstream_class=f"{__name__}.CappedOutStream")
    hidden = {name: sys.modules.get(name) for name in UNUSED_AT_START}
    sys.modules.update(dict.fromkeys(UNUSED_AT_START))  # None in sys.modules: an import raises ImportError
    try:
        app.initialize()
    finally:
        for name, module in hidden.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module
    stream = sys.stdout
    if not isinstance(stream, CappedOutStream) or app.shell is None:
        raise SystemExit("dareforge kernel: ipykernel did not install the capped output stream")
    needed = NEEDED_OUTSTREAM + (NEEDED_WHEN_WATCHING if getattr(stream, "_should_watch", False) else ())
    missing = [name for name in needed if not hasattr(stream, name)]
    if missing:
        import ipykernel

        raise SystemExit(
            f"dareforge kernel: ipykernel {ipykernel.__version__}'s OutStream lacks {missing}; update the output "
            "cap in dareforge/sandbox/kernel_boot.py for it"
        )
    cap.on_drop = stream.schedule_notice
    cap_displays(app.shell, cap)
    cap_errors(app.session, int(spec["error_chars"]), cap.limit)
    app.start()


if __name__ == "__main__":
    main()
