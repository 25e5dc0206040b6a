"""A workspace of bounded size: a tmpfs of `sandbox.workspace_mb` mounted on the host at the workspace folder.

Agent code writes its workspace on the host's disk otherwise, without limit (2 GB in one cell, measured). A
tmpfs has a size and an inode count the kernel enforces (a write past them fails with ENOSPC in the agent's
code); its pages are memory, charged to the control group of the process that writes them, so with the
sandbox's group (`cgroups`) they count against `memory_mb` as well.

Lifetime: `mount` when the sandbox starts; `unmount_keeping_files` when it closes (every process in it gone):
the files are copied to the disk (at most the tmpfs's size: regular files, folders and symbolic links as links,
never followed; FIFOs, sockets and devices are dropped) and the folder is a plain one again, as callers
expect. Needs root (mount(2)); elsewhere the workspace is a plain folder and `available()` says why.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import stat
import tempfile
from pathlib import Path

from dareforge.scratch import MNT_DETACH

MS_NOSUID, MS_NODEV, MS_BIND = 0x2, 0x4, 0x1000
MAX_FILES = 100_000
"""Inodes of a workspace: the host lists the workspace after each execution, and a million empty files would
make that listing the agent's weapon."""
COPY_CHUNK = 1 << 20

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


@functools.cache
def available() -> str | None:
    """None when workspaces can be size-bounded here, else why not (tried once per process)."""
    if os.geteuid() != 0:
        return "not root: only root may mount a tmpfs"
    with tempfile.TemporaryDirectory(prefix="dareforge-mount-probe-") as probe:
        try:
            mount(Path(probe), 1 << 20, os.getuid())
        except OSError as exc:
            return f"cannot mount a tmpfs: {exc}"
        _check(_libc.umount2(probe.encode(), MNT_DETACH), f"umount {probe}")
    return None


def mount(folder: Path, size_bytes: int, uid: int) -> None:
    """A tmpfs of `size_bytes` (and `MAX_FILES` inodes) at `folder`, owned by `uid`, mode 0700."""
    options = f"size={size_bytes},nr_inodes={MAX_FILES},mode=0700,uid={uid},gid={uid}"
    _check(
        _libc.mount(b"tmpfs", str(folder).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()),
        f"mount a tmpfs at {folder}",
    )


def move(mounted: Path, folder: Path) -> None:
    """Show the tmpfs at `mounted` at `folder` instead (an empty folder): a bind there, then `mounted` detached.
    The sandbox's own view of the tmpfs (its bind mount, in its mount namespace) is not touched."""
    _check(_libc.mount(str(mounted).encode(), str(folder).encode(), None, MS_BIND, None), f"bind {folder}")
    _check(_libc.umount2(str(mounted).encode(), MNT_DETACH), f"umount {mounted}")


def unmount_keeping_files(folder: Path) -> None:
    """Copy the tmpfs's files to a plain folder beside it, unmount, and put the plain folder in its place."""
    kept = Path(tempfile.mkdtemp(prefix=f".{folder.name}-kept-", dir=folder.parent))
    try:
        copy_tree(folder, kept)
        _check(_libc.umount2(str(folder).encode(), MNT_DETACH), f"umount {folder}")
        folder.rmdir()
        kept.rename(folder)
    except BaseException:
        shutil.rmtree(kept, ignore_errors=True)
        raise


def copy_tree(src: Path, dst: Path) -> None:
    """What agent code left, copied without following a link or opening anything but a regular file."""
    todo = [(src, dst)]
    while todo:
        here, there = todo.pop()
        for entry in os.scandir(here):
            target = there / entry.name
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                target.mkdir()
                todo.append((Path(entry.path), target))
            elif stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(entry.path), target)
            elif stat.S_ISREG(info.st_mode):
                _copy_file(entry.path, target, info.st_mode)


def _copy_file(src: str, dst: Path, mode: int) -> None:
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # replaced by a link or removed since the scan: dropped
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            return
        with open(dst, "xb") as target:
            shutil.copyfileobj(source, target, COPY_CHUNK)
        os.chmod(dst, stat.S_IMODE(mode) & 0o777)
