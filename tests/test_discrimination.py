"""The solver ladder as a check: a target that is noise is gated as non-discriminative, a learnable task is
ranked with an interval around every rung's score, the ladder's scores are the same on every run, and a
release's card and report show its figures per family."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date

import numpy as np
import pandas as pd
import pytest

from dareforge.config import Config, SourceOverride
from dareforge.context import RunContext
from dareforge.families.registry import family_named
from dareforge.publish import build_release
from dareforge.publish.release_report import write_release_report
from dareforge.reference_solutions.ladder import TRIVIAL, model_rungs
from dareforge.reference_solutions.reference_code import (
    STRONG_SCRIPT,
    Estimator,
    StrongSpec,
    strong_reference_code,
    strong_spec_of,
)
from dareforge.schema import Task, Validation, Verdict
from dareforge.validators.discrimination import Discrimination, RungResult, decided_tau
from dareforge.validators.validate import task_view, validate
from tests.stores import generate_tasks, prediction_only
from tests.test_report import _tables

ROWS = 400
NOISE = "mirror.someone--noise"
IRIS = "builtin.sklearn-iris"


def _noise(seed: int = 4) -> pd.DataFrame:
    """Features and a label drawn independently: nothing to learn, every solver is a coin."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x1": rng.normal(size=ROWS).round(4),
            "x2": rng.uniform(0, 10, size=ROWS).round(3),
            "color": rng.choice(["red", "green", "blue"], size=ROWS),
            "label": rng.choice(["yes", "no"], size=ROWS),
        }
    )


def test_the_ladder_runs_by_default_and_a_zero_budget_turns_it_off(tmp_path):
    from dareforge.validators.validate import task_checks

    def names(budget: float) -> list[str]:
        cfg = Config()
        cfg.store.root, cfg.store.work_dir = str(tmp_path / "store"), str(tmp_path / "work")
        cfg.validate_.ladder_cpu_seconds = budget
        return [c.name for c in task_checks(RunContext.from_config(cfg, show_progress=False))]

    assert names(Config().validate_.ladder_cpu_seconds)[-1] == "discrimination"
    assert "discrimination" not in names(0.0)


def _rung(name: str, score: float, low: float, high: float) -> RungResult:
    return RungResult(name, score, low, high)


def test_tau_counts_only_the_rung_pairs_the_test_rows_tell_apart():
    trivial, linear = _rung("trivial", 0.1, 0.05, 0.15), _rung("linear", 0.5, 0.4, 0.6)
    # Two boosted models within each other's noise: their order says nothing, whichever scores higher.
    boosted, stopped = _rung("boosted", 0.82, 0.75, 0.9), _rung("boosted+stopping", 0.8, 0.72, 0.88)
    assert decided_tau([trivial, linear, boosted, stopped]) == 1.0
    # A decided pair in reverse order counts against: the tree is clearly below the linear model it
    # should beat. Of the 10 pairs, trivial-tree and the boosted pair overlap; of the 8 decided, 7 are in
    # order and linear-tree is reversed.
    tree = _rung("tree", 0.2, 0.12, 0.28)
    assert decided_tau([trivial, linear, tree, boosted, stopped]) == pytest.approx((7 - 1) / 8)
    # All within noise: no evidence of any order.
    noise = [_rung(str(i), 0.5 + 0.01 * i, 0.4, 0.6) for i in range(4)]
    assert decided_tau(noise) == 0.0
    with pytest.raises(ValueError, match="linear"):
        decided_tau([trivial, RungResult("linear", error="it crashed"), boosted])


