"""The host's end of a kernel socket: a ZMTP 3.0 peer (NULL security) on a unix socket that reads each message
frame by frame, counting every frame against a budget before reading its body.

Why not libzmq on the host: libzmq delivers a multipart message only once its last frame has arrived (atomic
delivery), and its size limit (ZMQ_MAXMSGSIZE) counts one frame. A kernel sending a message of 700 frames, each
under that limit, has all of it buffered in the host's memory before the host can see its first frame (issue
42: 0.4 to 2.1 GB). Here a frame's size is read from its header and charged first; past the budget reading stops
and nothing more is buffered (the rest waits on the kernel's side, in the sandbox's memory).
"""

from __future__ import annotations

import select
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

GREETING = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\0") + b"\0" + bytes(31)
"""Signature, version 3.0, the NULL mechanism, as client (RFC 23). 3.0, not 3.1: a subscription is then a message
whose first byte is 1, which libzmq's PUB takes from either version."""
MORE, LONG, COMMAND = 1, 2, 4
CHUNK = 1 << 16
"""Bytes read from the socket at a time: past the current frame, the most the host holds unparsed."""
SEND_TIMEOUT_S = 30.0
"""How long sending a request may wait for the kernel to take it (a request is small; the kernel's ZeroMQ thread
reads at once unless the kernel is stopped)."""
FRAME_COST = 128
"""What a frame costs the host besides its body (a Python object in a list): charged per frame, so a message of
a million empty frames is as dear as its million Python objects."""

Charge = Callable[[int, int], None]
"""`charge(bytes of this message so far, cost of its next frame)`: raises `OverBudget` to stop reading."""


class PeerError(Exception):
    """The kernel's end broke the protocol, or the connection."""


class Dropped(PeerError):
    """The kernel's end closed the connection."""


class OverBudget(Exception):
    """A frame would take a message, or an execution, past its budget; the frame's body was not read."""


class Peer:
    """One connection to a kernel socket bound at `path`, as a `socket_type` (DEALER, SUB) of `identity`.

    `receive` never blocks; the handshake waits at most `handshake_s`, a `send` at most `SEND_TIMEOUT_S` (a
    stopped kernel reads nothing)."""

    def __init__(
        self, path: Path, socket_type: bytes, identity: bytes = b"", handshake_s: float = SEND_TIMEOUT_S
    ):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(max(handshake_s, 0.001))
        self._poll = select.poll()  # not select.select: a host with many kernels has descriptors past 1024
        self._poll.register(self._sock, select.POLLIN)
        self._pending = bytearray()
        self._frames: list[bytearray] = []
        self._size = 0
        self._body: bytearray | None = None
        self._got = 0
        self._flags = 0
        try:
            self._sock.connect(str(path))
            self._sock.sendall(GREETING)
            greeting = self._read_exact(len(GREETING))
            if greeting[0] != 0xFF or greeting[9] != 0x7F or greeting[10] < 3 or greeting[12:16] != b"NULL":
                raise PeerError(f"the kernel's socket {path.name} did not greet as ZMTP 3 with NULL security")
            properties = [(b"Socket-Type", socket_type)] + ([(b"Identity", identity)] if identity else [])
            body = b"\x05READY" + b"".join(
                bytes([len(k)]) + k + len(v).to_bytes(4, "big") + v for k, v in properties
            )
            self._sock.sendall(self._header(COMMAND, len(body)) + body)
            self._await_ready(path)
            self._sock.settimeout(SEND_TIMEOUT_S)
        except BaseException:
            self._sock.close()
            raise

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, frames: Sequence[bytes]) -> None:
        data = bytearray()
        for i, frame in enumerate(frames):
            data += self._header(MORE if i < len(frames) - 1 else 0, len(frame)) + frame
        self._sock.sendall(data)

    def receive(self, charge: Charge) -> list[bytearray] | None:
        """The next whole message (its frames), reading only what the socket has ready; None when none is whole
        yet. Raises `OverBudget` (from `charge`), `Dropped`, or `PeerError`."""
        while True:
            message = self._parse(charge)
            if message is not None or not self._readable():
                return message
            self._fill()

    def close(self) -> None:
        self._sock.close()

    # --- internals ---

    @staticmethod
    def _header(flags: int, size: int) -> bytes:
        if size > 255:
            return bytes([flags | LONG]) + size.to_bytes(8, "big")
        return bytes([flags, size])

    def _readable(self) -> bool:
        return bool(self._poll.poll(0))

    def _fill(self) -> None:
        data = self._sock.recv(CHUNK)
        if not data:
            raise Dropped("the kernel closed its end of the connection")
        self._pending += data

    def _read_exact(self, size: int) -> bytes:
        while len(self._pending) < size:
            self._fill()
        data = bytes(self._pending[:size])
        del self._pending[:size]
        return data

    def _await_ready(self, path: Path) -> None:
        def no_budget(_: int, cost: int) -> None:
            if cost > CHUNK:
                raise PeerError(f"the kernel's socket {path.name} sent a handshake of {cost} bytes")

        while True:
            frame = self._parse_frame(no_budget)
            if frame is None:
                self._fill()
                continue
            if self._flags & COMMAND and frame.startswith(b"\x05READY"):
                return
            if self._flags & COMMAND and frame.startswith(b"\x05ERROR"):
                raise PeerError(
                    f"the kernel's socket {path.name} refused the connection: {bytes(frame[7:])!r}"
                )

    def _parse(self, charge: Charge) -> list[bytearray] | None:
        while True:
            frame = self._parse_frame(charge)
            if frame is None:
                return None
            if (
                self._flags & COMMAND
            ):  # PING, an ERROR: nothing the host answers; a closed connection is heard
                continue
            self._frames.append(frame)
            if not self._flags & MORE:
                message, self._frames, self._size = self._frames, [], 0
                return message

    def _parse_frame(self, charge: Charge) -> bytearray | None:
        """The next whole frame from what was read (its flags in `_flags`); None when it is not whole yet."""
        pending = self._pending
        if self._body is None:
            if len(pending) < 2:
                return None
            flags = pending[0]
            if flags & ~(MORE | LONG | COMMAND) or (flags & COMMAND and flags & MORE):
                raise PeerError(f"the kernel sent a frame with flags {flags:#04x}")
            if flags & COMMAND and self._frames:
                raise PeerError("the kernel sent a command inside a message")
            head = 9 if flags & LONG else 2
            if len(pending) < head:
                return None
            size = int.from_bytes(pending[1:9], "big") if flags & LONG else pending[1]
            charge(self._size, size + FRAME_COST)
            self._size += size + FRAME_COST
            del pending[:head]
            # The body is allocated whole (its size was charged above) and filled in place: grown chunk by chunk,
            # each reallocation could hold the old and the new buffer at once, and the heap kept the holes.
            self._body, self._got, self._flags = bytearray(size), 0, flags
        body, got = self._body, self._got
        take = min(len(body) - got, len(pending))
        with memoryview(pending) as view:
            body[got : got + take] = view[:take]
        del pending[:take]
        self._got = got + take
        if self._got < len(body):
            return None
        self._body = None
        return body
