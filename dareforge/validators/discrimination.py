"""Discrimination: does a goal task tell weak solvers from strong ones?

The task's solver ladder (`reference_solutions.ladder`: the trivial predictor, then linear, tree, boosted and
early-stopped boosted scripts) is run on the task's public files as an agent's submission would be, one rung
after another in a single-threaded reference worker, and each rung's `predictions.csv` is graded with the
task's own metric against `private/answers.csv`, with a bootstrap interval over the test rows.

The finding's score is Kendall's tau between the rungs' order and their scores over the pairs of rungs the
test rows tell apart (`decided_tau`): (concordant - discordant) / decided pairs, a pair decided when the two
rungs' bootstrap intervals do not overlap; 1 when every decided pair is in ladder order, -1 when every one is
reversed, 0 when no pair is decided. Rungs within each other's noise (two boosted models that both saturate
a task) count neither way: plain tau would count their random order as disagreement. Its details hold every
rung (score, interval, CPU seconds, or why it failed) and:

- `spread`: the share of pairs of rungs whose intervals do not overlap (0 when every rung is within every
  other's noise, as on a target that is noise; 1 when each rung is clearly apart from each other);
- `difficulty`: the share of scored rungs the stored strong reference scores above;
- `headroom`: the metric's best possible score (1 for the goal metrics) minus the best rung's;
- `cpu_seconds`: what the ladder cost: the CPU seconds of the scripts it ran and of its own grading.

Where no model rung's interval lies above the trivial rung's, nothing was learned to rank: the finding has no
score (tau and spread would blame the ladder's sameness for a task that teaches nothing, which `learnable` and
`reachable` judge). The gate rejects on `validate.min_ladder_tau` (the order disagrees badly with the scores) and
`validate.min_ladder_spread` (too few rungs apart: the task cannot tell solvers apart); the check flags
nothing.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from dareforge.config import Config
from dareforge.generators.references import last_line
from dareforge.reference_solutions.graders import InvalidPredictionError, grade, score_interval
from dareforge.reference_solutions.ladder import TRIVIAL, UNORDERED, model_rungs
from dareforge.reference_solutions.reference_code import (
    PREDICTIONS,
    STRONG_PREDICTIONS,
    STRONG_SCRIPT,
    StrongSpec,
    strong_spec_of,
)
from dareforge.reference_solutions.reference_runner import ReferenceRunner
from dareforge.validators.check import Finding, TaskView

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

    def close(self) -> None:
        """Stop this process's worker now (a bench accounts its CPU seconds once it is reaped); the next task
        starts another."""
        if self._runner is not None and self._runner_pid == os.getpid():
            self._runner.close()
        self._runner = None

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
        started = time.process_time()
        # Read once, as the grader reads a file (every cell as text): every rung's grade would read it again.
        answers = pd.read_csv(
            view.path("private", "answers.csv"), dtype=str, keep_default_na=False, encoding="utf-8-sig"
        )
        budget = config.validate_.ladder_cpu_seconds
        scripted, spent = _scripted(view, spec, answers, strong_code, runner, budget)
        rungs = [_trivial(view, answers), *scripted]
        # The worker's CPU seconds in the scripts it ran, and this process's in everything else (the trivial
        # rung, the grading and the bootstrap intervals; waiting for the worker costs none).
        return _finding(view, rungs, spent + time.process_time() - started)


def _trivial(view: TaskView, answers: pd.DataFrame) -> RungResult:
    """The best of the family's trivial answers (the task's bar), computed here: it needs no script."""
    metric = view.task.metric
    candidates = view.family.trivial(view).values()
    best = max(candidates, key=lambda predictions: grade(metric, predictions, answers).score)
    return _graded(view, answers, TRIVIAL, best, 0.0)


def _scripted(
    view: TaskView,
    spec: StrongSpec,
    answers: pd.DataFrame,
    strong_code: str,
    runner: ReferenceRunner,
    budget: float,
) -> tuple[list[RungResult], float]:
    """Each scripted rung run on a copy of the public files within what is left of the CPU budget, and the CPU
    seconds the runs spent; a rung whose script is byte for byte the strong reference (`strong_code`), run on
    these files when the task was made, is graded on its stored predictions (it records the stored reference's
    CPU seconds and spends none)."""
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
                stored = view.path("private", STRONG_PREDICTIONS)
                results.append(_graded(view, answers, rung.name, stored, seconds))
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
            results.append(_graded(view, answers, rung.name, folder / PREDICTIONS, outcome.cpu_seconds))
    return results, spent


def _graded(
    view: TaskView, answers: pd.DataFrame, name: str, predictions: Path | pd.DataFrame, cpu_seconds: float
) -> RungResult:
    try:
        score, low, high = score_interval(view.task.metric, predictions, answers)
    except InvalidPredictionError as exc:  # what `grade` would say of these predictions
        return RungResult(name, cpu_seconds=cpu_seconds, error=str(exc))
    return RungResult(name, score, low, high, cpu_seconds)


def decided_tau(rungs: list[RungResult]) -> float:
    """Kendall's tau over the pairs of scored `rungs` (in ladder order, weakest first) that the test rows tell
    apart: (concordant - discordant) / decided, a pair being decided when the rungs' bootstrap intervals do
    not overlap, concordant when the stronger rung scores higher. Pairs within each other's noise say nothing
    of the order (two boosted models that both saturate a task tie up to which rows were drawn), so they
    count neither way, and so do the pairs the ladder leaves unordered (`ladder.UNORDERED`); 0 when no pair is
    decided (no evidence of order either way)."""
    unscored = [r.name for r in rungs if r.score is None or r.low is None or r.high is None]
    if unscored:
        raise ValueError(f"rungs without a score and an interval cannot be ranked: {', '.join(unscored)}")
    concordant = discordant = 0
    for weaker, stronger in itertools.combinations(rungs, 2):
        if frozenset({weaker.name, stronger.name}) in UNORDERED:
            continue
        if weaker.high < stronger.low:
            concordant += 1
        elif stronger.high < weaker.low:
            discordant += 1
    decided = concordant + discordant
    return (concordant - discordant) / decided if decided else 0.0


def _finding(view: TaskView, rungs: list[RungResult], cpu_seconds: float) -> Finding:
    scored = [r for r in rungs if r.score is not None]
    details = {"rungs": [asdict(r) for r in rungs], "cpu_seconds": cpu_seconds}
    failed = [r.name for r in rungs if r.error]
    if len(scored) < 3:
        return Finding(
            f"too few ladder rungs scored to rank ({', '.join(failed)} failed)", None, details=details
        )
    trivial = next((r for r in scored if r.name == TRIVIAL), None)
    if trivial is not None and not any(r.low > trivial.high for r in scored if r is not trivial):
        # Nothing learned to rank: every model's interval reaches the trivial answer's. Its tau and spread would
        # blame the ladder's sameness for what `learnable` and `reachable` judge (the task teaches nothing).
        details.update(
            tau=None, spread=None, difficulty=None, headroom=BEST_SCORE - max(r.score for r in scored)
        )
        return Finding(
            f"no model rung scores clearly above the trivial answer ({trivial.score:.3f} [{trivial.low:.3f}, "
            f"{trivial.high:.3f}]): nothing learned to rank; learnable and reachable judge the task",
            None,
            details=details,
        )
    scores = [r.score for r in scored]
    tau = decided_tau(scored)
    pairs = list(itertools.combinations(scored, 2))
    spread = sum(a.high < b.low or b.high < a.low for a, b in pairs) / len(pairs)
    strong = view.task.scores.strong
    difficulty = None if strong is None else sum(strong > s for s in scores) / len(scores)
    headroom = BEST_SCORE - max(scores)
    details.update(tau=tau, spread=spread, difficulty=difficulty, headroom=headroom)
    ranked = ", ".join(f"{r.name} {r.score:.3f} [{r.low:.3f}, {r.high:.3f}]" for r in scored)
    note = f"; failed: {', '.join(failed)}" if failed else ""
    return Finding(
        f"ladder tau {tau:.2f} over the {spread:.0%} of rung pairs apart: {ranked}{note}",
        tau,
        details=details,
    )


TASK_CHECKS = (Discrimination(),)
