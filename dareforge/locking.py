"""Locks between processes that share a store: `fcntl.flock` on a lock file.

An flock belongs to the open file, so the kernel drops it when the holding process ends however it ends (kill -9
included): a lock never outlives its holder, and there is no pid file to clean up or to trust. Lock files are
never deleted: a process waiting on a deleted lock file would get a lock nobody else can see.

The holder writes who it is (pid, host, since, command) into the file, so a process that finds the lock taken can
say who holds it. Within one process a lock is re-entrant for the thread holding it and excludes other threads.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from dareforge.errors import StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LockHolder:
    """Who holds a lock, as the holder wrote it (all None while a new holder has not written yet)."""

    pid: int | None = None
    host: str | None = None
    since: str | None = None
    command: str | None = None

    @classmethod
    def me(cls) -> LockHolder:
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"
        return cls(
            pid=os.getpid(),
            host=socket.gethostname(),
            since=datetime.now(UTC).isoformat(timespec="seconds"),
            command=command[:200],
        )

    @classmethod
    def read(cls, path: Path) -> LockHolder:
        try:
            data = json.loads(path.read_bytes() or b"{}")
        except (OSError, ValueError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        return cls(**{k: data.get(k) for k in ("pid", "host", "since", "command")})

    def describe(self) -> str:
        if self.pid is None:
            return "another process (which has not written its name into the lock file yet)"
        return f"pid {self.pid} on host {self.host} since {self.since} (`{self.command}`)"


class StoreBusyError(StoreError):
    """A store lock is held by another process (or thread) and the caller chose not to wait."""

    def __init__(self, name: str, path: Path, holder: LockHolder):
        self.name, self.path, self.holder = name, path, holder
        super().__init__(
            f"{name} is in use by {holder.describe()}; wait for it to finish, or stop it (its lock file "
            f"{path} is released when that process ends)"
        )


@dataclass
class _Held:
    """One lock file as this process holds it: the threads' re-entrant lock, the flock'ed file, the depth."""

    threads: threading.RLock = field(default_factory=threading.RLock)
    fd: int | None = None
    depth: int = 0


_registry: dict[tuple[int, str], _Held] = {}
_registry_mutex = threading.Lock()


@contextmanager
def hold(path: Path, name: str, *, wait: bool = True) -> Iterator[None]:
    """Hold the lock file `path` (created when missing) for the block; `name` is what messages call it.

    Busy and `wait`: blocks until the holder lets go (logged at INFO with who holds it). Busy and not `wait`:
    raises StoreBusyError naming the holder.
    """
    # Keyed by pid too: a forked child inherits the registry but not its parent's locks.
    key = (os.getpid(), str(path))
    with _registry_mutex:
        held = _registry.setdefault(key, _Held())
    if not held.threads.acquire(blocking=wait):
        raise StoreBusyError(name, path, LockHolder.me())
    try:
        if held.depth == 0:
            held.fd = _acquire(path, name, wait)
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
            if held.depth == 0 and held.fd is not None:
                fd, held.fd = held.fd, None
                os.ftruncate(fd, 0)  # no stale name for the next reader; closing releases the flock
                os.close(fd)
    finally:
        held.threads.release()


def _acquire(path: Path, name: str, wait: bool) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes (PEP 446)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = LockHolder.read(path)
            if not wait:
                raise StoreBusyError(name, path, holder) from None
            log.info("waiting for lock %s, held by %s", name, holder.describe())
            fcntl.flock(fd, fcntl.LOCK_EX)
        me = json.dumps(asdict(LockHolder.me())).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd
