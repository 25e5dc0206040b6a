"""Discrimination: does a goal task tell weak solvers from strong ones?

The task's solver ladder (`reference_solutions.ladder`: the trivial predictor, then linear, tree, boosted and
boosted-with-search scripts) is run on the task's public files as an agent's submission would be, one rung
after another in a single-threaded reference worker, and each rung's `predictions.csv` is graded with the
task's own metric against `private/answers.csv`, with a bootstrap interval over the test rows.

The finding's score is Kendall's tau between the rungs' order and their scores (1: the scores rise with the
rungs). Its details hold every rung (score, interval, CPU seconds, or why it failed) and:

- `spread`: the share of pairs of rungs whose intervals do not overlap (0 when every rung is within every
  other's noise, as on a target that is noise; 1 when each rung is clearly apart from each other);
- `difficulty`: the share of scored rungs the stored strong reference scores above;
- `headroom`: the metric's best possible score (1 for the goal metrics) minus the best rung's;
- `cpu_seconds`: what the ladder cost.

The gate rejects on `validate.min_ladder_tau` and `validate.min_ladder_spread`; the check flags nothing.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from dareforge.config import Config
from dareforge.families.timeseries import model_free_forecasts
from dareforge.generators.references import last_line, trivial_predictions
from dareforge.reference_solutions.graders import bootstrap_scores, grade
from dareforge.reference_solutions.ladder import TRIVIAL, model_rungs
from dareforge.reference_solutions.reference_code import (
    PREDICTIONS,
    STRONG_PREDICTIONS,
    STRONG_SCRIPT,
    StrongSpec,
    strong_spec_of,
)
from dareforge.reference_solutions.reference_runner import ReferenceRunner
from dareforge.schema import TaskType
from dareforge.validators.check import Finding, TaskView

RESAMPLES = 200
SEED = 0
INTERVAL = (2.5, 97.5)
"""Percentiles of the bootstrap scores that bound a rung's interval."""
BEST_SCORE = 1.0
"""The best score of every goal metric (macro-F1, clipped R², forecast skill)."""
WALL_PER_CPU_SECOND = 2.0
"""The worker is stopped after this many wall seconds per CPU second left: on a shared core a rung waits."""


@dataclass(frozen=True)
class RungResult:
    name: str
    score: float | None = None
    low: float | None = None
    high: float | None = None
    cpu_seconds: float = 0.0
    error: str | None = None


class Discrimination:
    name = "discrimination"

    def __init__(self) -> None:
        # One worker per process, kept across tasks: starting one (importing scikit-learn) costs more than most
        # ladders. It ends with the process (its stdin closes); a forked process starts its own.
        self._runner: ReferenceRunner | None = None
        self._runner_pid: int | None = None

    def runner(self) -> ReferenceRunner:
        if self._runner is None or self._runner_pid != os.getpid():
            self._runner, self._runner_pid = ReferenceRunner(threads=1).start(), os.getpid()
        return self._runner

    def run(self, view: TaskView, config: Config) -> Finding:
        if not view.family.scored_against_baseline:
            return Finding("only goal-graded tasks are ranked by a solver ladder", None)
        if not view.has("private", STRONG_SCRIPT):
            return Finding(f"no private/{STRONG_SCRIPT}: the ladder has no features to run on", None)
        strong_code = view.path("private", STRONG_SCRIPT).read_text()
        spec = strong_spec_of(strong_code, view.prepared.id_column)
        if spec is None:
            return Finding(f"private/{STRONG_SCRIPT} is not a strong reference the ladder can rebuild", None)
        runner = self.runner()
        budget = config.validate_.ladder_cpu_seconds
        rungs = [_trivial(view, spec), *_scripted(view, spec, strong_code, runner, budget)]
        return _finding(view, rungs)


def _trivial(view: TaskView, spec: StrongSpec) -> RungResult:
    """The best trivial predictor (the task's bar), computed here: it needs no script."""
    metric = view.task.metric
    series = view.family.kind == TaskType.TIME_SERIES
    forecasts = (
        list(model_free_forecasts(view.prepared, view.train, view.test, metric.key_columns).values())
        if series
        else []
    )
    test = pd.read_csv(view.path("public", "test.csv"), dtype=str, keep_default_na=False)
    group = view.prepared.entity_column if series else None
    candidates = trivial_predictions(metric, view.train, test, spec.classification, group, forecasts)
    answers = view.path("private", "answers.csv")
    best = max(candidates, key=lambda predictions: grade(metric, predictions, answers).score)
    return _graded(view, TRIVIAL, best, 0.0)


