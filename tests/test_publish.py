"""Releases: built from a real store of three builtin sources, loaded with the real `datasets` client.

One store is built per module (crawl, filter, prepare, generate); tests that change it work on a copy.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import tempfile
from datetime import UTC, date, datetime
from pathlib import Path

import datasets
import pandas as pd
import pyarrow.parquet as pq
import pytest

from dareforge.agents.attempts import release_task_files
from dareforge.context import RunContext
from dareforge.exports.export_format import ExportJob
from dareforge.exports.formats import export_format
from dareforge.generators.taskio import GENERATOR_VERSION
from dareforge.publish import (
    ReleaseError,
    build_release,
    changelog,
    list_versions,
    load_release,
    verify_release,
)
from dareforge.publish.release import UNSHARDED, public_folder
from dareforge.publish.source_split import assign_splits, count_test_sources
from dareforge.publish.targets import LocalTarget, Target
from dareforge.publish.versions import read_build_record
from dareforge.schema import Task, Verdict
from tests.stores import generate_tasks, prediction_only, store_config

SOURCES = ["sklearn-iris", "vega-cars", "statsmodels-co2"]
DAY = date(2026, 1, 15)
SECRET_NAMES = {
    "answers.csv",
    "reference_predictions.csv",
    "reference.py",
    "spec.json",
    "strong_reference.py",
    "strong_predictions.csv",
}


def _context(root: Path, include: list[str]) -> RunContext:
    return RunContext.from_config(prediction_only(store_config(root, include)), show_progress=False)


_pipeline = generate_tasks


def _clone(ctx: RunContext, root: Path, include: list[str] | None = None) -> RunContext:
    shutil.copytree(ctx.config.store.root, root / "store")
    return _context(root, include or list(ctx.config.builtin.include))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    ctx = _context(tmp_path_factory.mktemp("publish"), SOURCES)
    _pipeline(ctx)
    return ctx


@pytest.fixture(scope="module")
def release(store):
    return build_release(store, "bench", today=DAY)


@pytest.fixture(scope="module")
def published(release, tmp_path_factory) -> Path:
    return Path(LocalTarget(tmp_path_factory.mktemp("target")).publish(release.release))


def test_split_rule_puts_recent_sources_in_test_and_sticks():
    dates = {
        "old": datetime(2015, 1, 1, tzinfo=UTC),
        "mid": datetime(2020, 1, 1, tzinfo=UTC),
        "new": datetime(2025, 6, 1, tzinfo=UTC),
        **{f"undated-{i}": None for i in range(8)},
    }
    sides = assign_splits(dates)
    assert [s for s, side in sides.items() if side == "test"] == ["new", "mid"]
    assert count_test_sources(11, 0.2) == 2
    assert assign_splits(dates) == sides  # seeded, stable
    flipped = {k: ("train" if v == "test" else "test") for k, v in sides.items()}
    assert (
        assign_splits({**dates, "newest": datetime(2026, 1, 1, tzinfo=UTC)}, previous=flipped)["old"]
        == "test"
    )
    assert set(assign_splits({"a": None, "b": None}).values()) == {"train", "test"}


CLASS, REG, TS = {"Class-IF", "Class-MM"}, {"Reg-IF", "Reg-MM"}, {"TS-XF", "TS-CF"}


def _dated(*names: str) -> dict[str, datetime]:
    """Sources dated one year apart, the first the most recent."""
    return {name: datetime(2025 - i, 1, 1, tzinfo=UTC) for i, name in enumerate(names)}


def _families_by_side(sides: dict[str, str], families: dict[str, set[str]]) -> dict[str, set[str]]:
    return {
        side: {f for s, on in sides.items() if on == side for f in families[s]} for side in ("train", "test")
    }


def test_split_keeps_every_family_on_both_sides_when_the_recent_sources_lack_one():
    # The default catalog's shape: the most recent sources are tabular, the time series older.
    names = ["tab1", "tab2", "tab3", "ts1", "tab4", "ts2", "tab5", "tab6", "ts3", "tab7", "tab8", "tab9"]
    dates = _dated(*names)
    families = {n: TS if n.startswith("ts") else (CLASS if int(n[-1]) % 2 else REG) for n in names}
    assert [s for s, side in assign_splits(dates).items() if side == "test"] == ["tab1", "tab2"]
    sides = assign_splits(dates, families=families)
    assert [s for s, side in sides.items() if side == "test"] == ["tab1", "tab2", "ts1"]  # the newest series
    by_side = _families_by_side(sides, families)
    assert by_side["train"] == by_side["test"] == CLASS | REG | TS
    assert assign_splits(dates, families=families) == sides  # deterministic


def test_split_sends_a_family_to_train_when_only_test_had_it():
    dates = _dated("ts1", "ts2", *(f"tab{i}" for i in range(8)))
    families = {s: TS if s.startswith("ts") else CLASS for s in dates}
    sides = assign_splits(dates, families=families)
    assert (sides["ts1"], sides["ts2"]) == ("test", "train")  # the older series goes to train
    assert _families_by_side(sides, families)["test"] == CLASS | TS  # class came in from train
    assert [s for s, side in sides.items() if side == "test"] == ["ts1", "tab0"]


def test_split_moves_a_source_only_when_the_side_it_leaves_keeps_all_its_families():
    dates = _dated("a", "b", "c", "d", "e")
    families = {"a": CLASS, "b": REG | TS, "c": REG, "d": TS, "e": CLASS}
    sides = assign_splits(dates, families=families)
    # test lacks Reg: "b" goes, since train keeps Reg ("c") and TS ("d"); TS then reaches test with it
    assert [s for s, side in sides.items() if side == "test"] == ["a", "b"]
    families["d"] = REG  # now "b" is train's only series: moving it would take TS from train
    sides = assign_splits(dates, families=families)
    assert sides["b"] == "train" and [s for s, side in sides.items() if side == "test"] == ["a", "c"]
    assert _families_by_side(sides, families)["train"] >= CLASS | REG | TS


def test_split_families_bend_to_sticky_sides_and_single_sources():
    dates = _dated("tab1", "tab2", "tab3", "ts1", "ts2", "tab4", "tab5", "tab6", "tab7", "tab8")
    families = {s: TS if s.startswith("ts") else CLASS for s in dates}
    previous = {s: ("test" if s in ("tab1", "tab2") else "train") for s in dates if s != "ts2"}
    sides = assign_splits(dates, families=families, previous=previous)
    assert sides["ts1"] == "train"  # sticky: a train source never moves to test
    assert sides["ts2"] == "test"  # the new series may, and train keeps ts1
    lone = {s: (TS if s == "ts1" else CLASS) for s in dates}
    sides = assign_splits(dates, families=lone)
    assert sides["ts1"] == "train" and sides == assign_splits(dates)  # one series: it cannot be on both sides


def test_release_split_is_told_each_sources_families(store, tmp_path, monkeypatch):
    from dareforge.publish import release as release_module

    told: dict[str, set[str]] = {}

    def spy(dates, **kwargs):
        told.update(kwargs["families"])
        return assign_splits(dates, **kwargs)

    monkeypatch.setattr(release_module, "assign_splits", spy)
    result = build_release(_clone(store, tmp_path), "spied", today=DAY)
    expected: dict[str, set[str]] = {}
    for task in store.store.read_records(Task):
        expected.setdefault(task.source_id, set()).add(task.family)
    assert told == expected and len(expected) == len(SOURCES)
    assert (
        result.release.manifest["split_rule"]["families"]
        == "each family on both sides where its sources allow"
    )


def test_release_layout_and_verdict_note(store, release, caplog):
    with caplog.at_level(logging.WARNING):
        result = build_release(store, "bench", today=DAY)  # the module's release exists: nothing new
    assert not result.created and result.version == "2026.01.15"
    assert any("no verdict table" in note for note in result.notes)
    assert "no verdict table: every candidate task is accepted" in caplog.text
    manifest = result.release.manifest
    tasks = store.store.read_records(Task)
    assert sorted(manifest["task_ids"]) == sorted(t.id for t in tasks)
    names = {f["name"] for f in manifest["files"]}
    assert {"README.md", "CHANGELOG.md", "data/train.parquet", "data/test.parquet"} <= names
    for task in tasks:  # one folder per id's first two characters: no Hub folder nears 10,000 entries
        assert {
            f"files/{task.id[:2]}/{task.id}/train.csv",
            f"files/{task.id[:2]}/{task.id}/test.csv",
        } <= names
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in manifest["files"])
    task = tasks[0]  # the release's copy is the task's file, hard-linked: a version costs no second copy
    released = result.release.files_dir(task.id) + "/train.csv"
    inodes = {
        os.stat(store.store.local_path(k)).st_ino for k in (f"tasks/{task.id}/public/train.csv", released)
    }
    assert len(inodes) == 1
    assert manifest["generator_versions"] == [GENERATOR_VERSION] and manifest["verdicts"]["present"] is False
    assert {s["id"] for s in manifest["sources"]} == {f"builtin.{s}" for s in SOURCES}
    assert verify_release(store, "bench") == []
    # when and from which store it was built: in the build record beside the versions, not in released bytes
    assert "created_at" not in manifest and "created_from" not in manifest
    built = read_build_record(store.store, "releases/bench", result.version)
    assert built["created_from"] == store.store.url and datetime.fromisoformat(built["created_at"]).tzinfo
    assert list_versions(store, "bench") == [result.version]  # the record's folder is not a version
    private = result.release.private_manifest
    for task in tasks:
        for f in task.private_files:
            assert f"answers/{task.id[:2]}/{task.id}/{f.name}" in {e["name"] for e in private["files"]}
    # scores, not what the reference runs measured on the building machine (the store keeps that)
    assert all(set(row["scores"]) == {"baseline", "strong"} for row in result.release.private_rows())
    assert all(t.scores.reference_seconds for t in tasks)


def test_datasets_loads_the_published_folder(release, published, tmp_path):
    ds = datasets.load_dataset(str(published), cache_dir=str(tmp_path / "hf"))
    splits = release.release.manifest["splits"]
    assert set(ds) == {"train", "test"}
    assert ds.num_rows == {"train": splits["train"]["tasks"], "test": splits["test"]["tasks"]}
    row = ds["test"][0]
    assert row["instruction"] and row["files"][0]["path"].startswith(f"files/{row['id'][:2]}/{row['id']}/")
    assert (published / row["files"][0]["path"]).is_file()
    readme = (published / "README.md").read_text()
    assert readme.startswith("---\nlicense: other\n") and "size_categories:\n- n<1K" in readme
    assert "| `builtin.statsmodels-co2` |" in readme  # per-source license table
    assert (
        published.parent.parent / "bench-private" / release.version / "data" / "private.parquet"
    ).is_file()


def test_no_source_in_both_splits(release):
    rows = release.release.rows()
    train = {r["source_id"] for r in rows if r["split"] == "train"}
    test = {r["source_id"] for r in rows if r["split"] == "test"}
    assert train and test and not train & test
    assert {r["id"] for r in release.release.rows("test")} == {r["id"] for r in rows if r["split"] == "test"}


def test_public_release_holds_no_answers(store, release, published):
    files = [p for p in published.rglob("*") if p.is_file()]
    assert not {p.name for p in files} & SECRET_NAMES
    for split in ("train", "test"):
        columns = set(pq.read_schema(published / "data" / f"{split}.parquet").names)
        assert not columns & {"answers", "scores", "spec", "private_files", "reference_predictions"}
    secrets = {f.sha256 for t in store.store.read_records(Task) for f in t.private_files}
    public_digests = {f["sha256"] for f in release.release.manifest["files"]}
    assert not public_digests & secrets
    manifest_text = (published / "manifest.json").read_text()
    assert not any(digest in manifest_text for digest in secrets)
    for task in store.store.read_records(Task):
        header = pd.read_csv(published / public_folder(task.id) / "test.csv", nrows=0).columns
        assert not set(header) & set(task.metric.target_columns)


def test_a_version_from_before_sharded_task_folders_is_still_read(store, release, tmp_path):
    """Format 1 kept every task's folder directly under `files/` and `answers/`; stores still hold such
    versions, and evaluating or exporting one must find its files."""
    ctx = _clone(store, tmp_path)
    old = load_release(ctx, "bench", release.version)
    for prefix, half in ((old.prefix, "files"), (old.private_prefix, "answers")):
        folder = ctx.store.local_path(f"{prefix}/{half}")
        for shard in list(folder.iterdir()):
            for task_folder in list(shard.iterdir()):
                task_folder.rename(folder / task_folder.name)
            shard.rmdir()
        manifest_path = ctx.store.local_path(f"{prefix}/manifest.json")
        manifest = json.loads(manifest_path.read_text())
        manifest["format"] = UNSHARDED
        for entry in manifest["files"]:
            if entry["name"].startswith(f"{half}/"):
                entry["name"] = f"{half}/{entry['name'].split('/', 2)[2]}"
        manifest_path.write_text(json.dumps(manifest))
    old = load_release(ctx, "bench", release.version)
    assert old.verify() == []
    task = old.task(old.task_ids[0])
    public, answers = release_task_files(old, task)(tmp_path)
    assert public == ctx.store.local_path(f"{old.prefix}/files/{task.id}") and answers.is_file()
    assert {p.name for p in public.iterdir()} == {f.name for f in task.public_files}
    # An RL export of it points at its files and tells the trainer where its answers are.
    rl = export_format("rl").export(ExportJob(ctx, old, old.tasks()), "rl").export
    for row in rl.rows():
        assert all(ctx.store.exists(f"{old.prefix}/{f['path']}") for f in row["files"]), row["files"]
    card = ctx.store.read_bytes(f"{rl.prefix}/README.md").decode()
    assert f"answers_folder(task['task_id'], {UNSHARDED!r})" in card


def test_local_target_is_idempotent(release, published):
    again = LocalTarget(published.parent.parent).publish(release.release)
    assert again == str(published)
    assert isinstance(LocalTarget(published), Target)


def test_a_local_target_links_the_store_files_and_copies_them_across_filesystems(store, release, published):
    """Linked on the store's filesystem, so a scheduled refresh does not add the catalog's gigabytes per version;
    copied where a link cannot go, byte for byte either way."""
    built = release.release
    names = [e["name"] for e in built.manifest["files"]]
    stored = {n: store.store.local_path(f"{built.prefix}/{n}") for n in names}
    assert all(os.stat(published / n).st_ino == os.stat(stored[n]).st_ino for n in names)
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == stored[names[0]].stat().st_dev:
        pytest.skip("no second filesystem (/dev/shm) to publish to")
    with tempfile.TemporaryDirectory(dir=other) as folder:
        copied = Path(LocalTarget(Path(folder), include_private=False).publish(built))
        for n in names:
            assert (copied / n).read_bytes() == stored[n].read_bytes()
            assert os.stat(copied / n).st_ino != os.stat(stored[n]).st_ino


def test_version_missing_its_manifest_is_invisible_and_completed(store, tmp_path):
    ctx = _clone(store, tmp_path)
    first = build_release(ctx, "crashy", today=DAY)
    prefix = first.release.prefix
    ctx.store.fs.rm(ctx.store.path(f"{prefix}/manifest.json"))  # the crash: files written, manifest not
    ctx.store.write_bytes(f"{prefix}/files/stray.csv", b"left over\n")
    assert list_versions(ctx, "crashy") == []
    with pytest.raises(ReleaseError):
        load_release(ctx, "crashy")
    again = build_release(ctx, "crashy", today=date(2026, 1, 16))
    assert again.created and again.version == first.version  # completed, not a new name
    assert list_versions(ctx, "crashy") == [first.version]
    assert not ctx.store.exists(f"{prefix}/files/stray.csv")
    assert verify_release(ctx, "crashy") == []


def test_new_source_makes_a_new_version_with_changelog(store, release, tmp_path):
    ctx = _clone(store, tmp_path, [*SOURCES, "sklearn-wine"])
    _pipeline(ctx)
    result = build_release(ctx, "bench", today=DAY)
    assert result.created and result.version == "2026.01.15.1" and result.previous == "2026.01.15"
    assert list_versions(ctx, "bench") == ["2026.01.15", "2026.01.15.1"]
    added = {t.id for t in ctx.store.read_records(Task) if t.source_id == "builtin.sklearn-wine"}
    assert added and set(result.release.task_ids) - set(release.release.task_ids) == added
    changes = ctx.store.read_bytes(f"{result.release.prefix}/CHANGELOG.md").decode()
    assert f"## Added ({len(added)})" in changes and all(f"`{t}`" in changes for t in added)
    assert "## Removed" not in changes and "## Changed" not in changes
    old_sides = {s["id"]: s["split"] for s in release.release.manifest["sources"]}
    new_sides = {s["id"]: s["split"] for s in result.release.manifest["sources"]}
    assert {k: new_sides[k] for k in old_sides} == old_sides  # sticky
    unchanged = build_release(ctx, "bench", today=date(2026, 2, 1))
    assert not unchanged.created and unchanged.version == "2026.01.15.1"


def test_only_accepted_tasks_are_released_once_verdicts_exist(store, release, tmp_path):
    ctx = _clone(store, tmp_path)
    tasks = sorted(ctx.store.read_records(Task), key=lambda t: t.id)
    rejected, unjudged = tasks[0], tasks[1]
    verdicts = [
        Verdict(
            task_id=t.id,
            source_id=t.source_id,
            family=t.family,
            accepted=t is not rejected,
            reasons=[] if t is not rejected else ["leakage-feature: test"],
            thresholds_fingerprint="t1",
        )
        for t in tasks
        if t is not unjudged
    ]
    ctx.store.write_records("all", verdicts)
    result = build_release(ctx, "bench", today=DAY)
    assert result.created and not any("no verdict table" in n for n in result.notes)
    assert set(result.release.task_ids) == {t.id for t in tasks} - {rejected.id, unjudged.id}
    assert result.excluded == {"rejected by the validation gate": 1, "not validated yet (no verdict)": 1}
    assert result.release.manifest["verdicts"]["fingerprint"]
    changes = ctx.store.read_bytes(f"{result.release.prefix}/CHANGELOG.md").decode()
    assert "## Removed (2)" in changes


def test_export_dare_bench_layout(store, release, tmp_path):
    job = ExportJob(store, release.release, dest=tmp_path / "data")
    report = export_format("dare-bench").export(job)
    dest = tmp_path / "data"
    # Each split in its own root (DARE-bench's data/eval/ holds evaluation tasks only), each with its list.
    lists = {
        root: json.loads((dest / root / "question_list.json").read_text())
        for root in ("eval", "train")
        if (dest / root / "question_list.json").is_file()
    }
    questions = [q for entries in lists.values() for q in entries]
    keys = {"file_path", "question_v1", "question_v2", "task", "needed_files_v1", "needed_files_v2", "split"}
    assert questions and all(keys <= set(q) for q in questions)
    by_folder = {q["file_path"]: q for q in questions}
    root_of = {q["file_path"]: root for root, entries in lists.items() for q in entries}
    for folder, kind in (
        ("builtin_sklearn-iris_class", "classification"),
        ("builtin_vega-cars_reg", "regression"),
    ):
        q, base = by_folder[folder], dest / root_of[folder] / "databases" / folder
        assert q["task"] == kind and q["needed_files_v1"] == ["train_v1.csv", "val_v1.csv", "metadata.txt"]
        for name in ("train_v1.csv", "val_v1.csv", "train_v2.csv", "val_v2.csv", "metadata.txt"):
            assert (base / "source" / name).is_file()
        for name in ("simulated_pred_local.csv", "ground_truth.csv", "all_metadata.json"):
            assert (base / "verify" / name).is_file()
        reference = store.store.read_bytes(
            f"tasks/{q['dareforge']['task_id_v1']}/private/reference_predictions.csv"
        )
        assert pd.read_csv(base / "verify" / "simulated_pred_local.csv").equals(
            pd.read_csv(io.BytesIO(reference))
        )
        assert "`train_v1.csv`" in q["question_v1"] and "`prediction.csv`" in q["question_v1"]
    # The second IF seed is left out (reported), not paired with the source's MM task again in another folder.
    assert "builtin_sklearn-iris-2_class" not in by_folder
    assert report.skipped and all(
        "one v1 task per source and target" in why for why in report.skipped.values()
    )
    root = dest / root_of["builtin_statsmodels-co2_ts"]
    ts = root / "databases" / "builtin_statsmodels-co2_ts"
    assert by_folder["builtin_statsmodels-co2_ts"]["task"] == "time_series_analysis"
    for name in ("source/train.csv", "source/val_v1.csv", "source/val_v2.csv", "source/metadata.txt"):
        assert (ts / name).is_file()
    metadata = json.loads((ts / "verify" / "all_metadata.json").read_text())
    cf = pd.read_csv(ts / "verify" / "ground_truth_v2.csv")
    assert list(cf.columns) == [*metadata["question"]["dareforge"]["v2"]["metric"]["key_columns"], "co2"]
    assert list(pd.read_csv(ts / "verify" / "ground_truth_v1.csv").columns) == ["row_id", "co2"]
    assert metadata["question"]["problem_type"] == "time_series_analysis" and metadata["question"][
        "target"
    ] == ["co2"]
    # DARE-bench scores forecasts by clipped R²: the export says so, where our release says forecast skill.
    assert metadata["question"]["dareforge"]["v2"]["metric"]["name"] == "clipped-r2"
    assert "R² (negative values count as 0)" in by_folder["builtin_statsmodels-co2_ts"]["question_v2"]


def test_a_changelog_keeps_every_task_of_a_slot_several_tasks_share():
    """A whole-catalog release lost a fifth of its tasks from the changelog: a source's questions (and its
    framings) share (source, family, seed), and one task per slot was kept."""

    def task(task_id: str, family: str = "QA") -> dict:
        return {"id": task_id, "source_id": "s", "family": family, "seed": 1, "split": "train"}

    first = [task("q1"), task("q2"), task("q3"), task("m1", "Class-MM")]
    diff = changelog.diff(None, first)
    assert sorted(t["id"] for t in diff.added) == ["m1", "q1", "q2", "q3"]
    assert "First version: 4 tasks." in changelog.render("bench", "v2", None, diff)
    later = changelog.diff(first, [task("q2"), task("q4"), task("m1", "Class-MM")])
    assert later.unchanged == 2  # q2 and m1 pair with themselves, not with another task of their slot
    assert [(c.before["id"], c.after["id"]) for c in later.changed] == [("q1", "q4")]
    assert [t["id"] for t in later.removed] == ["q3"] and later.added == []
