"""Safe reading of what a crawler brought in: local folders walked without following links, zip archives
unpacked without escaping their target.

Local folders (a mirror source, a download): every symbolic link, to a file or a folder, inside the folder or
out of it, and every special file (FIFO, device, socket) is refused, never followed or skipped. A link in a
mirror folder would otherwise copy whatever it points at (a host's password hashes, a private answer file)
into the store, and from there into a task's public files. The copy opens each file with O_NOFOLLOW and checks
it is still the file the walk saw, so a link swapped in between the walk and the copy is refused too.

Archives: refuses members that would land outside the target (zip slip), absolute paths, symbolic links, and
archives whose member count or expanded size exceed the limits (zip bombs). Sizes are counted while
streaming, not taken from the headers, which an attacker controls. Everything is extracted into a temp folder
first and renamed into place only when the whole archive passed, so a refusal leaves nothing half-extracted.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from dareforge.config import UnpackLimits
from dareforge.errors import UnsafeArchiveError, UnsafeFileError

CHUNK = 1 << 20
ZERO_BLOCK = bytes(CHUNK)
SPECIAL_FILES = {"p": "a FIFO", "c": "a character device", "b": "a block device", "s": "a socket"}
NAMED_AT_MOST = 5


@dataclass(frozen=True)
class PlainFile:
    """A regular file found by `plain_files`, with the identity its copy is checked against."""

    path: Path
    rel: str  # relative to the walked folder, with forward slashes
    size: int
    mtime_ns: int
    inode: tuple[int, int]  # (st_dev, st_ino) as the walk saw it


def plain_files(folder: Path) -> list[PlainFile]:
    """Every regular file under `folder`, in path order, walking without following any link.

    Refuses the whole folder when anything under it is a symbolic link or a special file, naming each one
    (and each link's target). `folder` itself is the caller's to check.
    """
    found: list[PlainFile] = []
    refused: list[str] = []
    pending = [folder]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                path = Path(entry.path)
                rel = path.relative_to(folder).as_posix()
                if entry.is_symlink():
                    refused.append(f"{rel} -> {os.readlink(path)}")
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(path)
                else:
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        found.append(PlainFile(path, rel, st.st_size, st.st_mtime_ns, (st.st_dev, st.st_ino)))
                    else:
                        kind = SPECIAL_FILES.get(stat.filemode(st.st_mode)[0], "not a regular file")
                        refused.append(f"{rel} ({kind})")
    if refused:
        refused.sort()
        more = f" and {len(refused) - NAMED_AT_MOST} more" if len(refused) > NAMED_AT_MOST else ""
        raise UnsafeFileError(
            f"{folder} holds symbolic links or special files, which the crawl refuses (a link would copy "
            f"whatever it points at, such as a host secret, into the store): {', '.join(refused[:NAMED_AT_MOST])}"
            f"{more}; replace each link with a copy of its target (`cp -L`) or remove it, then re-crawl"
        )
    return sorted(found, key=lambda f: PurePosixPath(f.rel).parts)  # folder by folder, as sorted paths go


def plain_file(folder: Path, name: str) -> PlainFile | None:
    """The file `name` right inside `folder` as `plain_files` lists it; None if missing, a link or special."""
    path = folder / name
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return PlainFile(path, name, st.st_size, st.st_mtime_ns, (st.st_dev, st.st_ino))


@contextmanager
def open_plain(file: PlainFile) -> Iterator[BinaryIO]:
    """Open a file `plain_files` found, refusing it if it was swapped for a link or another file since."""
    try:
        # O_NONBLOCK: a FIFO swapped in after the walk must not hang the crawl in open().
        fd = os.open(file.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UnsafeFileError(
            f"{file.path} became a symbolic link after the crawl listed it; refusing to follow it; "
            "re-crawl once the folder holds regular files only"
        ) from exc
    with os.fdopen(fd, "rb", buffering=0) as fh:
        st = os.fstat(fh.fileno())
        # O_NOFOLLOW guards the last path component only; the inode check catches a parent folder swapped
        # for a link (or the file replaced) between the walk and the open.
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != file.inode:
            raise UnsafeFileError(
                f"{file.path} was replaced (by a link, a special file or another file) after the crawl "
                "listed it; refusing to read it; re-crawl once the folder no longer changes"
            )
        yield fh


def copy_plain_file(file: PlainFile, dest: Path) -> None:
    """Copy a file `plain_files` found to `dest`, keeping it sparse: all-zero blocks become holes.

    A sparse file (seen: a 2 GB `.csv` of NULs) would otherwise cost its full size on disk at every copy.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open_plain(file) as src, open(dest, "wb") as dst:
        while block := src.read(CHUNK):
            if block == ZERO_BLOCK[: len(block)]:
                dst.seek(len(block), os.SEEK_CUR)
            else:
                dst.write(block)
        dst.truncate()  # a trailing hole: the file ends where the last seek left it


def _safe_member_path(archive: Path, name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or (path.parts and path.parts[0].endswith(":")):
        raise UnsafeArchiveError(f"{archive.name}: member {name!r} has an absolute path; refusing to extract")
    if ".." in path.parts:
        raise UnsafeArchiveError(f"{archive.name}: member {name!r} escapes the target folder (zip slip)")
    return path


def unpack_zip(archive: Path, target: Path, limits: UnpackLimits) -> list[Path]:
    """Extract `archive` into `target` (which must not exist yet); returns the extracted file paths."""
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as exc:
        raise UnsafeArchiveError(
            f"{archive.name} is not a valid zip archive ({exc}); the download is corrupt: delete it and re-crawl"
        ) from exc
    with zf:
        members = [m for m in zf.infolist() if not m.is_dir()]
        if len(members) > limits.max_members:
            raise UnsafeArchiveError(
                f"{archive.name} has {len(members)} members, over unpack.max_members={limits.max_members}; "
                "raise the limit in dareforge.yaml if the archive is trusted"
            )
        for member in members:
            _safe_member_path(archive, member.filename)
            if stat.S_ISLNK(member.external_attr >> 16):
                raise UnsafeArchiveError(
                    f"{archive.name}: member {member.filename!r} is a symbolic link; refusing"
                )
        staging = target.parent / f".tmp-{uuid.uuid4().hex}-{target.name}"
        staging.mkdir(parents=True)
        try:
            extracted = _extract(zf, archive, members, staging, limits)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return [target / p.relative_to(staging) for p in extracted]


def _extract(
    zf: zipfile.ZipFile, archive: Path, members: list[zipfile.ZipInfo], staging: Path, limits: UnpackLimits
) -> list[Path]:
    total = 0
    written = []
    for member in members:
        out = staging.joinpath(*_safe_member_path(archive, member.filename).parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        member_bytes = 0
        budget = max(member.compress_size, 1) * limits.max_ratio
        try:
            with zf.open(member) as src, open(out, "wb") as dst:
                while block := src.read(CHUNK):
                    member_bytes += len(block)
                    total += len(block)
                    if total > limits.max_total_bytes:
                        raise UnsafeArchiveError(
                            f"{archive.name} expands past unpack.max_total_bytes={limits.max_total_bytes} "
                            "(zip bomb?); raise the limit in dareforge.yaml if the archive is trusted"
                        )
                    if member_bytes > budget and member_bytes > CHUNK:
                        raise UnsafeArchiveError(
                            f"{archive.name}: member {member.filename!r} expands more than "
                            f"unpack.max_ratio={limits.max_ratio:g}x its compressed size (zip bomb?)"
                        )
                    dst.write(block)
        except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile, zlib.error) as exc:
            raise UnsafeArchiveError(
                f"{archive.name}: member {member.filename!r} is corrupt ({exc}); delete the download and re-crawl"
            ) from exc
        written.append(out)
    return written