def test_tau_leaves_out_the_series_rungs_neither_of_which_should_forecast_better():
    # A series where smoothing forecasts and the linear trend-and-season model does not, and the strong
    # reference chose smoothing: every expected order holds (both above trivial, strong above linear), and the
    # smoothing-linear pair, which the ladder does not order, counts neither way.
    trivial, smoothing = _rung("trivial", 0.0, 0.0, 0.0), _rung("smoothing", 0.08, 0.05, 0.11)
    linear, strong = _rung("linear", 0.02, 0.01, 0.03), _rung("strong", 0.08, 0.05, 0.11)
    assert decided_tau([trivial, smoothing, linear, strong]) == 1.0
    # The tabular ladder's pairs stay ordered: a linear model clearly above a tree still counts against.
    tree = _rung("tree", 0.02, 0.01, 0.03)
    assert decided_tau([trivial, smoothing, tree, strong]) == pytest.approx((4 - 1) / 5)


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    root = tmp_path_factory.mktemp("ladder")
    folder = root / "mirror" / "noise"
    folder.mkdir(parents=True)
    meta = {"id": "someone/noise", "title": "noise", "lastUpdated": "2024-05-01T00:00:00Z"}
    (folder / "dataset-metadata.json").write_text(json.dumps(meta))
    _noise().to_csv(folder / "data.csv", index=False)
    cfg = prediction_only(Config())
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    cfg.builtin.include = ["sklearn-iris"]
    cfg.mirror.paths = [str(root / "mirror")]
    cfg.generate.if_variants = 0
    # The understand stage would find no task in a noise label; the gate is what this test is about.
    cfg.understand.max_single_column_score = 1.01
    cfg.sources = {NOISE: SourceOverride(target=["label"])}
    ctx = generate_tasks(RunContext.from_config(cfg, show_progress=False))
    validate(ctx)
    return ctx


def _mm_task(ctx: RunContext, source: str) -> Task:
    return next(t for t in ctx.store.read_records(Task) if t.source_id == source and t.variant_of is None)


def _finding(ctx: RunContext, task: Task) -> Validation:
    return next(
        v for v in ctx.store.read_records(Validation) if v.task_id == task.id and v.check == "discrimination"
    )


def test_a_noise_target_is_rejected_for_what_it_teaches_not_for_the_ladders_sameness(validated):
    """No model learns a noise label: every rung's interval reaches the trivial answer's, so the ladder has
    nothing learned to rank (no tau, no spread, no rejection of its own) and `learnable` rejects the task."""
    task = _mm_task(validated, NOISE)
    verdict = next(v for v in validated.store.read_records(Verdict) if v.task_id == task.id)
    assert not verdict.accepted
    assert not [r for r in verdict.reasons if r.startswith("discrimination:")], verdict.reasons
    assert [r for r in verdict.reasons if r.startswith("learnable:")], verdict.reasons
    finding = _finding(validated, task)
    assert finding.score is None and "nothing learned to rank" in finding.reason, finding
    details = json.loads(finding.details)
    trivial = next(r for r in details["rungs"] if r["name"] == TRIVIAL)
    assert all(r["low"] <= trivial["high"] for r in details["rungs"] if r["score"] is not None)


def test_a_learnable_task_is_ranked_with_an_interval_around_every_rung(validated):
    task = _mm_task(validated, IRIS)
    finding = _finding(validated, task)
    details = json.loads(finding.details)
    limits = Config().validate_
    assert finding.score >= limits.min_ladder_tau and details["spread"] >= limits.min_ladder_spread
    rungs = details["rungs"]
    assert [r["name"] for r in rungs] == [TRIVIAL, *(r.name for r in model_rungs(_spec(validated, task)))]
    for rung in rungs:
        assert rung["error"] is None, rung
        assert rung["low"] <= rung["score"] <= rung["high"], rung
    assert details["headroom"] == pytest.approx(1 - max(r["score"] for r in rungs))
    verdict = next(v for v in validated.store.read_records(Verdict) if v.task_id == task.id)
    assert not [r for r in verdict.reasons if r.startswith("discrimination:")], verdict.reasons


def _spec(ctx: RunContext, task: Task):
    view = task_view(ctx, task)
    spec = strong_spec_of(view.path("private", STRONG_SCRIPT).read_text(), view.prepared.id_column)
    assert spec is not None
    return spec


