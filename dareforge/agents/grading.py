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

from dareforge.families.registry import bar_of, family_named, family_of, pass_bars
from dareforge.reference_solutions.graders import GradeResult, grade
from dareforge.schema import Task

PASS_BARS: Mapping[str, float] = pass_bars({})
"""Every goal family's own bar (DARE-bench's for MM and TS): an attempt passes when its score reaches it. Exact
families pass only with a score of exactly 1.0 (every prediction matches the reference run), question families
at their own bar."""


def output_file(task: Task) -> str:
    """The file an attempt at `task` writes in its working directory and is graded on."""
    return family_of(task).files.output


def answers_file(task: Task) -> str:
    """The private file an attempt at `task` is graded against."""
    return family_of(task).files.truth


def grade_predictions(task: Task, predictions: Path, answers: Path) -> GradeResult:
    """`grade` with the task's metric; a missing or malformed predictions file gives a result with `error`."""
    return grade(task.metric, predictions, answers)


def passed(task: Task | str, score: float | None, bars: Mapping[str, float] = PASS_BARS) -> bool:
    """Whether `score` passes for `task`: exact families need 1.0, a task carrying its own bar that bar, the
    others their family's (`bars`, else the family's own). Given a family name only, the family's bar: a caller
    that holds the task passes the task, so that its own bar counts."""
    if score is None:
        return False
    if isinstance(task, str):
        family = family_named(task)
        return score >= (1.0 if family.exact else bars.get(family.name, family.pass_bar))
    return score >= bar_of(task, bars)
