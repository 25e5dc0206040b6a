"""The host's end of one kernel: a jupyter client on the kernel's ipc sockets, and the reading of an execution's
messages. Agent code holds the kernel's sockets and key, so every message is hostile input: any size, any rate,
any content. The host takes none over `message_limit` bytes (zmq drops the connection instead, which a monitor
socket hears), queues at most `RECEIVE_QUEUE` per socket, reads at most `DRAIN_BATCH` between two looks at the
clock, and reads a malformed message, a flood past the kernel's own output cap or a dropped connection as the
end of the execution (`Sandbox` then replaces the kernel).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.blocking.client import BlockingKernelClient

from dareforge.config import SandboxConfig
from dareforge.sandbox.execution import OUTPUT_NOTICE, OutputBudget, cut_end

CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
RECEIVE_QUEUE = 8
"""Messages the host queues per socket; past it zmq holds the rest on the kernel's side (in its memory)."""
DRAIN_BATCH = 64
MAX_FOREIGN_MESSAGES = 500
"""Messages of other requests in one execution (a few are left over from an interrupted one) past which the
kernel is taken to be flooding the host. Below the kernel's own send queue (zmq's 1,000), so a flood always
delivers this many before the kernel's side starts dropping."""


def message_limit(config: SandboxConfig) -> int:
    """The largest message the host takes from a kernel. The kernel sends at most `max_output_bytes` of output
    per message (text only, `kernel_boot`), which JSON may escape to six bytes a character; a megabyte covers
    the rest of the frame."""
    return 6 * config.max_output_bytes + (1 << 20)


def socket_paths(ipc: Path, info: dict[str, Any]) -> list[Path]:
    return [ipc / f"k-{info[f'{name}_port']}" for name in CHANNELS]


@dataclass
class Reading:
    """What one execution's messages have said so far."""

    error: str | None = None
    traceback: str = ""
    idle: bool = False
    reply: bool = False
    began: float | None = None
    """Monotonic time the kernel said it began the code (its execute_input message)."""
    foreign: int = 0
    """Messages of other requests."""
    broke: str | None = None
    """How the kernel broke the protocol, when it did."""