def test_the_ladder_scores_the_same_on_every_run(validated):
    view = task_view(validated, _mm_task(validated, IRIS))
    check = Discrimination()
    first, second = (check.run(view, validated.config).details for _ in range(2))

    def without_timings(details: dict) -> dict:
        # CPU seconds are measurements of this machine's run, not part of what the ladder decides.
        rungs = [{k: v for k, v in r.items() if k != "cpu_seconds"} for r in details["rungs"]]
        return {**{k: v for k, v in details.items() if k != "cpu_seconds"}, "rungs": rungs}

    assert without_timings(first) == without_timings(second)


def test_a_spent_budget_fails_the_rungs_without_failing_the_check(validated):
    view = task_view(validated, _mm_task(validated, IRIS))
    config = validated.config.model_copy(deep=True)
    config.validate_.ladder_cpu_seconds = 1e-9
    finding = Discrimination().run(view, config)
    rungs = finding.details["rungs"]
    assert rungs[0]["error"] is None and all(r["error"] for r in rungs[1:])
    assert finding.score is None and not finding.flagged


@pytest.mark.parametrize("time_column", [None, "when"])
def test_the_strong_spec_is_read_back_from_its_script_and_an_edited_script_is_refused(time_column):
    spec = StrongSpec(
        classification=time_column is None,
        id_column="id",
        targets=["y, and 'z'"],
        numeric=["a", 'b "quoted", too'],
        categorical=[],
        dates=[time_column] if time_column else [],
        output_keys=["id"],
        time_column=time_column,
        entity="shop, 'north'" if time_column else None,
    )
    code = strong_reference_code(spec)
    assert strong_spec_of(code, "id") == spec
    assert strong_spec_of(code.replace("random_state=0", "random_state=1"), "id") is None
    for rung in model_rungs(spec):
        assert rung.code(spec) != code or rung.name in ("boosted", "strong")


