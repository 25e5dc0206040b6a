"""What a trivial answer to a family's task is: a submission made without doing the task.

Each family declares its trivial answers (`Family.trivial`): named submissions made from what a guesser could
know or a lucky constant would hit. The `trivial` validation check grades each with the task's own grader and
the gate rejects a task where the best reaches the family's pass bar (or, under IF row-share grading, scores
above `validate.max_trivial_share`): a reward that a constant earns is not earned by doing the task.

- IF: every row the reference predictions' most frequent value and, for a number, their mean and median. These
  read the private reference predictions, which no agent sees: they bound what any one constant can score.
- MM / TS: the goal bar's own baselines (majority class and class shares, the training mean, per series for a
  series task) and, for a series, the model-free forecasts (last value, seasonal naive).
- Questions (QA, Lake): 0, 1, the empty list, true and false, the first value of every column of every public
  table, and every number the question (or a sub-question) states.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dareforge.families.family import Submission, TaskFiles, read_text
from dareforge.families.timeseries import model_free_forecasts
from dareforge.generators.questions.build import stated_numbers
from dareforge.generators.references import trivial_predictions
from dareforge.reference_solutions.metrics import get_metric
from dareforge.reference_solutions.reference_code import REFERENCE_PREDICTIONS

CONSTANT_ANSWERS: Mapping[str, Any] = {"0": 0, "1": 1, "the empty list": [], "true": True, "false": False}
"""Answers a guesser tries first, whatever the question."""
TABLE_SUFFIXES = (".csv", ".tsv")


def if_trivial(view: TaskFiles) -> dict[str, Submission]:
    """IF: each target's most frequent reference prediction on every row (ties: the smallest text), and for a
    numeric metric the predictions' mean and median."""
    metric = view.task.metric
    reference = read_text(view.path("private", REFERENCE_PREDICTIONS))
    numeric = get_metric(metric.name).kind == "numeric"
    constants: dict[str, dict[str, Any]] = {}
    for target in metric.target_columns:
        counts = reference[target].value_counts()
        constants.setdefault("most frequent value", {})[target] = min(counts.index[counts == counts.max()])
        if numeric:
            values = pd.to_numeric(reference[target], errors="coerce").dropna()
            constants.setdefault("mean", {})[target] = float(values.mean())
            constants.setdefault("median", {})[target] = float(values.median())
    keys = reference[metric.key_columns]
    return {name: keys.assign(**values) for name, values in constants.items()}


def mm_trivial(view: TaskFiles) -> dict[str, Submission]:
    """MM: the bar's baselines: the majority class and classes drawn at their training shares, or the mean."""
    metric = view.task.metric
    classification = get_metric(metric.name).kind == "label"
    test = read_text(view.path("public", "test.csv"))
    return trivial_predictions(metric, view.train, test, classification, None)


def forecast_trivial(view: TaskFiles) -> dict[str, Submission]:
    """TS: the bar's baselines: the mean per series and the model-free forecasts (last value, seasonal naive)."""
    metric, prepared = view.task.metric, view.prepared
    forecasts = model_free_forecasts(prepared, view.train, view.test, metric.key_columns)
    test = read_text(view.path("public", "test.csv"))
    return trivial_predictions(metric, view.train, test, False, prepared.entity_column, forecasts)


def question_trivial(view: TaskFiles) -> dict[str, Submission]:
    """Questions: `question_guesses` on the task's public files and its texts (instruction, sub-questions)."""
    task = view.task
    return question_guesses(view.path("public", ""), [task.instruction, *(s.question for s in task.subtasks)])


def question_guesses(public: Path, texts: list[str]) -> dict[str, Submission]:
    """The trivial answers to a question stated in `texts` on the files in `public`: the constant guesses, each
    public table's first row, and the numbers the texts state. One list for both places that ask: the gate's
    check (through `question_trivial`) and the question builders, which refuse a question one of them answers
    (`Guessing`) and draw another."""
    answers: dict[str, Any] = dict(CONSTANT_ANSWERS)
    for path in sorted(p for p in public.rglob("*") if p.suffix.lower() in TABLE_SUFFIXES and p.is_file()):
        first = _first_row(path)
        for column, value in first.items():
            answers.setdefault(f"the first `{column}` of {path.relative_to(public)}", value)
    for number in stated_numbers(texts):
        answers.setdefault(
            f"{number:g}, stated in the question", int(number) if number.is_integer() else number
        )
    return {name: {"answer": value} for name, value in answers.items()}


def _first_row(path: Path) -> dict[str, str]:
    """A table's first row as text (empty when it has none or does not parse: a Lake's files are untidy on
    purpose, and a file no reader parses offers no first value to guess)."""
    try:
        frame = pd.read_csv(
            path,
            dtype=str,
            keep_default_na=False,
            nrows=1,
            sep="\t" if path.suffix.lower() == ".tsv" else ",",
        )
    except (ValueError, OSError, UnicodeDecodeError):
        return {}
    return {str(c): v for c, v in frame.iloc[0].items() if v != ""} if len(frame) else {}
