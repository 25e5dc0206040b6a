"""Grading by execution: the agent's `predictions.csv` against the task's private answers, on the host.

The answers never enter the sandbox or a prompt: the evaluator copies them into a host-only temporary folder
(separate from the sandbox's inputs and workspace) just for `grade`. An IF task is graded against its
reference run's predictions (`reference_predictions.csv`: following the workflow exactly is the task); MM and
TS tasks against the held-out answers (`answers.csv`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dareforge.config import DARE_BENCH_PASS_BARS
from dareforge.errors import ConfigError
from dareforge.reference_solutions.graders import GradeResult, grade
from dareforge.schema import Task

PREDICTIONS = "predictions.csv"

PASS_BARS: Mapping[str, float] = DARE_BENCH_PASS_BARS
"""DARE-bench's bars: an MM/TS attempt passes when its score reaches its family's bar. IF tasks pass only with
a score of exactly 1.0 (every prediction matches the reference run)."""

IF_FAMILIES = frozenset({"Class-IF", "Reg-IF"})


def is_if(task: Task) -> bool:
    return task.family in IF_FAMILIES


def answers_file(task: Task) -> str:
    """The private file an attempt at `task` is graded against."""
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
    if family not in pass_bars:
        raise ConfigError(
            f"no pass bar for family {family!r}; give one in pass_bars (known: {sorted(pass_bars)})"
        )
    return score >= pass_bars[family]
