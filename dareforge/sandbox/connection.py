"""The host's end of one kernel: ZMTP peers (`zmtp`) on the kernel's ipc sockets, and the reading of an
execution's messages. Agent code holds the kernel's sockets and key, so every message is hostile input: any
size, any rate, any content, any number of frames. Each frame is charged before its body is read: a message
(all its frames and buffers together) past `message_limit`, or an execution's messages (its own and any other
request's) past `execution_limit`, end the execution with that reason, and reading stops there. So the host
holds at most one message and its parsed copy (`host_memory_bound`), whatever the frame layout. A malformed
message, a flood past the kernel's own output cap, or a dropped connection end the execution too (`Sandbox`
then replaces the kernel).
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.session import Session

from dareforge.config import SandboxConfig
from dareforge.sandbox.execution import OUTPUT_NOTICE, OutputBudget, cut_end
from dareforge.sandbox.zmtp import FRAME_COST, Dropped, OverBudget, Peer

CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
DRAIN_BATCH = 64
MAX_FOREIGN_MESSAGES = 500
"""Messages of other requests in one execution (a few are left over from an interrupted one) past which the
kernel is taken to be flooding the host. Below the kernel's own send queue (zmq's 1,000), so a flood always
delivers this many before the kernel's side starts dropping."""
EXECUTION_MESSAGES = 64
"""An execution's messages may add up to this many times `message_limit`: far more than a capped output and its
notices ever take, far less than a flood."""


def message_limit(config: SandboxConfig) -> int:
    """The largest message the host takes from a kernel, all its frames and buffers together (each frame costing
    `zmtp.FRAME_COST` more). The kernel sends at most `max_output_bytes` of output per message (text only,
    `kernel_boot`), which JSON may escape to six bytes a character; a megabyte covers the rest."""
    return 6 * config.max_output_bytes + (1 << 20)


def execution_limit(config: SandboxConfig) -> int:
    """What all the messages one execution reads may add up to, other requests' included."""
    return EXECUTION_MESSAGES * message_limit(config)


def host_memory_bound(config: SandboxConfig) -> int:
    """What reading one kernel's messages may hold in the host's memory at once: the message being read, its JSON
    decoded to text and then to Python objects (neither larger than the bytes), the kept output, a read chunk."""
    return 3 * message_limit(config) + config.max_output_bytes + (1 << 20)


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
    received: int = 0
    """Bytes of messages read in this execution (frames charged `FRAME_COST` each), other requests' included."""
    broke: str | None = None
    """How the kernel broke the protocol, when it did."""


