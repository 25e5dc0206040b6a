"""Running references for a draft task: the IF determinism certificate, and MM/TS baseline and strong scores."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from dareforge.generators.taskio import Draft, Runners
from dareforge.reference_solutions.graders import grade, score_interval
from dareforge.reference_solutions.reference_code import (
    PREDICTIONS,
    REFERENCE_PREDICTIONS,
    STRONG_PREDICTIONS,
    STRONG_SCRIPT,
    StrongSpec,
    strong_reference_code,
)
from dareforge.reference_solutions.reference_runner import ReferenceRunner, RunOutcome
from dareforge.schema import MetricSpec, TaskScores


def _scratch_copy(draft: Draft, name: str) -> Path:
    """A copy of the public files to run in, so a script can never write into what is published."""
    folder = draft.folder / f"run-{name}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for path in draft.public.iterdir():
        shutil.copyfile(path, folder / path.name)
    return folder


def _run_on_public(runner: ReferenceRunner, code: str, draft: Draft, name: str) -> tuple[RunOutcome, Path]:
    folder = _scratch_copy(draft, name)
    return runner.run(code, folder), folder / PREDICTIONS


def last_line(error: str | None) -> str:
    lines = [line for line in (error or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no error message"


def certify(runners: Runners, code: str, draft: Draft, metric: MetricSpec) -> tuple[float, str | None]:
    """Run the IF reference twice, at the same time: once, and again in another process with another thread
    count. Predictions that depend on the process (hash seeds, object addresses, the order sets iterate) or on
    the threads (BLAS and OpenMP reductions) differ between the two.

    Returns the reference's own fit+predict seconds and, when the task must be rejected, why. The first run's
    predictions become the task's reference predictions.
    """
    folders = {name: _scratch_copy(draft, name) for name in ("main", "twin")}
    runners.main.submit(code, folders["main"])
    runners.twin.submit(code, folders["twin"], threads=2)
    outcomes = {"main": runners.main.collect(), "twin": runners.twin.collect()}
    seconds = sum(outcome.cpu_seconds for outcome in outcomes.values())
    outputs = {}
    for name, outcome in outcomes.items():
        if not outcome.ok:
            return seconds, f"reference failed in the {name} run: {last_line(outcome.error)}"
        outputs[name] = folders[name] / PREDICTIONS
        if not outputs[name].exists():
            return seconds, f"reference wrote no {PREDICTIONS} in the {name} run"
    shutil.copyfile(outputs["main"], draft.private / REFERENCE_PREDICTIONS)
    if outputs["twin"].read_bytes() != outputs["main"].read_bytes():
        result = grade(metric, outputs["twin"], outputs["main"])
        if result.score != 1.0:
            return (
                seconds,
                f"not deterministic: the twin run (another process, two threads) scores {result.score:.6f} "
                "against the first run",
            )
    return seconds, None


def baseline_predictions(
    train: pd.DataFrame,
    test_keys: pd.DataFrame,
    targets: list[str],
    classification: bool,
    group: str | None,
    stratified: bool = False,
) -> pd.DataFrame:
    """A trivial predictor: the majority class (or classes drawn at their training shares, seeded), or the
    training mean (per group when one is given)."""
    out = test_keys.copy()
    rng = np.random.default_rng(0)
    for target in targets:
        values = train[target].dropna()
        if classification:
            counts = values.astype(str).value_counts().sort_index()
            if stratified:
                out[target] = rng.choice(
                    counts.index.to_numpy(), size=len(out), p=(counts / counts.sum()).to_numpy()
                )
            else:
                out[target] = counts.idxmax()
        elif group:
            means = train.groupby(train[group].astype(str))[target].mean()
            out[target] = test_keys[group].astype(str).map(means).fillna(values.mean()).to_numpy()
        else:
            out[target] = values.mean()
    return out


def trivial_predictions(
    metric: MetricSpec,
    train: pd.DataFrame,
    test: pd.DataFrame,
    classification: bool,
    group: str | None,
    forecasts: Mapping[str, pd.DataFrame] | None = None,
) -> dict[str, pd.DataFrame]:
    """Every trivial predictor's predictions of the test rows (keyed like the answers), by name; the best
    one's score is a goal task's bar. For macro-F1 a majority vote scores far below chance, so classes drawn at
    their training shares count too; a series task adds its model-free `forecasts`."""
    keys = [*metric.key_columns, *([group] if group and group not in metric.key_columns else [])]
    if classification:
        named = {"majority class": False, "class shares": True}
    else:
        named = {"group mean" if group else "mean": False}
    predicted = {
        name: baseline_predictions(
            train, test[keys], metric.target_columns, classification, group, stratified
        )[[*metric.key_columns, *metric.target_columns]]
        for name, stratified in named.items()
    }
    return predicted | dict(forecasts or {})


def score_references(
    runners: Runners,
    strong: StrongSpec,
    draft: Draft,
    metric: MetricSpec,
    train: pd.DataFrame,
    group: str | None,
    forecasts: Mapping[str, pd.DataFrame] | None = None,
) -> tuple[TaskScores, float]:
    """The strong reference's score and the baseline: the best trivial predictor's, including `forecasts` (the
    model-free forecasts of a series task, keyed like the answers); and the lower bound of the strong score's
    bootstrap interval (`score_interval`), which a task's own bar is set from (`Family.own_bar`)."""
    answers = draft.private / "answers.csv"
    code = strong_reference_code(strong)
    (draft.private / STRONG_SCRIPT).write_text(code)
    outcome, predictions = _run_on_public(runners.main, code, draft, "strong")
    if not outcome.ok or not predictions.exists():
        raise ValueError(f"the strong reference failed: {last_line(outcome.error)}")
    shutil.copyfile(predictions, draft.private / STRONG_PREDICTIONS)
    strong_score = grade(metric, predictions, answers)
    test_keys = pd.read_csv(draft.public / "test.csv", dtype=str, keep_default_na=False)
    baselines = [
        grade(metric, trivial, answers)
        for trivial in trivial_predictions(
            metric, train, test_keys, strong.classification, group, forecasts
        ).values()
    ]
    for name, result in (("strong", strong_score), *(("baseline", b) for b in baselines)):
        if result.error:
            raise ValueError(f"the {name} predictions do not grade: {result.error}")
    _, strong_low, _ = score_interval(metric, predictions, answers)
    scores = TaskScores(
        baseline=max(b.score for b in baselines),
        strong=strong_score.score,
        reference_seconds=outcome.cpu_seconds,
    )
    return scores, strong_low
