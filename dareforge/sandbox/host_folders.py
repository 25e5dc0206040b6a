"""The sandbox's folders on the host: whether a workspace can be bounded (a tmpfs of `workspace_mb`, `disk`),
handing the workspace to the sandbox's uid, warning of inputs the sandbox cannot read, and reading back a file
agent code wrote without following its links."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import stat
from pathlib import Path, PurePosixPath

from dareforge.config import SandboxConfig
from dareforge.sandbox import disk, isolation
from dareforge.sandbox.sandbox_errors import SandboxError

log = logging.getLogger(__name__)


def bounds_workspaces(config: SandboxConfig) -> bool:
    """Workspaces are tmpfs mounts of `workspace_mb` (isolated kernels, as root, where mounts work), else
    plain folders without a size limit (the reason is logged once)."""
    if not (isolation.probe().available and os.geteuid() == 0):
        return False
    reason = disk.available()
    if reason is not None:
        _warn_unbounded(reason)
    return reason is None


@functools.cache
def _warn_unbounded(reason: str) -> None:
    log.warning("sandbox workspaces have no size limit (%s): sandbox.workspace_mb is not enforced", reason)


def chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                os.lchown(os.path.join(folder, name), uid, uid)


def warn_unreadable_inputs(inputs: Path) -> None:
    for folder, dirs, files in os.walk(inputs):
        for name in files:
            mode = os.stat(os.path.join(folder, name)).st_mode
            if not mode & stat.S_IROTH:
                log.warning("%s is not world-readable: the sandboxed kernel cannot read it", name)
        for name in dirs:
            mode = os.stat(os.path.join(folder, name)).st_mode
            if not mode & stat.S_IXOTH:
                log.warning("folder %s is not world-searchable: the sandboxed kernel cannot list it", name)


def read_workspace_file(workspace: Path, relpath: str, max_bytes: int | None = None) -> bytes:
    """Read a file agent code wrote under `workspace`, safely: no symlinks, no FIFOs, nothing outside."""
    parts = PurePosixPath(relpath).parts
    if not parts or PurePosixPath(relpath).is_absolute() or ".." in parts:
        raise SandboxError(f"{relpath!r} is not a relative path inside the workspace")
    nofollow = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, nofollow | os.O_DIRECTORY, dir_fd=fd)
            except OSError as exc:
                raise SandboxError(f"{relpath!r}: {part!r} is not a plain folder ({exc})") from exc
            os.close(fd)
            fd = nxt
        try:
            ffd = os.open(parts[-1], nofollow | os.O_NONBLOCK, dir_fd=fd)
        except OSError as exc:
            raise SandboxError(f"{relpath!r} is missing or not a plain file ({exc})") from exc
    finally:
        os.close(fd)
    with os.fdopen(ffd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise SandboxError(f"{relpath!r} is not a regular file")
        return f.read() if max_bytes is None else f.read(max_bytes)
