"""Difficulty tiers of question tasks, from what the certified program needs and what a shortcut answers.

- easy: one operation, or an answer the one-step baseline (`one_step`) gives from the visible files, whatever
  the question's text says;
- medium: two operations;
- hard: three operations or more, or a join across two files, with sub-tasks for the key steps.

A Lake task's operations start with how its files become one table (`combine` parts, or `join` two tables) and
the `clean` step its mess needs, before the question's own.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dareforge.generators.questions.one_step import one_step_solves
from dareforge.schema import Difficulty, MetricSpec

HARD_OPERATIONS = 3


def tier(operations: Sequence[str], joins_files: bool, has_subtasks: bool, shortcut: bool) -> Difficulty:
    if shortcut or len(operations) <= 1:
        return "easy"
    if has_subtasks and (joins_files or len(operations) >= HARD_OPERATIONS):
        return "hard"
    return "medium"


def visible_frames(folder: Path) -> list[pd.DataFrame]:
    """Every CSV of a task's public folder as pandas reads it by default (what a one-line shortcut sees); a
    file pandas cannot read that way offers no shortcut. Its mixed-type columns stay as pandas makes them,
    without the warning that lists every such column (one line of 15 KB per wide file in the run's log)."""
    frames = []
    for path in sorted(folder.glob("*.csv")):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", pd.errors.DtypeWarning)
                frames.append(pd.read_csv(path))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
            continue
    return frames


def shortcut_solves(metric: MetricSpec, answer: Any, frames: Iterable[pd.DataFrame]) -> bool:
    return any(one_step_solves(metric, answer, frame) for frame in frames)
