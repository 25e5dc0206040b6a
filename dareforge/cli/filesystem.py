"""A file system refusing the run, said in one line: what is wrong with which path, and the setting that moves
it. The CLI's boundary (`app.reporting`) is the one place that asks; stages let these errors through."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from dareforge.config import StoreConfig
from dareforge.config_loader import env_var
from dareforge.errors import MACHINE_ERRNOS, filesystem_errno

PROBLEMS = {
    errno.ENOSPC: ("no space left on device while writing {path}", "free space there"),
    errno.EDQUOT: ("disk quota exceeded while writing {path}", "free space there"),
    errno.EROFS: ("{path} is on a read-only file system", "remount it read-write"),
    errno.EACCES: ("permission denied on {path}", "give this user access to it"),
    errno.EPERM: ("permission denied on {path}", "give this user access to it"),
    errno.ENOTDIR: ("{path} is a file where a folder is needed", "move that file away"),
    errno.EEXIST: ("{path} is a file where a folder is needed", "move that file away"),
    errno.EISDIR: ("{path} is a folder where a file is needed", "move that folder away"),
}
"""What is wrong and the fix on the spot, by errno; the path is the one in the way for ENOTDIR and EEXIST."""


def filesystem_problem(exc: Exception, store: StoreConfig) -> str | None:
    """One line for a file system error a user can fix, naming the path, the fix and the setting that places
    the path; None for any other error (a bug, to be seen with its traceback)."""
    code = filesystem_errno(exc)
    if code not in PROBLEMS:
        return None
    # A copy or rename names its source, then its destination: the destination is the one being written.
    path = getattr(exc, "filename2", None) or getattr(exc, "filename", None)
    if path is None:
        if code not in MACHINE_ERRNOS:  # say, EPERM signalling another user's process: no path to fix
            return None
        path = _fullest_place(store)  # a failed write() names no file
    setting = store.setting_for(path)
    if code in (errno.ENOTDIR, errno.EEXIST):
        path = _file_in_the_way(path)
        if path is None:  # EEXIST for a folder that is there: a race or a bug, not the user's to fix
            return None
    what, fix = PROBLEMS[code]
    instead = f"point {_how_to_set(setting)} at another folder" if setting else "use another path"
    then = "; then run again: finished work is kept" if code in (errno.ENOSPC, errno.EDQUOT) else ""
    return f"{what.format(path=path)}: {fix}, or {instead}{then}"


def _fullest_place(store: StoreConfig) -> str:
    """Of the local places a run writes, the store root and the work dir, the one on the disk with the least
    free space; the root when both are on one disk."""
    by_disk: dict[int, str] = {}
    for place in (store.root, str(store.work_path)):
        if os.path.isdir(place):
            by_disk.setdefault(os.stat(place).st_dev, place)
    return min(by_disk.values(), key=lambda place: shutil.disk_usage(place).free, default=store.root)


def _file_in_the_way(path: str | Path) -> Path | None:
    """The first file on the way down to `path`, where a folder was needed."""
    target = Path(os.path.abspath(path))
    return next((p for p in (*reversed(target.parents), target) if p.exists() and not p.is_dir()), None)


def _how_to_set(key: str) -> str:
    flag = "--store, " if key == "store.root" else ""
    return f"`{key}` ({flag}{env_var(key)} or the config file)"
