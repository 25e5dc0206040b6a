"""Host-side process plumbing for sandboxes: spawning from one thread, killing, /proc walks, workspace scans."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from dareforge.scratch import detach_mount

STOP_TIMEOUT_S = 10.0
"""How long the host waits for a process in a sandbox that it signalled to stop or to end, before it goes on."""


class Spawner:
    """Starts every kernel process from one long-lived thread.

    bwrap's --die-with-parent (PR_SET_PDEATHSIG) fires when the *thread* that forked it ends, so a kernel started
    from a short-lived thread (a pool filler, an executor worker) would be killed with it. This thread lives as
    long as the process.
    """

    _lock = threading.Lock()
    _queue: queue.Queue[tuple[Any, ...]] | None = None

    @classmethod
    def popen(cls, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with cls._lock:
            if cls._queue is None:
                cls._queue = queue.Queue()
                threading.Thread(target=cls._run, name="sandbox-spawner", daemon=True).start()
        reply: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
        cls._queue.put((subprocess.Popen, argv, kwargs, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value

    @classmethod
    def _run(cls) -> None:
        assert cls._queue is not None
        while True:
            popen, argv, kwargs, reply = cls._queue.get()
            try:
                reply.put((True, popen(argv, **kwargs)))
            except BaseException as exc:
                reply.put((False, exc))


class LogTail:
    """A pipe for a kernel's own stdout and stderr, drained by a thread that keeps only the last `keep` bytes.

    What reaches it: bwrap's and the launcher's errors, ipykernel's messages, and whatever code in the sandbox
    writes to the descriptors it inherited. The kernel caps its agent output (`kernel_boot`), but code can write
    to these descriptors directly; drained into a bounded tail they cost the host neither disk nor memory.
    """

    def __init__(self, keep: int):
        self.keep = keep
        self._read, self.write_fd = os.pipe()
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name="sandbox-log", daemon=True)
        self._thread.start()

    def close_writer(self) -> None:
        """Once the kernel process holds the write end: the host's copy would keep the pipe from ending."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def text(self, wait_s: float = 0.0) -> str:
        """The kept end; `wait_s` lets a process that just died finish writing (the pipe ends once every
        process in the sandbox is gone)."""
        if wait_s > 0:
            self._thread.join(wait_s)
        with self._lock:
            return bytes(self._tail).decode("utf-8", "replace").strip()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._read, 1 << 16):
                with self._lock:
                    self._tail += chunk
                    del self._tail[: -self.keep]
        finally:
            os.close(self._read)


def kill_process(holder: dict[str, Any]) -> None:
    """Kill the kernel process (and with it the sandbox) if it is still there."""
    proc = holder.get("proc")
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(OSError):
            if holder.get("group"):
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(timeout=10)


def finalize(holder: dict[str, Any]) -> None:
    """A sandbox garbage-collected or left open at exit: kill it, detach its workspace's tmpfs (its files are
    lost: nobody closed the sandbox to keep them), remove its runtime folder (sockets, logs)."""
    kill_process(holder)
    if holder.get("mount"):
        detach_mount(holder["mount"])
    if holder.get("runtime"):
        shutil.rmtree(holder["runtime"], ignore_errors=True)


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children") as f:
            found += [int(p) for p in f.read().split()]
    return found


def descendants(pid: int) -> list[int]:
    """Live (not zombie) descendants of `pid`, from /proc."""
    seen: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        if child not in seen:
            seen.append(child)
            todo += children(child)
    return [p for p in seen if not gone(p)]


def uid_of(pid: int) -> int | None:
    """The process's real uid, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def state(pid: int) -> str:
    """The process's state letter from /proc (R, S, D, T, t, Z, X...); "X" when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


PF_EXITING = 0x4


def exiting(pid: int) -> bool:
    """The process is gone, a zombie, or on its way out (the kernel's PF_EXITING flag is set at the start of
    an exit, before the process's files, sockets included, are closed)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True
    return fields[0] in ("Z", "X") or bool(int(fields[6]) & PF_EXITING)


def gone(pid: int) -> bool:
    """The process has exited (a zombie counts: it runs nothing and holds nothing)."""
    return state(pid) in ("Z", "X")


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Files (and symlinks, not followed) under `root`: relative path -> (inode, size, mtime ns)."""
    found: dict[str, tuple[int, int, int]] = {}
    todo = [(root, "")]
    while todo:
        folder, prefix = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            rel = prefix + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append((Path(entry.path), rel + "/"))
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found[rel] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return found


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
