"""The frames the great-expectations suites validate: a task's files as pandas reads them, the key sets derived
from them, and task records as rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from dareforge.hashing import sha256_file
from dareforge.validators.check import TaskView
from dareforge.validators.gx_outcomes import KEY

KEY_SEPARATOR = "|"  # joins the text of compound keys (time + entity)

_CACHED = {
    ("public", "train.csv"): "train",
    ("public", "test.csv"): "test",
    ("private", "answers.csv"): "answers",
}


class Missing(Exception):
    """A file a check needs is absent or unreadable: the check reports it as a flagged finding."""


def read_file(view: TaskView, side: str, name: str) -> pd.DataFrame:
    """A task file with pandas' defaults (the view's cached frame for train/test/answers)."""
    if not view.has(side, name):
        raise Missing(f"{side}/{name} is missing")
    try:
        cached = _CACHED.get((side, name))
        return getattr(view, cached) if cached else view.frame(side, name)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise Missing(f"{side}/{name} cannot be read: {type(exc).__name__}: {exc}") from exc


def digest(view: TaskView, side: str, name: str) -> str:
    """The sha256 of a task file as it is on disk: the frames above are functions of these bytes."""
    return sha256_file(view.path(side, name))


def key_text(view: TaskView, side: str, name: str, frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """The key of each row exactly as written in the file (compound keys joined); empty if a key is absent."""
    if not keys or any(k not in frame.columns for k in keys):
        return pd.Series([], dtype=object)
    text = pd.read_csv(view.path(side, name), usecols=keys, dtype=str, keep_default_na=False)
    joined = text[keys[0]]
    for k in keys[1:]:
        joined = joined + KEY_SEPARATOR + text[k]
    return joined


def counts(**sides: pd.Series) -> pd.DataFrame:
    """One row per key: how often each side has it (equal counts everywhere = same set, same count)."""
    frame = pd.concat({side: keys.value_counts() for side, keys in sides.items()}, axis=1)
    frame = frame.fillna(0).astype("int64")
    frame.index.name = KEY
    return frame


def presence(**sides: pd.Series) -> pd.DataFrame:
    """One row per key: 1 where a side has it, else 0."""
    frame = counts(**sides)
    return (frame > 0).astype("int64")


def record_row(task: Any) -> dict[str, Any]:
    """The task record as one row; empty text and empty lists become nulls (so "required" catches them)."""

    def text(value: Any) -> Any:
        return None if value is None or value == "" else value

    def joined(values: Iterable[Any] | None) -> str | None:
        items = [getattr(v, "name", v) for v in values or ()]
        return ",".join(str(v) for v in items) or None

    metric, limits = getattr(task, "metric", None), getattr(task, "limits", None)
    return {
        "id": text(task.id),
        "family": text(task.family),
        "source_id": text(task.source_id),
        "source_version": text(task.source_version),
        "prepared_version": text(task.prepared_version),
        "generator_version": text(task.generator_version),
        "seed": task.seed,
        "instruction": text(task.instruction),
        "public_files": joined(task.public_files),
        "private_files": joined(task.private_files),
        "metric_name": text(metric.name) if metric is not None else None,
        "target_columns": joined(metric.target_columns) if metric is not None else None,
        "key_columns": joined(metric.key_columns) if metric is not None else None,
        "answer_type": text(metric.answer_type) if metric is not None else None,
        "turns": limits.turns if limits is not None else None,
        "seconds_per_execution": limits.seconds_per_execution if limits is not None else None,
        "status": text(task.status),
    }
