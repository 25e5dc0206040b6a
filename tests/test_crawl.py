"""The crawl stage end to end on the builtin catalog and on a mirror folder the test lays out."""

from __future__ import annotations

import json
import os
import zipfile

import pytest

from dareforge.config import SourceOverride
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.errors import DareforgeError
from dareforge.schema import Source, SourceStatus
from dareforge.store import Store

TRAIN = "id,x,label\n" + "".join(f"{i},{i * 0.5},{'ab'[i % 2]}\n" for i in range(150))


def _snapshot(root) -> dict[str, int]:
    """mtime of every stored file; `.locks/` is left out: taking a lock writes its file (who holds it)."""
    return {
        rel: os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, files in os.walk(root)
        for f in files
        if not (rel := os.path.relpath(os.path.join(d, f), root)).startswith(".locks/")
    }


def _records(ctx) -> dict[str, Source]:
    return {s.id: s for s in ctx.store.read_records(Source)}


def test_builtin_recrawl_downloads_and_rewrites_nothing(ctx):
    ctx.config.builtin.include = ["sklearn-iris", "vega-cars", "statsmodels-co2"]
    first = crawl(ctx)
    assert first.counts == {"downloaded": 3}
    filter_sources(ctx)
    before = _snapshot(ctx.store.root)
    again = crawl(ctx)
    refilter = filter_sources(ctx)
    assert again.counts == {"unchanged": 3}
    assert again.written == [] and refilter.written == []
    assert _snapshot(ctx.store.root) == before
    cars = _records(ctx)["builtin.vega-cars"]
    assert cars.files[0].columns[0] == "Name" and cars.files[0].rows == cars.n_rows == 406
    assert ctx.store.verify(f"raw/{cars.id}/{cars.version}") == []


def _mirror_folder(root, name, meta_file=None, meta=None, files=None, zipped=None):
    folder = root / name
    folder.mkdir(parents=True)
    if meta_file:
        (folder / meta_file).write_text(json.dumps(meta))
    for fname, data in (files or {}).items():
        (folder / fname).write_bytes(data)
    if zipped:
        with zipfile.ZipFile(folder / f"{name}.zip", "w", zipfile.ZIP_DEFLATED) as zf:
            for fname, data in zipped.items():
                zf.writestr(fname, data)
    return folder


@pytest.fixture
def mirror(tmp_path, ctx):
    root = tmp_path / "mirror"
    comp = {
        "ref": "mirror-comp",
        "title": "Mirror Comp",
        "deadline": "2023-05-01T00:00:00Z",
        "hasLeaderboard": True,
    }
    _mirror_folder(
        root,
        "mirror-comp",
        "competition-metadata.json",
        comp,
        zipped={
            "train.csv": "\ufeff" + TRAIN,  # a BOM, as Excel writes it
            "test.csv": "id,x\n1,0.5\n",
            "sample_submission.csv": "id,label\n1,a\n",
        },
    )
    latin = "name,price\n" + "".join(f"caf\xe9 {i},{i}\n" for i in range(120))
    _mirror_folder(
        root,
        "latin-prices",
        "dataset-metadata.json",
        {
            "id": "someone/latin-prices",
            "title": "Latin",
            "licenses": [{"name": "CC0-1.0"}],
            "lastUpdated": "2024-02-02",
        },
        files={"prices.csv": latin.encode("latin-1")},
    )
    _mirror_folder(root, "no-metadata", files={"data.csv": TRAIN.encode()})
    _mirror_folder(
        root,
        "broken-zip",
        "dataset-metadata.json",
        {"id": "someone/broken-zip", "title": "Broken"},
        files={"data.zip": b"<html>502 Bad Gateway</html>"},
    )
    _mirror_folder(
        root, "slip", "dataset-metadata.json", {"id": "someone/slip"}, zipped={"../../escape.csv": TRAIN}
    )
    ctx.config.builtin.enabled = False
    ctx.config.mirror.paths = [str(root)]
    ctx.config.crawl.max_failure_share = 1.0
    return root


def test_mirror_crawl_records_every_failure_and_goes_on(ctx, mirror):
    report = crawl(ctx)
    assert report.counts == {"downloaded": 2, "failed": 3}
    records = _records(ctx)
    comp = records["mirror.mirror-comp"]
    assert comp.kind == "competition" and comp.status == SourceStatus.OK
    assert comp.target_columns == ["label"] and comp.id_column == "id"
    train = next(f for f in comp.files if f.name == "train.csv")
    assert train.encoding == "utf-8-sig" and train.columns == ["id", "x", "label"] and train.rows == 150

    no_meta = records["mirror.no-metadata"]
    assert no_meta.status == SourceStatus.FAILED
    assert "has no competition-metadata.json or dataset-metadata.json; add one" in no_meta.status_detail
    assert "not a valid zip archive" in records["mirror.someone--broken-zip"].status_detail
    assert "zip slip" in records["mirror.someone--slip"].status_detail
    assert not (mirror.parent / "escape.csv").exists()

    filter_sources(ctx)
    why = dict(
        ctx.store.connect().sql("select source_id, reason from filter_decisions where not kept").fetchall()
    )
    assert "prices.csv is not UTF-8 (byte 0xe9 at offset" in why["mirror.someone--latin-prices"]
    assert "sources.mirror.someone--latin-prices.encoding" in why["mirror.someone--latin-prices"]
    assert "mirror.mirror-comp" not in why

    # The fix the message names works, without a re-crawl.
    ctx.config.sources["mirror.someone--latin-prices"] = SourceOverride(encoding="latin-1", target=["price"])
    crawl(ctx)
    report = filter_sources(ctx)
    assert "mirror.someone--latin-prices" in report.labels("kept")