class KernelConnection:
    def __init__(self, info: dict[str, Any], config: SandboxConfig):
        self.config = config
        client = BlockingKernelClient()
        client.context.setsockopt(zmq.MAXMSGSIZE, message_limit(config))
        client.context.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
        client.load_connection_info(info)
        client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=True)
        self.client = client
        self._watch = [
            channel.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            for channel in (client.shell_channel, client.iopub_channel)
        ]
        """Per channel, a monitor socket that hears when the kernel's end of the connection drops."""

    def wait_ready(self, check: Callable[[], None]) -> None:
        """kernel_info until a reply comes back and iopub is known to be subscribed (a status message arrives);
        `check` raises when the kernel died or took too long. Nothing of the agent's has run yet."""
        client = self.client
        poller = zmq.Poller()
        poller.register(client.shell_channel.socket, zmq.POLLIN)
        poller.register(client.iopub_channel.socket, zmq.POLLIN)
        msg_id, sent, replied, subscribed = client.kernel_info(), time.monotonic(), False, False
        while not (replied and subscribed):
            check()
            events = dict(poller.poll(20))
            if client.iopub_channel.socket in events:
                while client.iopub_channel.msg_ready():
                    client.get_iopub_msg(timeout=0)
                    subscribed = True
            if client.shell_channel.socket in events:
                while client.shell_channel.msg_ready():
                    reply = client.get_shell_msg(timeout=0)
                    replied = replied or reply["parent_header"].get("msg_id") == msg_id
            if replied and not subscribed and time.monotonic() - sent > 0.1:
                msg_id, sent, replied = client.kernel_info(), time.monotonic(), False
        time.sleep(0.01)
        while client.iopub_channel.msg_ready():
            client.get_iopub_msg(timeout=0)

    def execute(self, code: str) -> str:
        return self.client.execute(
            code, silent=False, store_history=True, allow_stdin=False, stop_on_error=False
        )

    def interrupt_request(self) -> None:
        self.client.control_channel.send(self.client.session.msg("interrupt_request", {}))

    def collect(
        self,
        msg_id: str,
        out: OutputBudget,
        reading: Reading,
        deadline: Callable[[Reading], tuple[float, str]],
        ended: Callable[[], bool],
        idle_is_enough: bool,
    ) -> str:
        """Read `msg_id`'s messages into `reading` and `out` until its reply and idle status ("done"; idle alone
        when `idle_is_enough`), the kernel's end (`ended()`: "died"), a dropped connection ("dropped"), a broken
        protocol ("broke", `reading.broke` says how), or `deadline(reading)` = (monotonic time, what to return
        then) passes."""
        client = self.client
        poller = zmq.Poller()
        for socket in (client.shell_channel.socket, client.iopub_channel.socket, *self._watch):
            poller.register(socket, zmq.POLLIN)
        while not (reading.idle and (reading.reply or idle_is_enough)):
            if ended():
                return "died"
            until, expired = deadline(reading)
            remaining = until - time.monotonic()
            if remaining <= 0:
                return expired
            events = dict(poller.poll(max(1, int(min(remaining, 0.2) * 1000))))
            if any(watch in events for watch in self._watch):
                return "dropped"
            try:
                for _ in range(DRAIN_BATCH):
                    if not client.iopub_channel.msg_ready():
                        break
                    self._on_iopub(client.get_iopub_msg(timeout=0), msg_id, out, reading)
                for _ in range(DRAIN_BATCH):
                    if not client.shell_channel.msg_ready():
                        break
                    self._on_reply(client.get_shell_msg(timeout=0), msg_id, reading)
            except Exception as exc:  # any malformed message is the agent's doing
                reading.broke = f"the kernel sent a message the host cannot read ({cut_end(repr(exc), 300)})"
                return "broke"
            if out.flooded or reading.foreign > MAX_FOREIGN_MESSAGES:
                # The kernel caps its output where it is written; this much more came past that cap.
                reading.broke = "the kernel sent far more output, or messages, than its own cap lets through"
                return "broke"
        return "done"

    def close(self) -> None:
        self.client.stop_channels()
        self.client.context.destroy(linger=0)

    def _on_reply(self, reply: dict[str, Any], msg_id: str, reading: Reading) -> None:
        if reply["parent_header"].get("msg_id") != msg_id:
            reading.foreign += 1
            return
        reading.reply = True
        content = reply["content"]
        if content.get("status") == "error" and reading.error is None:
            reading.error = self._error_line(content)
            reading.traceback = "\n".join(content.get("traceback", []))
        elif content.get("status") == "aborted" and reading.error is None:
            reading.error = "Aborted: the kernel aborted the execution"

    def _on_iopub(self, msg: dict[str, Any], msg_id: str, out: OutputBudget, reading: Reading) -> None:
        if msg["parent_header"].get("msg_id") != msg_id:
            reading.foreign += 1
            return
        kind, content = msg["msg_type"], msg["content"]
        if kind == "execute_input" and reading.began is None:
            reading.began = time.monotonic()
        elif kind == OUTPUT_NOTICE:
            out.kernel_notice(content)
        elif kind == "stream":
            out.add("stderr" if content.get("name") == "stderr" else "stdout", content.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            text = content.get("data", {}).get("text/plain")
            if text is not None:
                out.add("result", text)
        elif kind == "error":
            reading.error = self._error_line(content)
            reading.traceback = "\n".join(content.get("traceback", []))
        elif kind == "status" and content.get("execution_state") == "idle":
            reading.idle = True

    def _error_line(self, content: dict[str, Any]) -> str:
        """The line "ename: evalue", each cut to the traceback limit (an exception's message can be any size)."""
        limit = self.config.max_traceback_chars
        ename, evalue = str(content.get("ename", "Error")), str(content.get("evalue", ""))
        return f"{cut_end(ename, limit)}: {cut_end(evalue, limit)}"