def _run_strong(
    tmp_path, frame: pd.DataFrame, spec: StrongSpec, n_train: int, estimator=None
) -> pd.DataFrame:
    """`spec`'s strong reference (or `estimator` in its place) on `frame`'s first `n_train` rows, predicting the
    rest; fails the test with the script's error when it does not run."""
    frame.iloc[:n_train].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[n_train:].drop(columns=spec.targets).to_csv(tmp_path / "test.csv", index=False)
    (tmp_path / "strong.py").write_text(strong_reference_code(spec, estimator))
    done = subprocess.run([sys.executable, "strong.py"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    predictions = pd.read_csv(tmp_path / "predictions.csv")
    assert len(predictions) == len(frame) - n_train
    return predictions


def _labelled(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"id": range(n), "a": rng.normal(size=n)})
    frame["y"] = np.where(frame["a"] > 0, "up", "down")
    return frame


def test_the_strong_reference_runs_on_a_date_column_with_missing_dates(tmp_path):
    """An R dataset's date column with gaps failed its strong reference (Timestamp.toordinal of NaT) and so its
    MM task: a missing date is a missing feature."""
    frame = _labelled(120)
    when = pd.Series(pd.date_range("2001-01-01", periods=120, freq="D").astype(str))
    when[::7] = ""
    frame["when"] = when
    _run_strong(tmp_path, frame, StrongSpec(True, "id", ["y"], ["a"], [], ["when"], ["id"], None), 90)


def test_the_strong_reference_runs_on_dates_written_with_an_offset(tmp_path):
    """A catalog source's release dates read "2021-02-01T00:00:00Z": pandas reads them time-zone aware, and the
    day number subtracted a naive epoch from them (TypeError), failing the source's MM task."""
    frame = _labelled(120)
    frame["released"] = pd.date_range("2020-01-01", periods=120, freq="D").strftime("%Y-%m-%dT%H:%M:%SZ")
    frame.loc[::9, "released"] = ""
    _run_strong(tmp_path, frame, StrongSpec(True, "id", ["y"], ["a"], [], ["released"], ["id"], None), 90)


def test_the_strong_reference_runs_on_a_category_of_numbers_with_gaps(tmp_path):
    """A forecast's entity was a column of numbers with gaps: its floats and the imputer's "missing" together
    failed the ordinal encoder ("uniformly strings or numbers"), and so the TS-CF task."""
    frame = _labelled(120)
    frame["clinic"] = np.where(np.arange(120) % 5 == 0, np.nan, np.arange(120) % 3 + 1.0)
    frame["t"] = np.arange(120)
    frame["v"] = frame["a"] * 2 + frame["t"] * 0.1
    spec = StrongSpec(False, "id", ["v"], ["t"], ["clinic"], [], ["id"], "t")
    _run_strong(tmp_path, frame.drop(columns=["a", "y"]), spec, 90)


def test_a_class_seen_once_in_training_does_not_fail_the_strong_reference(tmp_path):
    """Catalog targets with 40 classes held some with one training row: gradient boosting's early stopping
    (on by default past 10,000 rows, and the ladder's rung) splits its holdout by class and failed the MM task.
    Such a class cannot be learned; the strong reference fits on the others."""
    frame = _labelled(200)
    frame.loc[[3, 150], "y"] = ["rare", "lone"]
    spec = StrongSpec(True, "id", ["y"], ["a"], [], [], ["id"], None)
    early = Estimator("HistGradientBoostingClassifier(early_stopping=True, max_iter=20, random_state=0)")
    predictions = _run_strong(tmp_path, frame, spec, 160, early)
    assert not set(predictions["y"]) & {"rare", "lone"}


def test_the_release_card_and_report_show_the_ladder_per_family(validated):
    noise, iris = _mm_task(validated, NOISE), _mm_task(validated, IRIS)
    assert noise.family == iris.family
    release = build_release(validated, "ladder", today=date(2026, 1, 15)).release
    assert iris.id in release.task_ids and noise.id not in release.task_ids
    ladder = json.loads(_finding(validated, iris).details)  # the one released task of the family
    figures = release.manifest["skill"]["ladder"][iris.family]
    # The noise task is laddered but rejected by `learnable`, not by the ladder's own thresholds.
    assert (figures["laddered"], figures["gated"], figures["released"]) == (2, 0, 1)
    assert figures["mean_tau"] == pytest.approx(ladder["tau"], abs=1e-4)
    assert figures["median_difficulty"] == pytest.approx(ladder["difficulty"], abs=1e-4)
    assert figures["median_headroom"] == pytest.approx(ladder["headroom"], abs=1e-4)
    assert sum(figures["difficulty_bins"]) == sum(figures["headroom_bins"]) == 1
    assert figures["headroom_bins"][min(int(ladder["headroom"] * 10), 9)] == 1
    assert [r["name"] for r in figures["rungs"]] == [r["name"] for r in ladder["rungs"]]
    for mean, rung in zip(figures["rungs"], ladder["rungs"], strict=True):
        assert mean["tasks"] == 1
        assert [mean[k] for k in ("score", "low", "high")] == pytest.approx(
            [rung[k] for k in ("score", "low", "high")], abs=1e-4
        )

    card = validated.store.read_bytes(f"{release.prefix}/README.md").decode()
    cells = ["2", "0 (0%)", "1", *(f"{ladder[k]:.2f}" for k in ("tau", "difficulty", "headroom"))]
    assert f"| {iris.family} | {family_named(iris.family).words.asks} | {' | '.join(cells)} |" in card
    # What the ladder cost measures the machine that ran it: a release's bytes hold no timing.
    manifest = validated.store.read_bytes(f"{release.prefix}/manifest.json").decode()
    assert "cpu_seconds" not in manifest and "cpu" not in card.lower()

    page = validated.store.read_bytes(write_release_report(validated, "ladder")).decode()
    assert _tables(page)["ladder-summary"][1:] == [[iris.family, *cells]]
    assert "alt='line plots of mean score per rung'" in page
    assert "alt='histograms of difficulty and headroom of the released tasks'" in page
