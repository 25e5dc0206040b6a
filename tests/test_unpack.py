from __future__ import annotations

import stat
import zipfile

import pytest

from dareforge.config import UnpackLimits
from dareforge.crawlers.unpack import unpack_zip
from dareforge.errors import UnsafeArchiveError


def _zip(path, members: dict[str, bytes], symlink: str | None = None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return path


def _nothing_left(folder) -> bool:
    return [p.name for p in folder.iterdir() if p.name != "a.zip"] == []


def test_extracts_nested_folders(tmp_path):
    archive = _zip(tmp_path / "a.zip", {"train.csv": b"a,b\n1,2\n", "sub/test.csv": b"a\n1\n"})
    files = unpack_zip(archive, tmp_path / "out", UnpackLimits())
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in files) == ["sub/test.csv", "train.csv"]
    assert (tmp_path / "out/train.csv").read_bytes() == b"a,b\n1,2\n"


@pytest.mark.parametrize(
    ("member", "message"),
    [("../evil.csv", "zip slip"), ("ok/../../evil.csv", "zip slip"), ("/etc/evil.csv", "absolute path")],
)
def test_refuses_paths_that_escape(tmp_path, member, message):
    archive = _zip(tmp_path / "a.zip", {"fine.csv": b"x\n", member: b"pwned"})
    with pytest.raises(UnsafeArchiveError, match=message):
        unpack_zip(archive, tmp_path / "out", UnpackLimits())
    assert _nothing_left(tmp_path)
    assert not (tmp_path.parent / "evil.csv").exists()


def test_refuses_symlinks(tmp_path):
    archive = _zip(tmp_path / "a.zip", {"fine.csv": b"x\n"}, symlink="link.csv")
    with pytest.raises(UnsafeArchiveError, match="symbolic link"):
        unpack_zip(archive, tmp_path / "out", UnpackLimits())
    assert _nothing_left(tmp_path)


def test_refuses_a_zip_bomb_by_ratio_without_writing_it_out(tmp_path):
    # 200 MB of zeros compress to about 200 KB: a ratio near 1000.
    archive = _zip(tmp_path / "a.zip", {"bomb.csv": b"\0" * (200 * 1024 * 1024)})
    with pytest.raises(UnsafeArchiveError, match="zip bomb"):
        unpack_zip(archive, tmp_path / "out", UnpackLimits(max_ratio=100))
    assert _nothing_left(tmp_path)


def test_refuses_archives_over_the_total_size_or_member_count(tmp_path):
    archive = _zip(tmp_path / "a.zip", {f"part{i}.csv": bytes(range(256)) * 8 for i in range(5)})
    with pytest.raises(UnsafeArchiveError, match="max_total_bytes"):
        unpack_zip(archive, tmp_path / "out", UnpackLimits(max_total_bytes=4 * 2048))
    with pytest.raises(UnsafeArchiveError, match="5 members"):
        unpack_zip(archive, tmp_path / "out", UnpackLimits(max_members=4))
    assert _nothing_left(tmp_path)


def test_corrupt_archive_names_the_fix(tmp_path):
    archive = tmp_path / "a.zip"
    archive.write_bytes(b"<html>502 Bad Gateway</html>")
    with pytest.raises(UnsafeArchiveError, match=r"not a valid zip archive.*re-crawl"):
        unpack_zip(archive, tmp_path / "out", UnpackLimits())


def test_truncated_member_is_refused_and_cleaned_up(tmp_path):
    archive = _zip(tmp_path / "a.zip", {"data.csv": bytes(range(256)) * 4096})
    raw = archive.read_bytes()
    archive.write_bytes(raw[:2000] + b"\0" * 500 + raw[2500:])
    with pytest.raises(UnsafeArchiveError):
        unpack_zip(archive, tmp_path / "out", UnpackLimits())
    assert _nothing_left(tmp_path)
