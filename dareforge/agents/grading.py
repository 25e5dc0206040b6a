"""Grading by execution: the agent's `predictions.csv` (or a question task's `answer.json`) against the task's
private answers, on the host.

The answers never enter the sandbox or a prompt: the evaluator copies them into a host-only temporary folder
(separate from the sandbox's inputs and workspace) just for `grade`. An IF task is graded against its
reference run's predictions (`reference_predictions.csv`: following the workflow exactly is the task); MM and
TS tasks against the held-out answers (`answers.csv`); QA and Lake tasks against the certified `answer.json`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dareforge.config import DARE_BENCH_PASS_BARS
from dareforge.errors import ConfigError
from dareforge.reference_solutions.graders import GradeResult, grade
from dareforge.schema import QUESTION_FAMILIES, Task

PREDICTIONS = "predictions.csv"
ANSWER = "answer.json"
QUESTION_PASS_BAR = 0.99
"""A QA/Lake attempt passes at this score: exact answers need 1; an approximate number within about 1% of the
certified one (KramaBench's RAE score 1/(1+0.01)) passes too."""

PASS_BARS: Mapping[str, float] = DARE_BENCH_PASS_BARS
"""DARE-bench's bars: an MM/TS attempt passes when its score reaches its family's bar. IF tasks pass only with
a score of exactly 1.0 (every prediction matches the reference run)."""

IF_FAMILIES = frozenset({"Class-IF", "Reg-IF"})


def is_if(task: Task) -> bool:
    return task.family in IF_FAMILIES


def output_file(task: Task) -> str:
    """The file an attempt at `task` writes in its working directory and is graded on."""
    return ANSWER if task.is_question else PREDICTIONS


def answers_file(task: Task) -> str:
    """The private file an attempt at `task` is graded against."""
    if task.is_question:
        return ANSWER
    return "reference_predictions.csv" if is_if(task) else "answers.csv"


def grade_predictions(task: Task, predictions: Path, answers: Path) -> GradeResult:
    """`grade` with the task's metric; a missing or malformed predictions file gives a result with `error`."""
    return grade(task.metric, predictions, answers)


def passed(task: Task | str, score: float | None, pass_bars: Mapping[str, float] = PASS_BARS) -> bool:
    """Whether `score` passes for `task` (or a family name): IF needs 1.0, MM/TS their family's bar."""
    family = task if isinstance(task, str) else task.family
    if score is None:
        return False
    if family in IF_FAMILIES:
        return score >= 1.0
    if family in QUESTION_FAMILIES:
        return score >= pass_bars.get(family, QUESTION_PASS_BAR)
    if family not in pass_bars:
        raise ConfigError(
            f"no pass bar for family {family!r}; give one in pass_bars (known: {sorted(pass_bars)})"
        )
    return score >= pass_bars[family]