def _scripted(
    view: TaskView, spec: StrongSpec, strong_code: str, runner: ReferenceRunner, budget: float
) -> list[RungResult]:
    """Each scripted rung run on a copy of the public files within what is left of the CPU budget; a rung whose
    script is byte for byte the strong reference (`strong_code`), run on these files when the task was made,
    is graded on its stored predictions, at the stored reference's CPU seconds."""
    results, spent = [], 0.0
    with tempfile.TemporaryDirectory(prefix="ladder-") as scratch:
        for rung in model_rungs(spec):
            left = budget - spent
            if left <= 0:
                results.append(RungResult(rung.name, error="the ladder's CPU budget was spent"))
                continue
            code = rung.code(spec)
            if code == strong_code and view.has("private", STRONG_PREDICTIONS):
                seconds = view.task.scores.reference_seconds or 0.0
                results.append(_graded(view, rung.name, view.path("private", STRONG_PREDICTIONS), seconds))
                continue
            folder = Path(scratch) / rung.name.replace("+", "-")
            shutil.copytree(view.folder / "public", folder)
            runner.timeout_s = left * WALL_PER_CPU_SECOND
            outcome = runner.run(code, folder)
            # A worker stopped at its time limit reports no CPU seconds: the budget it was given is gone.
            spent += outcome.cpu_seconds if outcome.ok or outcome.cpu_seconds else left
            if not outcome.ok or outcome.cpu_seconds > left:
                why = "over the ladder's CPU budget" if outcome.ok else last_line(outcome.error)
                results.append(RungResult(rung.name, cpu_seconds=outcome.cpu_seconds, error=why))
                continue
            results.append(_graded(view, rung.name, folder / PREDICTIONS, outcome.cpu_seconds))
    return results


def _graded(view: TaskView, name: str, predictions: Path | pd.DataFrame, cpu_seconds: float) -> RungResult:
    metric, answers = view.task.metric, view.path("private", "answers.csv")
    result = grade(metric, predictions, answers)
    if result.error:
        return RungResult(name, cpu_seconds=cpu_seconds, error=result.error)
    low, high = np.percentile(bootstrap_scores(metric, predictions, answers, RESAMPLES, SEED), INTERVAL)
    # A bootstrap's percentiles need not hold the full sample's score (a skewed metric); the interval does.
    return RungResult(
        name, result.score, min(float(low), result.score), max(float(high), result.score), cpu_seconds
    )


def _finding(view: TaskView, rungs: list[RungResult]) -> Finding:
    scored = [(order, r) for order, r in enumerate(rungs) if r.score is not None]
    cpu_seconds = sum(r.cpu_seconds for r in rungs)
    details = {"rungs": [asdict(r) for r in rungs], "cpu_seconds": cpu_seconds}
    failed = [r.name for r in rungs if r.error]
    if len(scored) < 3:
        return Finding(
            f"too few ladder rungs scored to rank ({', '.join(failed)} failed)", None, details=details
        )
    scores = [r.score for _, r in scored]
    tau = kendalltau([order for order, _ in scored], scores).statistic
    # Constant scores have no order: as indistinguishable as rungs get.
    tau = 0.0 if np.isnan(tau) else float(tau)
    pairs = list(itertools.combinations([r for _, r in scored], 2))
    spread = sum(a.high < b.low or b.high < a.low for a, b in pairs) / len(pairs)
    strong = view.task.scores.strong
    difficulty = None if strong is None else sum(strong > s for s in scores) / len(scores)
    headroom = BEST_SCORE - max(scores)
    details.update(tau=tau, spread=spread, difficulty=difficulty, headroom=headroom)
    ranked = ", ".join(f"{r.name} {r.score:.3f} [{r.low:.3f}, {r.high:.3f}]" for _, r in scored)
    note = f"; failed: {', '.join(failed)}" if failed else ""
    return Finding(
        f"ladder tau {tau:.2f}, {spread:.0%} of rung pairs apart: {ranked}{note}", tau, details=details
    )


TASK_CHECKS = (Discrimination(),)