class KernelConnection:
    def __init__(self, info: dict[str, Any], config: SandboxConfig, handshake_s: float):
        """Connect to the kernel's sockets; each handshake waits at most `handshake_s` (`zmtp.Peer`)."""
        self.config = config
        self._handshake_s = handshake_s
        self.session = Session(key=info["key"].encode(), signature_scheme=info["signature_scheme"])
        path = {name: Path(f"{info['ip']}-{info[f'{name}_port']}") for name in CHANNELS}
        identity = self.session.bsession
        self._peers: list[Peer] = []
        try:
            self.shell = self._connect(path["shell"], b"DEALER", identity)
            self.iopub = self._connect(path["iopub"], b"SUB")
            self.iopub.send([b"\x01"])  # subscribe to every topic
            self.control = self._connect(path["control"], b"DEALER", identity)
        except BaseException:
            self.close()
            raise
        self._poller = select.poll()
        for peer in (self.shell, self.iopub):
            self._poller.register(peer, select.POLLIN)
        self._broken: str | None = None
        """Why a request could not be sent, when one could not (the next `collect` says so)."""

    def wait_ready(self, check: Callable[[], None]) -> None:
        """kernel_info until a reply comes back and iopub is known to be subscribed (a status message arrives);
        `check` raises when the kernel died or took too long. Nothing of the agent's has run yet."""
        startup = Reading()
        msg_id, sent = self._request(self.shell, "kernel_info_request", {}), time.monotonic()
        replied = subscribed = False
        while not (replied and subscribed):
            check()
            self._poll(0.02)
            subscribed = self._receive(self.iopub, startup) is not None or subscribed
            reply = self._receive(self.shell, startup)
            replied = replied or (reply is not None and reply["parent_header"].get("msg_id") == msg_id)
            if replied and not subscribed and time.monotonic() - sent > 0.1:
                msg_id, sent = self._request(self.shell, "kernel_info_request", {}), time.monotonic()
                replied = False
        time.sleep(0.01)
        while self._receive(self.iopub, startup) is not None:
            pass

    def execute(self, code: str) -> str:
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        return self._request(self.shell, "execute_request", content)

    def interrupt_request(self) -> None:
        self._request(self.control, "interrupt_request", {})

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
        protocol or a budget spent ("broke", `reading.broke` says how), or `deadline(reading)` = (monotonic time,
        what to return then) passes."""
        if self._broken is not None:
            reading.broke = self._broken
            return "broke"
        while not (reading.idle and (reading.reply or idle_is_enough)):
            if ended():
                return "died"
            until, expired = deadline(reading)
            remaining = until - time.monotonic()
            if remaining <= 0:
                return expired
            self._poll(min(remaining, 0.2))
            try:
                for _ in range(DRAIN_BATCH):
                    msg = self._receive(self.iopub, reading)
                    if msg is None:
                        break
                    self._on_iopub(msg, msg_id, out, reading)
                for _ in range(DRAIN_BATCH):
                    msg = self._receive(self.shell, reading)
                    if msg is None:
                        break
                    self._on_reply(msg, msg_id, reading)
            except Dropped:
                return "dropped"
            except OverBudget as exc:
                reading.broke = str(exc)
                return "broke"
            except Exception as exc:  # any malformed message is the agent's doing
                reading.broke = f"the kernel sent a message the host cannot read ({cut_end(repr(exc), 300)})"
                return "broke"
            if out.flooded or reading.foreign > MAX_FOREIGN_MESSAGES:
                # The kernel caps its output where it is written; this much more came past that cap.
                reading.broke = "the kernel sent far more output, or messages, than its own cap lets through"
                return "broke"
        return "done"

    def close(self) -> None:
        for peer in self._peers:
            peer.close()
        self._peers.clear()

    def _connect(self, path: Path, socket_type: bytes, identity: bytes = b"") -> Peer:
        peer = Peer(path, socket_type, identity, self._handshake_s)
        self._peers.append(peer)
        return peer

    def _request(self, peer: Peer, kind: str, content: dict[str, Any]) -> str:
        msg = self.session.msg(kind, content)
        try:
            peer.send(self.session.serialize(msg))
        except OSError as exc:  # a kernel that reads nothing (stopped) or closed its end
            self._broken = f"the kernel did not take the host's {kind} ({cut_end(repr(exc), 200)})"
        return msg["header"]["msg_id"]

    def _poll(self, seconds: float) -> None:
        """Wait until a kernel socket has something to read, or `seconds`."""
        self._poller.poll(max(1, int(seconds * 1000)))

    def _receive(self, peer: Peer, reading: Reading) -> dict[str, Any] | None:
        """The next whole message from `peer`, each frame charged to the message's and `reading`'s budgets."""
        frames = peer.receive(lambda so_far, cost: self._charge(reading, so_far, cost))
        if frames is None:
            return None
        _, frames = self.session.feed_identities(frames, copy=True)
        # The signature and the four signed frames, as bytes, one at a time (each copy replaces its original);
        # the buffers after them are the kernel's only (unsigned, and nothing of the host's reads them).
        del frames[5:]
        for i, frame in enumerate(frames):
            frames[i] = bytes(frame)
        return self.session.deserialize(frames, content=True, copy=True)

    def _charge(self, reading: Reading, so_far: int, cost: int) -> None:
        per_message, per_execution = message_limit(self.config), execution_limit(self.config)
        if so_far + cost > per_message:
            raise OverBudget(
                f"the kernel sent a message of more than {per_message} bytes (all its frames and buffers "
                f"together, {FRAME_COST} bytes a frame besides its body; 6 x sandbox.max_output_bytes + 1 MiB)"
            )
        if reading.received + cost > per_execution:
            raise OverBudget(
                f"the kernel sent more than {per_execution} bytes of messages in one execution (all its "
                f"messages, other requests' included; {EXECUTION_MESSAGES} x the {per_message}-byte message limit)"
            )
        reading.received += cost

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
