"""The no-reasoning baseline for questions: every answer that one operation over the visible table gives.

A question whose certified answer is among them needs no pipeline: counting rows, a column's missing values or
distinct values, a value's count or share, a column's mode or top values, a numeric column's sum, mean, median,
sample standard deviation, minimum or maximum. Such a question is easy by definition, whatever its text says.
Boolean questions are left out: any guess is right half the time, so "solved" says nothing there.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd

from dareforge.reference_solutions.answers import score_answer
from dareforge.schema import MetricSpec

MAX_VALUES = 50
"""Values per column whose count and share are tried (the most frequent first)."""
TOP_K = (1, 2, 3)
SOLVED = 0.99
"""A candidate solves the question at this score (a question attempt's own pass bar)."""


def one_step_answers(frame: pd.DataFrame) -> Iterator[tuple[str, Any]]:
    """(kind, answer) for every single operation over `frame`; kind is `number`, `text` or `list`."""
    rows = len(frame)
    yield "number", rows
    yield "number", int(frame.duplicated().sum())
    yield "list", [str(c) for c in frame.columns if frame[c].isna().any()]
    for column in frame.columns:
        values = frame[column]
        yield "number", int(values.isna().sum())
        yield "number", int(values.nunique())
        counts = values.value_counts()
        for k in TOP_K:
            yield "list", [_plain(v) for v in counts.index[:k]]
        if len(counts):
            yield "text", str(_plain(counts.index[0]))
        for n in counts.iloc[:MAX_VALUES]:
            yield "number", int(n)
            yield "number", 100 * int(n) / rows if rows else 0.0
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            for stat in ("sum", "mean", "median", "std", "min", "max"):
                result = getattr(values, stat)()
                if pd.notna(result) and math.isfinite(result):  # a column holding inf: no answer is inf
                    yield "number", float(result)


def one_step_solves(metric: MetricSpec, answer: Any, frame: pd.DataFrame) -> bool:
    """Whether one operation over `frame` gives `answer`: graded by the question's metric at SOLVED, a number
    to the decimals the question states (an approximate grade would let one of hundreds of unrelated
    candidates land within 1% of the answer by chance)."""
    kind = _kind(metric.answer_type)
    if kind is None:
        return False
    if kind == "number":
        metric = metric.model_copy(update={"answer_type": "numeric_exact"})
    return any(
        score_answer(metric, answer, candidate)[0] >= SOLVED
        for candidate_kind, candidate in one_step_answers(frame)
        if candidate_kind == kind
    )


def _kind(answer_type: str | None) -> str | None:
    if answer_type in ("numeric_exact", "numeric_approximate"):
        return "number"
    if answer_type in ("string_exact", "string_approximate"):
        return "text"
    if answer_type in ("list_exact", "list_approximate"):
        return "list"
    return None


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
