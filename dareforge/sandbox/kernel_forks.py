"""The host's side of the kernel fork server (`fork_server`): one warm interpreter per host process and preload
list, started on first use, that forks kernels into sandboxes bubblewrap has built.

A kernel started this way costs a fork and ipykernel's own set-up instead of an interpreter start and the
imports of ipykernel, numpy and pandas (about 0.75 CPU-seconds a kernel, measured). The sandbox is the same:
bubblewrap builds it around a placeholder process, and the forked kernel joins its namespaces and confines
itself as the launcher would (see `fork_server`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, ClassVar

from dareforge.child_python import python_argv
from dareforge.sandbox import processes
from dareforge.sandbox.isolation import LAUNCHER
from dareforge.sandbox.sandbox_errors import SandboxError

log = logging.getLogger(__name__)

FORK_SERVER = (Path(__file__).parent / "fork_server.py").read_text()
NAMESPACES = ("net", "ipc", "uts", "cgroup", "pid", "mnt")
READY_TIMEOUT_S = 120.0
REPLY_TIMEOUT_S = 30.0
LOG_TAIL = 4000
MAX_MESSAGE = 1 << 20


class ForkedKernel:
    """A kernel the server forked: its host pid, and its exit code once the server has reaped it."""

    def __init__(self, pid: int, server: KernelForkServer):
        self.pid = pid
        self.returncode: int | None = None
        self._server = server

    def poll(self) -> int | None:
        if self.returncode is None and not self._server.alive and processes.gone(self.pid):
            self.returncode = -9  # its exit went to a server that is gone: ended, how is not known
        return self.returncode


class KernelForkServer:
    """A running fork server; `shared` gives the one for a preload list and kernel environment."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _servers: ClassVar[dict[tuple[str, ...], KernelForkServer]] = {}

    @classmethod
    def shared(cls, preload: list[str], env: dict[str, str], kernel_boot: str, nice: int) -> KernelForkServer:
        key = (json.dumps(preload), json.dumps(env, sort_keys=True), str(nice))
        with cls._lock:
            server = cls._servers.get(key)
            if server is None or not server.alive:
                server = cls._servers[key] = cls(preload, env, kernel_boot, nice)
            return server

    def __init__(self, preload: list[str], env: dict[str, str], kernel_boot: str, nice: int):
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._log = processes.LogTail(LOG_TAIL)
        try:
            self._proc = processes.Spawner.popen(
                python_argv(
                    "-c",
                    FORK_SERVER,
                    str(theirs.fileno()),
                    json.dumps(preload),
                    str(nice),  # its start and its forks are background work too: the kernels' priority
                    kernel_boot,
                    LAUNCHER,  # the confinement module, run as a program by fresh kernels
                ),
                stdin=subprocess.DEVNULL,
                stdout=self._log.write_fd,
                stderr=self._log.write_fd,
                cwd="/",
                env=env,  # the kernels' own: glibc and Python read some of it once, at start
                pass_fds=[theirs.fileno()],
                close_fds=True,
            )
        finally:
            theirs.close()
            self._log.close_writer()
        self._send_lock = threading.Lock()
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._kernels: dict[int, ForkedKernel] = {}
        self._next_id = 0
        self._sock.settimeout(READY_TIMEOUT_S)
        try:
            ready = self._sock.recv(MAX_MESSAGE)
        except OSError as exc:
            self.close()
            raise SandboxError(
                f"the kernel fork server did not start: {exc}; log: {self._log.text()}"
            ) from exc
        if not ready:
            self.close()
            raise SandboxError(f"the kernel fork server did not start; log: {self._log.text(wait_s=2)}")
        self._sock.settimeout(None)
        threading.Thread(target=self._read, name="kernel-fork-server", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def fork(self, request: dict[str, Any], log_fd: int, namespaces: dict[str, int]) -> ForkedKernel:
        """Fork a kernel into the sandbox whose namespace descriptors are `namespaces`."""
        names = [name for name in NAMESPACES if name in namespaces]
        answers: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=1)
        with self._send_lock:
            self._next_id += 1
            ident = self._next_id
            self._replies[ident] = answers
            message = json.dumps({**request, "id": ident, "namespaces": names}).encode()
            try:
                socket.send_fds(self._sock, [message], [log_fd, *(namespaces[n] for n in names)])
            except OSError as exc:
                self._replies.pop(ident, None)
                raise SandboxError(
                    f"the kernel fork server is gone ({exc}); log: {self._log.text()}"
                ) from exc
        try:
            reply = answers.get(timeout=REPLY_TIMEOUT_S)
        except queue.Empty:
            raise SandboxError(
                f"the kernel fork server did not answer within {REPLY_TIMEOUT_S:g} s; log: {self._log.text()}"
            ) from None
        finally:
            self._replies.pop(ident, None)
        if "error" in reply:
            raise SandboxError(f"the kernel fork server could not start a kernel: {reply['error']}")
        return reply["kernel"]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        if self._proc.poll() is None:
            self._proc.kill()
        with contextlib.suppress(Exception):
            self._proc.wait(timeout=10)

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            if "exited" in message:
                kernel = self._kernels.pop(message["exited"], None)
                if kernel is not None:
                    kernel.returncode = int(message["code"])
                continue
            if "pid" in message:  # registered here, before any exit of it can be read
                message["kernel"] = self._kernels[message["pid"]] = ForkedKernel(message["pid"], self)
            answers = self._replies.get(message.get("id"))
            if answers is not None:
                answers.put(message)
        log.debug("kernel fork server ended; log: %s", self._log.text())
        for answers in list(self._replies.values()):
            with contextlib.suppress(queue.Full):
                answers.put({"error": f"the fork server ended; log: {self._log.text(wait_s=1)}"})
