"""Validation end to end: planted defects are each caught with the right reason, clean tasks pass."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from dareforge.config import Config, SourceOverride
from dareforge.context import RunContext
from dareforge.schema import Task, Validation, Verdict
from dareforge.validators.check import Finding
from dareforge.validators.gate import gate
from dareforge.validators.validate import REPORT_DIR, _run_batched, validate
from tests.stores import generate_tasks, prediction_only

ROWS = 400


def _frame(seed: int, leak: bool = False, random_label: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "x1": rng.normal(size=ROWS).round(4),
            "x2": rng.normal(size=ROWS).round(4),
            "x3": rng.uniform(0, 10, size=ROWS).round(3),
            "color": rng.choice(["red", "green", "blue"], size=ROWS),
        }
    )
    signal = frame["x1"] + 0.8 * frame["x2"] + rng.normal(scale=0.4, size=ROWS)
    frame["label"] = np.where(signal > 0, "yes", "no")
    if random_label:
        frame["label"] = rng.choice(["yes", "no"], size=ROWS)
    if leak:
        # The label re-encoded, as a join key or a post-outcome field often is in real data.
        frame["leak"] = (frame["label"] == "yes").astype(int) * 7 + 3
    return frame


def _mirror_source(root, name: str, frame: pd.DataFrame) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    meta = {"id": f"someone/{name}", "title": name, "lastUpdated": "2024-05-01T00:00:00Z"}
    (folder / "dataset-metadata.json").write_text(json.dumps(meta))
    frame.to_csv(folder / "data.csv", index=False)


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    clean = _frame(1)
    _mirror_source(root / "mirror", "clean", clean)
    _mirror_source(root / "mirror", "clean-copy", clean.sample(frac=1.0, random_state=3))
    _mirror_source(root / "mirror", "leaky", _frame(2, leak=True))
    _mirror_source(root / "mirror", "random", _frame(4, random_label=True))
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    cfg.builtin.enabled = False
    cfg.mirror.paths = [str(root / "mirror")]
    cfg.generate.if_variants = 1
    # The gate is the second line of defence: with the understand stage's own guards off (it would drop the
    # leaking column and find no task in the random labels), the planted defects reach the checks.
    cfg.understand.max_single_column_score = 1.01
    cfg.sources = {
        f"mirror.someone--{name}": SourceOverride(target=["label"]) for name in ("leaky", "random")
    }
    ctx = generate_tasks(RunContext.from_config(prediction_only(cfg), show_progress=False))
    report = validate(ctx)
    return ctx, report


def _verdicts(ctx) -> dict[str, list[Verdict]]:
    by_source: dict[str, list[Verdict]] = {}
    for verdict in ctx.store.read_records(Verdict):
        by_source.setdefault(verdict.source_id.removeprefix("mirror.someone--"), []).append(verdict)
    return by_source


def _reasons(verdicts: list[Verdict]) -> str:
    return " | ".join(r for v in verdicts for r in v.reasons)


def test_clean_tasks_pass_and_planted_defects_are_caught(validated):
    ctx, report = validated
    verdicts = _verdicts(ctx)
    assert len(report.labels("accepted") + report.labels("rejected")) == 8  # 4 sources x (IF + MM)
    assert all(v.accepted for v in verdicts["clean"]), _reasons(verdicts["clean"])
    assert not any(v.accepted for v in verdicts["clean-copy"])
    assert "duplicate-source" in _reasons(verdicts["clean-copy"]) and "clean" in _reasons(
        verdicts["clean-copy"]
    )
    assert not any(v.accepted for v in verdicts["leaky"])
    assert "leakage-feature" in _reasons(verdicts["leaky"]) and "`leak`" in _reasons(verdicts["leaky"])
    random_mm = next(v for v in verdicts["random"] if v.family == "Class-MM")
    assert not random_mm.accepted and "learnable" in _reasons([random_mm])


def test_rethresholding_needs_no_rerun(validated):
    ctx, _ = validated
    findings_before = ctx.store.read_records(Validation)
    # Random labels fail these checks: the strong reference is no better than the bar, and the solver ladder's
    # rungs are all within each other's noise. Thresholds that let both through drop those reasons; what is
    # left is the pass bar (no bar its strong reference reaches sits clear of a guess: `reachable`, `trivial`).
    random_mm = next(v for v in _verdicts(ctx)["random"] if v.family == "Class-MM")
    assert "learnable" in {r.split(":")[0] for r in random_mm.reasons}, random_mm.reasons
    # No model clears the trivial answer on random labels: the ladder has nothing learned to rank.
    ladder = next(
        f for f in findings_before if f.task_id == random_mm.task_id and f.check == "discrimination"
    )
    assert ladder.score is None and "nothing learned to rank" in ladder.reason, ladder
    lowered = {"min_learnable_margin": -1.0, "min_ladder_tau": -1.0, "min_ladder_spread": 0.0}
    for name, value in lowered.items():
        setattr(ctx.config.validate_, name, value)
    try:
        gate(ctx)
        random_mm = next(v for v in _verdicts(ctx)["random"] if v.family == "Class-MM")
        assert {r.split(":")[0] for r in random_mm.reasons} == {"reachable", "trivial"}, random_mm.reasons
        assert ctx.store.read_records(Validation) == findings_before
    finally:
        for name in lowered:
            setattr(ctx.config.validate_, name, getattr(Config().validate_, name))
        gate(ctx)


def _clean_task(ctx, family: str) -> Task:
    return next(
        t for t in ctx.store.read_records(Task) if t.source_id.endswith("--clean") and t.family == family
    )


def test_nan_in_reference_predictions_and_id_overlap_are_flagged(validated):
    ctx, _ = validated
    if_task, mm_task = _clean_task(ctx, "Class-IF"), _clean_task(ctx, "Class-MM")
    predictions = ctx.store.local_path(f"tasks/{if_task.id}/private/reference_predictions.csv")
    test = ctx.store.local_path(f"tasks/{mm_task.id}/public/test.csv")
    saved = {predictions: predictions.read_bytes(), test: test.read_bytes()}
    try:
        frame = pd.read_csv(predictions)
        frame.loc[0, "label"] = np.nan
        frame.to_csv(predictions, index=False)
        train_id = pd.read_csv(ctx.store.local_path(f"tasks/{mm_task.id}/public/train.csv"))["row_id"].iloc[0]
        tampered = pd.read_csv(test)
        tampered.loc[0, "row_id"] = train_id
        tampered.to_csv(test, index=False)
        report = validate(ctx, [if_task.id, mm_task.id], force=True)
        reasons = report.outcomes["rejected"]
        assert "gx-reference" in reasons[if_task.id] and "reference-runs" in reasons[if_task.id]
        assert "gx-prepared" in reasons[mm_task.id]
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
        validate(ctx, [if_task.id, mm_task.id], force=True)


def test_a_second_validate_checks_nothing_and_the_report_exists(validated):
    ctx, _ = validated
    again = validate(ctx)
    assert again.labels("checked") == [] and again.reused == 8
    html = ctx.store.read_bytes(f"{REPORT_DIR}/index.html").decode()
    assert "Rejected tasks" in html and "duplicate-source" in html


def test_the_validation_report_lists_a_bounded_number_of_rejected_tasks_and_names_the_query_for_all():
    from dareforge.schema import Verdict
    from dareforge.validators.validation_report import SHOWN_REJECTED, render

    verdicts = [
        Verdict(
            task_id=f"t{n:05d}",
            source_id="s",
            family="QA",
            accepted=False,
            reasons=["certificate: no"],
            thresholds_fingerprint="f",
        )
        for n in range(SHOWN_REJECTED * 4)
    ]
    page = render("store", [], verdicts, [])
    assert (
        page.count("<tr>") == SHOWN_REJECTED + 1 + 2 + 1
    )  # rejected + its header, family row + header, checks header
    assert "t00000" in page and f"t{SHOWN_REJECTED * 4 - 1:05d}" not in page
    assert "where not accepted" in page


class _CrashesOnTask2:
    """A check run on many tasks at once that crashes whenever task-2 is among them."""

    name = "records"

    def run_all(self, tasks: list) -> dict[str, Finding]:
        if any(task.id == "task-2" for task in tasks):
            raise KeyError("a field task-2's record lacks")
        return {task.id: Finding("fine", 1.0) for task in tasks}


def test_a_check_of_many_tasks_that_crashes_is_a_finding_about_the_task_that_crashes_it():
    tasks = [SimpleNamespace(id=f"task-{n}") for n in (1, 2, 3)]
    findings = _run_batched(_CrashesOnTask2(), tasks)
    assert findings["task-1"] == findings["task-3"] == Finding("fine", 1.0)
    assert findings["task-2"].flagged
    assert findings["task-2"].reason == 'the check crashed: KeyError: "a field task-2\'s record lacks"'
