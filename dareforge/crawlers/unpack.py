"""Safe unpacking of downloaded zip archives.

Refuses members that would land outside the target (zip slip), absolute paths, symbolic links, and archives
whose member count or expanded size exceed the limits (zip bombs). Sizes are counted while streaming, not
taken from the headers, which an attacker controls. Everything is extracted into a temp folder first and
renamed into place only when the whole archive passed, so a refusal leaves nothing half-extracted.
"""

from __future__ import annotations

import shutil
import stat
import uuid
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from dareforge.config import UnpackLimits
from dareforge.errors import UnsafeArchiveError

CHUNK = 1 << 20


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
