"""Scratch folders owned by one process, so two processes never share a scratch path.

`process_folder(base, prefix)` is this process's own folder `<base>/<prefix><pid>-<token>/`, made on first use and
removed at exit. Its owner holds an flock on the sibling file `<prefix><pid>-<token>.lock`, taken before the folder
exists and kept until it is gone; the kernel drops that lock when the process dies however it dies (kill -9
included). So whoever makes a folder under a base first removes the folders there whose lock it can take: their
owners are gone; and every pipeline stage sweeps both bases below before it starts (`remove_dead`), since a stage
with nothing to redo makes no folder. The pid in the name is for people reading a listing; the lock alone decides
(pids are reused, and processes in other pid namespaces may share a temp folder).

Two bases are used: `<store.work_dir>/proc/` for data-sized scratch (task drafts, prepare and DuckDB spill files,
obscured sources), through `RunContext.scratch_dir`; and the system temp folder (`temp_root()`, prefix `dareforge-`)
for sandbox runtimes and agent folders, whose socket paths must stay short and must not name the store.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import re
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

TEMP_PREFIX = "dareforge-"
MNT_DETACH = 0x2


@dataclass
class _Owned:
    folder: Path
    lock: Path
    fd: int


_owned: dict[tuple[int, str], _Owned] = {}
_mutex = threading.Lock()
_at_exit: list[bool] = []


def process_folder(base: Path, prefix: str = "") -> Path:
    """This process's own folder under `base` (see the module doc); stale ones there are removed first."""
    base = Path(base).absolute()
    key = (os.getpid(), f"{base}/{prefix}")
    with _mutex:
        owned = _owned.get(key)
        if owned is not None and not owned.folder.is_dir():
            # Removed under a long-lived process (someone cleared the work dir): claim a new one.
            os.close(owned.fd)
            del _owned[key]
            owned = None
        if owned is None:
            remove_stale(base, prefix)
            owned = _owned[key] = _claim(base, prefix)
            if not _at_exit:
                atexit.register(_release_all)
                _at_exit.append(True)
    return owned.folder


def new_folder(base: Path, name: str, prefix: str = "") -> Path:
    """A fresh, empty folder `<name>-<random>` inside this process's folder under `base`."""
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=process_folder(base, prefix)))


def temp_root() -> Path:
    """This process's folder in the system temp folder: pass it as `dir=` to tempfile's functions."""
    return process_folder(Path(tempfile.gettempdir()), TEMP_PREFIX)


def remove_dead(base: Path) -> list[Path]:
    """Remove the folders whose owner process is gone under `base` and in the system temp folder; returns them.

    A process sweeps a base when it makes its own folder there; this is for one that may make none (a stage
    with nothing to redo), which would otherwise leave a killed run's folders in place run after run."""
    return [*remove_stale(base), *remove_stale(Path(tempfile.gettempdir()), TEMP_PREFIX)]


def _pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(prefix)}\d+-[0-9a-f]{{8}}")


def remove_stale(base: Path, prefix: str = "") -> list[Path]:
    """Remove the folders under `base` whose owner process is gone; returns them."""
    removed: list[Path] = []
    if not base.is_dir():
        return removed
    pattern = _pattern(prefix)
    for lock in sorted(base.glob(f"{prefix}*.lock")):
        name = lock.name.removesuffix(".lock")
        if not pattern.fullmatch(name):
            continue
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue  # another process removed it meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its owner is alive
            folder = base / name
            _detach_mounts(folder)
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
            removed.append(folder)
        finally:
            os.close(fd)
    return removed


def detach_mount(folder: Path | str) -> None:
    """Detach the mount at `folder` (lazily: it goes once nothing uses it); nothing when it is none or we may not."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).umount2(str(folder).encode(), MNT_DETACH)


def _detach_mounts(folder: Path) -> None:
    """A killed process may leave sandbox workspaces (tmpfs mounts, `dareforge.sandbox.disk`) mounted in its
    folder, which then cannot be removed: detach them, deepest first."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    inside = f"{folder}/"
    points = [line.split()[4].replace("\\040", " ") for line in mounts if len(line.split()) > 4]
    for point in sorted((p for p in points if p.startswith(inside)), key=len, reverse=True):
        detach_mount(point)


def _claim(base: Path, prefix: str) -> _Owned:
    base.mkdir(parents=True, exist_ok=True)
    while True:
        name = f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        lock = base / f"{name}.lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A sweeper may have taken the new file's lock in the instant before ours and unlinked it: then the name
        # no longer leads to our lock, and the folder would never be swept. Start over under a new name.
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        folder = base / name
        try:
            folder.mkdir(mode=0o700)
        except OSError as exc:
            os.close(fd)
            if exc.errno != errno.EEXIST:
                raise
            continue
        return _Owned(folder, lock, fd)


def _release_all() -> None:
    pid = os.getpid()
    for key, owned in list(_owned.items()):
        if key[0] != pid:
            continue  # a forked child exiting: the folder is its parent's
        shutil.rmtree(owned.folder, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            owned.lock.unlink()
        os.close(owned.fd)
        del _owned[key]
