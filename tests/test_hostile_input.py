"""Hostile input at the crawl boundary: what a mirror folder or a download may hold that must not get through.

Zip archives have their own suite (tests/test_unpack.py); these cases are local files: symbolic links out of a
source folder, special files, links swapped in while the crawl copies, folders that clash on one id, and
binary or sparse files under a table's name.
"""

from __future__ import annotations

import codecs
import json
import os
import random
import subprocess
import tracemalloc

import pytest

from dareforge.config import SourceOverride
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.crawlers.unpack import copy_plain_file, plain_files
from dareforge.describe import LONGEST_LINE, describe_file
from dareforge.errors import UnsafeFileError
from dareforge.generators.prepare import prepare
from dareforge.schema import Source, SourceStatus
from dareforge.understand.understand_stage import understand

TRAIN = "id,x,label\n" + "".join(f"{i},{i * 0.5},{'ab'[i % 2]}\n" for i in range(150))
SECRET = "root:$6$not-a-real-hash:19000:0:99999:7:::\n"


def _dataset(folder, name: str, files: dict[str, bytes] | None = None):
    folder.mkdir(parents=True)
    meta = {"id": f"someone/{name}", "title": name, "lastUpdated": "2024-02-02"}
    (folder / "dataset-metadata.json").write_text(json.dumps(meta))
    for fname, data in (files or {}).items():
        (folder / fname).parent.mkdir(parents=True, exist_ok=True)
        (folder / fname).write_bytes(data)
    return folder