def test_a_failed_refresh_keeps_the_stored_version(ctx, mirror):
    crawl(ctx)
    good = _records(ctx)["mirror.mirror-comp"]
    (mirror / "mirror-comp" / "mirror-comp.zip").write_bytes(b"truncated")
    report = crawl(ctx)
    assert "mirror.mirror-comp" in report.failures
    now = _records(ctx)["mirror.mirror-comp"]
    assert now.status == SourceStatus.FAILED and now.raw_version == good.version
    assert now.files == good.files
    assert ctx.store.verify(f"raw/{good.id}/{good.version}") == []


def test_a_mirror_copied_again_is_unchanged_and_a_new_byte_is_a_new_version(ctx, mirror, tmp_path):
    """The shared mirror was provisioned again (same bytes, new modification times) and its sources were crawled,
    prepared and generated again: a version fingerprints the files' contents."""
    crawl(ctx)
    before = _records(ctx)
    stored = {rel: mtime for rel, mtime in _snapshot(ctx.store.root).items() if rel.startswith("raw/")}
    copied = tmp_path / "copied"
    os.rename(mirror, copied)
    for folder in sorted(copied.iterdir()):
        for file in sorted(folder.iterdir()):
            (mirror / folder.name).mkdir(parents=True, exist_ok=True)
            (mirror / folder.name / file.name).write_bytes(file.read_bytes())  # new inodes and times
    again = crawl(ctx)
    assert again.counts["unchanged"] == 2 and "downloaded" not in again.counts
    ok = {sid for sid, source in before.items() if source.status == SourceStatus.OK}
    assert {sid: _records(ctx)[sid] for sid in ok} == {sid: before[sid] for sid in ok}
    assert {
        rel: mtime for rel, mtime in _snapshot(ctx.store.root).items() if rel.startswith("raw/")
    } == stored
    latin = mirror / "latin-prices" / "prices.csv"
    latin.write_bytes(latin.read_bytes().replace(b"caf\xe9 7,", b"caf\xe9 8,"))
    assert crawl(ctx).counts["downloaded"] == 1
    assert (
        _records(ctx)["mirror.someone--latin-prices"].version
        != before["mirror.someone--latin-prices"].version
    )


def test_a_mirror_file_unchanged_since_its_hash_is_not_read_again(ctx, mirror):
    crawl(ctx)
    memo = ctx.work_dir / "mirror-digests.json"
    known = json.loads(memo.read_text())
    prices = str(mirror / "latin-prices" / "prices.csv")
    assert set(known) >= {prices} and all(str(mirror) in path for path in known)
    known[prices][1] = "0" * 64  # a hash the file does not have: used only if the file is not read again
    memo.write_text(json.dumps(known))
    assert crawl(ctx).counts["downloaded"] == 1
    os.utime(prices, ns=(1, 1))  # touched: hashed again, back to the version its bytes give
    assert crawl(ctx).counts["downloaded"] == 1


def test_a_crawl_killed_midway_leaves_no_half_version_and_resumes(ctx, mirror, monkeypatch):
    calls = []
    real_put = Store.put_file

    def put_then_die(self, local, key):
        calls.append(key)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the worker is killed between two files
        real_put(self, local, key)

    monkeypatch.setattr(Store, "put_file", put_then_die)
    with pytest.raises(KeyboardInterrupt):
        crawl(ctx)
    assert not ctx.store.exists("raw/mirror.mirror-comp/_CURRENT.json")
    monkeypatch.setattr(Store, "put_file", real_put)
    report = crawl(ctx)
    assert report.counts["downloaded"] == 2
    comp = _records(ctx)["mirror.mirror-comp"]
    assert ctx.store.verify(f"raw/{comp.id}/{comp.version}") == []


def test_error_budget_fails_the_crawl_after_recording_everything(ctx, mirror):
    ctx.config.crawl.max_failure_share = 0.5
    with pytest.raises(DareforgeError, match=r"3 of 5 sources failed, over crawl\.max_failure_share=0\.5"):
        crawl(ctx)
    assert len(_records(ctx)) == 5


def test_a_missing_mirror_path_is_a_listing_error(ctx, tmp_path):
    ctx.config.builtin.enabled = False
    ctx.config.mirror.paths = [str(tmp_path / "nowhere")]
    report = crawl(ctx)
    assert "is not a folder; fix mirror.paths" in report.outcomes["listing failed"]["mirror"]


def test_a_relative_mirror_path_crawls(ctx, mirror, monkeypatch):
    monkeypatch.chdir(mirror.parent)
    ctx.config.mirror.paths = [mirror.name]
    crawl(ctx)
    comp = _records(ctx)["mirror.mirror-comp"]
    assert comp.status == SourceStatus.OK and comp.url == (mirror / "mirror-comp").as_uri()