@pytest.fixture
def outside(tmp_path):
    """Files outside the mirror: a host secret and a private answer file."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "shadow").write_text(SECRET)
    (private / "answers.csv").write_text(TRAIN)
    return private


@pytest.fixture
def mirror_root(tmp_path, ctx):
    root = tmp_path / "mirror"
    root.mkdir()
    ctx.config.builtin.enabled = False
    ctx.config.mirror.paths = [str(root)]
    ctx.config.crawl.max_failure_share = 1.0
    return root


def _records(ctx) -> dict[str, Source]:
    return {s.id: s for s in ctx.store.read_records(Source)}


def _store_holds(ctx, text: str) -> list[str]:
    """Store files whose bytes contain `text` (records included): what would leak into a release."""
    found = subprocess.run(["grep", "-rlF", text, ctx.store.root], capture_output=True, text=True)
    return found.stdout.split()


def _link_secret(folder, outside):
    (folder / "secret.csv").symlink_to(outside / "shadow")


def _link_train(folder, outside):
    (folder / "train.csv").symlink_to(outside / "answers.csv")


def _link_subfolder(folder, outside):
    (folder / "more").symlink_to(outside)


def _link_inside(folder, outside):
    (folder / "alias.csv").symlink_to(folder / "data.csv")


def _link_metadata(folder, outside):
    (outside / "meta.json").write_text(json.dumps({"id": "someone/linked", "title": SECRET}))
    (folder / "dataset-metadata.json").unlink()
    (folder / "dataset-metadata.json").symlink_to(outside / "meta.json")


@pytest.mark.parametrize(
    ("plant", "link", "target", "sid"),
    [
        (_link_secret, "secret.csv", "private/shadow", "mirror.someone--linked"),
        (_link_train, "train.csv", "private/answers.csv", "mirror.someone--linked"),
        (_link_subfolder, "more", "private", "mirror.someone--linked"),
        (_link_inside, "alias.csv", "data.csv", "mirror.someone--linked"),
        # The metadata is the link, so it is not read: the record falls back to the folder's name.
        (_link_metadata, "dataset-metadata.json", "private/meta.json", "mirror.linked"),
    ],
)
def test_a_link_in_a_mirror_folder_fails_the_source_and_copies_nothing(
    ctx, mirror_root, outside, plant, link, target, sid
):
    folder = _dataset(mirror_root / "linked", "linked", {"data.csv": TRAIN.encode()})
    plant(folder, outside)
    _dataset(mirror_root / "fine", "fine", {"data.csv": TRAIN.encode()})
    report = crawl(ctx)
    assert report.counts == {"downloaded": 1, "failed": 1}
    (failed,) = [s for s in _records(ctx).values() if s.status == SourceStatus.FAILED]
    assert failed.id == sid and failed.files == [] and failed.raw_version is None
    assert f"{link} -> {outside.parent}" in failed.status_detail and target in failed.status_detail
    assert "replace each link with a copy of its target" in failed.status_detail
    assert not ctx.store.exists(f"raw/{sid}")
    assert _store_holds(ctx, "not-a-real-hash") == []


def test_a_link_planted_in_a_stored_source_fails_that_source(ctx, mirror_root, outside):
    folder = _dataset(mirror_root / "planted", "planted", {"data.csv": TRAIN.encode()})
    crawl(ctx)
    stored = _records(ctx)["mirror.someone--planted"]
    _link_secret(folder, outside)
    crawl(ctx)
    (now,) = _records(ctx).values()  # the source's own record, not a second one beside it
    assert now.id == stored.id and now.status == SourceStatus.FAILED and now.raw_version == stored.version
    assert "secret.csv -> " in now.status_detail
    assert _store_holds(ctx, "not-a-real-hash") == []
    filter_sources(ctx)
    assert _why_dropped(ctx)[f"{stored.id}/fetched"].startswith("crawl failed: ")


def test_a_mirror_source_folder_that_links_out_is_refused(ctx, mirror_root, tmp_path):
    real = _dataset(tmp_path / "elsewhere" / "outside", "outside", {"data.csv": TRAIN.encode()})
    (mirror_root / "outside").symlink_to(real)
    crawl(ctx)
    (source,) = _records(ctx).values()
    assert source.status == SourceStatus.FAILED and source.files == []
    assert source.status_detail.startswith(
        f"mirror folder {mirror_root / 'outside'} is a symbolic link to {real}"
    )
    assert "add the folder holding the real source folders to mirror.paths" in source.status_detail
    assert not ctx.store.exists("raw/mirror.outside")


def test_a_fifo_in_a_mirror_folder_is_refused_not_read(ctx, mirror_root):
    folder = _dataset(mirror_root / "piped", "piped", {"data.csv": TRAIN.encode()})
    os.mkfifo(folder / "train.csv")  # reading it would block the crawl forever
    crawl(ctx)
    (source,) = _records(ctx).values()
    assert source.status == SourceStatus.FAILED and "train.csv (a FIFO)" in source.status_detail


def test_a_link_in_a_download_is_refused_at_unpack(ctx, outside):
    """Any crawler's download (Kaggle's client writes files itself) goes through the same walk."""

    class LinkingCrawler:
        name = "linking"

        def list_sources(self):
            yield Source(
                id="linking.one",
                origin="kaggle-dataset",
                kind="dataset",
                ref="a/one",
                title="one",
                version="v1",
            )

        def download(self, source, dest):
            dest.mkdir(parents=True)
            (dest / "data.csv").write_text(TRAIN)
            (dest / "train.csv").symlink_to(outside / "answers.csv")

    ctx.config.crawl.max_failure_share = 1.0
    report = crawl(ctx, crawlers=[LinkingCrawler()])
    assert report.counts == {"failed": 1}
    assert f"train.csv -> {outside / 'answers.csv'}" in report.failures["linking.one"]
    assert not ctx.store.exists("raw/linking.one")


def test_the_copy_refuses_a_file_swapped_for_a_link_after_the_walk(tmp_path, outside):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "train.csv").write_text(TRAIN)
    (file,) = plain_files(folder)
    (folder / "train.csv").unlink()
    (folder / "train.csv").symlink_to(outside / "answers.csv")
    with pytest.raises(UnsafeFileError, match="became a symbolic link after the crawl listed it"):
        copy_plain_file(file, tmp_path / "out" / "train.csv")
    assert not (tmp_path / "out" / "train.csv").exists()


def test_the_copy_refuses_a_parent_folder_swapped_for_a_link_after_the_walk(tmp_path, outside):
    folder = tmp_path / "src"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "answers.csv").write_text(TRAIN)
    (file,) = plain_files(folder)
    (folder / "data").rename(tmp_path / "moved")
    (folder / "data").symlink_to(outside)  # same file name, now outside: O_NOFOLLOW alone would not see it
    with pytest.raises(UnsafeFileError, match="was replaced"):
        copy_plain_file(file, tmp_path / "out" / "answers.csv")
    assert not (tmp_path / "out" / "answers.csv").exists()


SPARSE_BYTES = 50 * 2**20


def _sparse_file(path, size: int = SPARSE_BYTES, head: bytes = b""):
    """A file of `size` bytes, all of them a hole after `head` (skips where the file system cannot do holes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
    if os.stat(path).st_blocks * 512 > 2**20:
        pytest.skip(f"{path.parent} does not keep files sparse")
    return path


def test_the_copy_keeps_a_sparse_file_sparse(tmp_path):
    source = _sparse_file(tmp_path / "src" / "data.csv", head=b"id,x\n1,2\n")
    (file,) = plain_files(source.parent)
    copy_plain_file(file, tmp_path / "out" / "data.csv")
    copied = tmp_path / "out" / "data.csv"
    assert copied.stat().st_size == SPARSE_BYTES
    assert copied.stat().st_blocks * 512 <= 2 * 2**20  # the first block and holes, not 50 MB of zeros
    with open(source, "rb") as a, open(copied, "rb") as b:
        while block := a.read(1 << 20):
            assert b.read(1 << 20) == block


def _competition(folder, train: str):
    folder.mkdir(parents=True)
    meta = {"title": folder.name, "deadline": "2024-05-01T00:00:00Z"}  # no "ref": the folder name is the ref
    (folder / "competition-metadata.json").write_text(json.dumps(meta))
    (folder / "train.csv").write_text(train)
    (folder / "sample_submission.csv").write_text("id,label\n1,a\n")


def test_folders_that_sanitise_to_one_id_are_refused_by_name_not_overwritten(ctx, mirror_root):
    _competition(mirror_root / "unnamed", TRAIN)
    _competition(mirror_root / "Unnamed!", TRAIN.replace(",a\n", ",c\n"))
    report = crawl(ctx)
    assert sum(report.counts.values()) == len(_records(ctx)) == 1
    (source,) = _records(ctx).values()
    assert source.id == "mirror.unnamed" and source.status == SourceStatus.FAILED
    assert source.status_detail == (
        f"mirror folders {mirror_root / 'Unnamed!'}, {mirror_root / 'unnamed'} all give the source id "
        "mirror.unnamed: their refs 'Unnamed!', 'unnamed' differ only in case or punctuation; rename all but "
        "one (the folder, or the ref/id in its metadata when it has one), so each has its own id"
    )
    assert not ctx.store.exists("raw/mirror.unnamed")

    (mirror_root / "Unnamed!").rename(mirror_root / "unnamed-two")  # the fix the message names
    crawl(ctx)
    records = _records(ctx)
    assert {sid: s.status for sid, s in records.items()} == {
        "mirror.unnamed": SourceStatus.OK,
        "mirror.unnamed-two": SourceStatus.OK,
    }


def test_a_copied_folder_does_not_replace_the_stored_source(ctx, mirror_root):
    _dataset(mirror_root / "titanic", "titanic", {"data.csv": TRAIN.encode()})
    crawl(ctx)
    stored = _records(ctx)["mirror.someone--titanic"]
    _dataset(mirror_root / "titanic-copy", "titanic", {"data.csv": TRAIN.replace(",a\n", ",c\n").encode()})
    crawl(ctx)
    (now,) = _records(ctx).values()
    assert (
        now.status == SourceStatus.FAILED and now.raw_version == stored.version and now.files == stored.files
    )
    assert now.status_detail.startswith(
        f"mirror folders {mirror_root / 'titanic'}, {mirror_root / 'titanic-copy'} all give the source id "
        "mirror.someone--titanic: all hold the ref 'someone/titanic'; remove the copies"
    )
    assert ctx.store.verify(f"raw/{stored.id}/{stored.version}") == []


GARBAGE = random.Random(12).randbytes(200_000)


@pytest.mark.parametrize(
    ("content", "encoding"),
    [
        (GARBAGE, "binary: 258 NUL bytes in its first 65,536 bytes, the first at offset 87"),
        (b"\0" * 5000, "binary: 5,000 NUL bytes in its first 5,000 bytes, the first at offset 0"),
        (
            TRAIN.encode() + b"\0" * 5000,
            "binary: 5,000 NUL bytes in its first 6,531 bytes, the first at offset 1531",
        ),
        # UTF-16 holds NULs and is still text an encoding reads: with a byte-order mark, and without.
        (TRAIN.encode("utf-16"), "undecodable: byte 0xff at offset 0"),
        (TRAIN.encode("utf-16-le"), "utf-8"),
        ("caf\xe9,1\n".encode("latin-1"), "undecodable: byte 0xe9 at offset 3"),
        (codecs.BOM_UTF8 + TRAIN.encode(), "utf-8-sig"),
    ],
    ids=["random", "nul", "nul-tail", "utf16-bom", "utf16-no-bom", "latin1", "utf8-bom"],
)
def test_describe_tells_binary_from_text_in_other_encodings(tmp_path, content, encoding):
    (tmp_path / "data.csv").write_bytes(content)
    described = describe_file(tmp_path / "data.csv", "data.csv")
    assert described.encoding == encoding
    if encoding.startswith("binary"):
        assert described.columns is None and described.rows is None


def test_describe_leaves_files_that_are_not_text_tables_alone(tmp_path):
    (tmp_path / "weights.bin").write_bytes(GARBAGE)
    assert describe_file(tmp_path / "weights.bin", "weights.bin").encoding is None


def _why_dropped(ctx) -> dict[str, str]:
    rows = ctx.store.connect().sql("select source_id, rule, reason from filter_decisions where not kept")
    return {f"{sid}/{rule}": reason for sid, rule, reason in rows.fetchall()}


def test_binary_garbage_named_csv_is_not_a_text_table_at_filter_and_prepare(ctx, mirror_root):
    _dataset(mirror_root / "junk", "junk", {"data.csv": TRAIN.encode(), "junk.csv": GARBAGE})
    sid = "mirror.someone--junk"
    crawl(ctx)
    filter_sources(ctx)
    reason = _why_dropped(ctx)[f"{sid}/readable-tables"]
    assert reason == (
        "junk.csv is not a text table (258 NUL bytes in its first 65,536 bytes, the first at offset 87), so no "
        f"encoding reads it; replace it at the source, name another table under sources.{sid}.table, or "
        "exclude the source with rules.excluded_ids"
    )
    # An encoding does not make it text (latin-1 decodes any bytes): still dropped, and prepare says why.
    ctx.config.sources[sid] = SourceOverride(encoding="latin-1", table="junk.csv", target=["label"])
    filter_sources(ctx)
    assert f"{sid}/readable-tables" in _why_dropped(ctx)
    report = understand(ctx, [sid])
    assert report.labels("unframed") == [sid]
    assert report.failures[sid] == (
        f"source: {sid}: sources.{sid}.table names 'junk.csv', which is not a table of the source (tables: "
        "data.csv); junk.csv is not a text table (binary: 258 NUL bytes in its first 65,536 bytes, the first at "
        "offset 87)"
    )
    # The fix the filter names: another table.
    ctx.config.sources[sid] = SourceOverride(table="data.csv", target=["label"])
    filter_sources(ctx)
    assert f"{sid}/readable-tables" not in _why_dropped(ctx)
    assert understand(ctx, [sid]).labels("framed") == [sid]
    assert prepare(ctx, [sid]).labels("prepared") == [f"{sid}/classification-label"]


def _one_line(fields: int) -> bytes:
    """A CSV on one line of about 8 bytes a field, with no line break at all (as seen: 300 MB of it)."""
    return ",".join(f"v{i:06d}" for i in range(fields)).encode()


@pytest.mark.parametrize(
    "content",
    [_one_line(800_000), _one_line(800_000) + b"\n" + TRAIN.encode()],
    ids=["no-break", "break-too-late"],
)
def test_describe_notes_a_table_with_no_line_break_in_reach_without_reading_it_whole(tmp_path, content):
    (tmp_path / "data.csv").write_bytes(content)
    assert len(content) > 1.5 * LONGEST_LINE  # a few MB stand in for the 300
    tracemalloc.start()
    try:
        described = describe_file(tmp_path / "data.csv", "data.csv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert described.note == "not read as a table: no line break in its first 2,097,152 bytes"
    assert described.rows is None and described.columns is None
    assert peak < len(content) / 2  # read block by block, never whole


def test_a_csv_on_one_line_is_dropped_with_that_reason_not_as_zero_rows(ctx, mirror_root):
    _dataset(mirror_root / "oneline", "oneline", {"data.csv": _one_line(400_000)})
    sid = "mirror.someone--oneline"
    crawl(ctx)
    filter_sources(ctx)
    dropped = _why_dropped(ctx)
    no_break = "data.csv: not read as a table: no line break in its first 2,097,152 bytes"
    assert dropped[f"{sid}/readable-tables"] == (
        f"{no_break}; replace it at the source, name another table under sources.{sid}.table, or exclude the "
        "source with rules.excluded_ids"
    )
    assert no_break in dropped[f"{sid}/enough-rows"]
    assert not any("0 rows" in reason for reason in dropped.values())


def _disk_bytes(root) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_blocks * 512 for d, _, names in os.walk(root) for f in names)


def test_a_sparse_file_named_csv_is_described_as_binary_and_not_stored(ctx, mirror_root):
    folder = _dataset(mirror_root / "sparse", "sparse", {"labels.csv": TRAIN.encode()})
    _sparse_file(folder / "data.csv")
    sid = "mirror.someone--sparse"
    assert crawl(ctx).counts == {"downloaded": 1}
    source = _records(ctx)[sid]
    data = next(f for f in source.files if f.name == "data.csv")
    assert data.size == SPARSE_BYTES and data.encoding.startswith("binary: 65,536 NUL bytes")
    assert not ctx.store.exists(f"raw/{sid}/{source.version}/files/data.csv")
    assert ctx.store.exists(f"raw/{sid}/{source.version}/files/labels.csv")
    assert ctx.store.verify(f"raw/{sid}/{source.version}") == []
    assert _disk_bytes(ctx.store.root) < 2**20  # not the 50 MB of NULs
    # Nothing left in the work folder but the mirror's small hash memo (no copy of the NULs)
    memo = os.path.join(ctx.config.store.work_dir, "mirror-digests.json")
    assert _disk_bytes(ctx.config.store.work_dir) == os.lstat(memo).st_blocks * 512 <= 8192

    # A re-crawl finds it unchanged and still lists the file, so the filter can say what is wrong with it.
    assert crawl(ctx).counts == {"unchanged": 1}
    assert _records(ctx)[sid].files == source.files
    filter_sources(ctx)
    assert _why_dropped(ctx)[f"{sid}/readable-tables"].startswith(
        "data.csv is not a text table (65,536 NUL bytes in its first 65,536 bytes, the first at offset 0)"
    )


def test_a_corrupt_parquet_file_is_named_in_the_failure(ctx, mirror_root):
    _dataset(mirror_root / "pq", "pq", {"data/train.parquet": GARBAGE[:5000]})
    report = crawl(ctx)
    assert report.failures["mirror.someone--pq"].startswith(
        "data/train.parquet is not a readable Parquet file (Parquet magic bytes not found"
    )
