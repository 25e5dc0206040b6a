"""Duplicate checks across the run: the same dataset under two source ids, the same IF spec twice in a source (or
two that differ only in the target or the seed: `NEAR_DUPLICATE_FIELDS`).

Source similarity is a MinHash estimate of the Jaccard similarity of two token sets. A source's tokens are
its column names plus, per column, up to `VALUES_PER_COLUMN` distinct "column=value" tokens, chosen by the
smallest token hash rather than by row position, so the same data in another row order (or split another
way) yields the same tokens. Values come from a task's train.csv, and test.csv joined with answers.csv,
i.e. all the source's labelled rows (so two copies split differently still match); the task read is one
whose files hold every column in clean form (MM or TS-XF before TS-CF before IF, whose train has noise
rows). Whole-row hashes join the tokens, so similar value ranges alone do not make two sources twins.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from dareforge.config import Config
from dareforge.minhash import VALUES_PER_COLUMN, minhash, similarity, token_hashes
from dareforge.validators.check import Finding, TaskView


def _cell_texts(values: pd.Series) -> pd.Series:
    """Cells as comparable text (missing as ""): numbers as float reprs, so 1 and 1.0 read the same."""
    if pd.api.types.is_bool_dtype(values):
        texts = values.map(str)
    elif pd.api.types.is_numeric_dtype(values):
        texts = values.astype("float64").map(repr)
    else:
        texts = values.map(str).str.strip()
    return texts.where(values.notna(), "")


def labelled_rows(view: TaskView) -> pd.DataFrame:
    """The task's labelled rows: train.csv, plus test.csv joined with answers.csv on their shared columns."""
    frames = [view.train]
    if view.has("public", "test.csv") and view.has("private", "answers.csv"):
        test, answers = view.test, view.answers
        on = [c for c in test.columns if c in answers.columns]
        if on:
            frames.append(test.merge(answers, on=on, how="inner"))
    return pd.concat(frames, ignore_index=True)


def source_tokens(view: TaskView) -> np.ndarray:
    """Hashes of a source's tokens (see the module doc).

    Column names; per column the `VALUES_PER_COLUMN` value tokens with the smallest hashes; and the
    `VALUES_PER_COLUMN` smallest whole-row hashes, so that two sources with similar value ranges per column
    (two cities' temperatures over one calendar) still differ unless their rows agree. The id column's values
    are left out: a sequential row id is shared by every dataset of a similar size.
    """
    rows = labelled_rows(view)
    columns = sorted(str(c) for c in rows.columns if c != view.prepared.id_column)
    texts = pd.DataFrame({c: _cell_texts(rows[c]) for c in columns}, index=rows.index)
    parts = [token_hashes([f"#column:{c}" for c in sorted(map(str, rows.columns))])]
    for column in columns:
        values = texts[column].loc[texts[column] != ""].unique()
        hashes = np.unique(token_hashes([f"{column}={t}" for t in values]))
        parts.append(hashes[:VALUES_PER_COLUMN])  # np.unique sorts: the smallest hashes, content-defined
    if columns:
        row_hashes = np.unique(pd.util.hash_pandas_object(texts, index=False).to_numpy(dtype=np.uint64))
        parts.append(row_hashes[:VALUES_PER_COLUMN])
    return np.unique(np.concatenate(parts))


def _representative(views: list[TaskView]) -> TaskView:
    """The task that shows the source's data most cleanly (all columns, no noise: MM or TS-XF before TS-CF, IF
    last), by its family's `shows_clean_data`."""
    return min(views, key=lambda v: (v.family.shows_clean_data, v.task.id))


class DuplicateSource:
    """Per task: the highest similarity between its source and any other source whose id sorts before it.

    Of two twin sources the first by id scores low and is kept; the later one scores high. Never flags; the
    gate compares the score with `validate.duplicate_min_similarity`.
    """

    name = "duplicate-source"

    def run_all(self, views: list[TaskView], config: Config) -> dict[str, Finding]:
        by_source: dict[str, list[TaskView]] = defaultdict(list)
        questions: dict[str, list[TaskView]] = defaultdict(list)
        for view in views:
            (questions if view.is_question else by_source)[view.task.source_id].append(view)
        # A source's data is compared through its prediction tasks; its question tasks share their finding.
        signatures = {
            source: minhash(source_tokens(_representative(group))) for source, group in by_source.items()
        }
        ordered = sorted(signatures)
        findings: dict[str, Finding] = {}
        for position, source in enumerate(ordered):
            earlier = ordered[:position]
            if earlier:
                scores = {other: similarity(signatures[source], signatures[other]) for other in earlier}
                closest, best = max(scores.items(), key=lambda kv: (kv[1], kv[0]))
                reason = (
                    f"source data resembles `{closest}` (estimated Jaccard {best:.2f}), "
                    f"the closest of {len(earlier)} source(s) whose id sorts before this one"
                )
                details = {"source": closest, "similarity": round(best, 4), "compared": len(earlier)}
                if best == 0.0:
                    reason = f"no sampled token in common with any of {len(earlier)} earlier source(s)"
                    details["source"] = None
            else:
                best, reason = 0.0, "first source by id: no earlier source to duplicate"
                details = {"source": None, "similarity": 0.0, "compared": 0}
            for view in by_source[source] + questions.pop(source, []):
                findings[view.task.id] = Finding(reason, best, details=details)
        for group in questions.values():
            for view in group:
                findings[view.task.id] = Finding(
                    "no prediction task of the source to compare its data by", 0.0
                )
        return findings


def _parsed(spec: str) -> Any:
    try:
        return json.loads(spec)
    except json.JSONDecodeError:
        return spec


NEAR_DUPLICATE_FIELDS = ("target", "seed", "unstated")
"""Fields of a seeded pipeline's spec (an IF spec) two tasks of one source may differ in and still be one task:
the target (the same features through the same pipeline and model, asked of another column: two framings of one
source sample the same workflow from the same seed), the seed (with the model's `random_state` it draws, and the
bounds it reads off the training rows), and what the instruction leaves out. Of such twins one is a task and the
rest are its copies."""


def _near_key(spec: Any) -> str | None:
    """The spec without what `NEAR_DUPLICATE_FIELDS` lets differ (filters by their column only, the model without
    its `random_state`), or None for a spec that is no seeded pipeline (a question's)."""
    if not isinstance(spec, dict) or not any(f in spec for f in NEAR_DUPLICATE_FIELDS):
        return None
    rest = {k: v for k, v in spec.items() if k not in NEAR_DUPLICATE_FIELDS}
    if isinstance(model := rest.get("model"), dict):
        params = {k: v for k, v in (model.get("params") or {}).items() if k != "random_state"}
        rest["model"] = {**model, "params": params}
    if isinstance(rest.get("filters"), list):
        rest["filters"] = [
            {k: f.get(k) for k in ("kind", "column")} if isinstance(f, dict) else f for f in rest["filters"]
        ]
    return json.dumps(rest, sort_keys=True, default=str)


def _differences(spec: dict, twin: dict) -> str:
    """What tells two near-duplicate specs apart, in words ("the target (`b`, not `a`)")."""
    fields = [f for f in NEAR_DUPLICATE_FIELDS if f != "unstated" and spec.get(f) != twin.get(f)]
    words = [f"the {f} ({spec.get(f)!r}, not {twin.get(f)!r})" for f in fields]
    return " and ".join(words) or "the seed's draws (a model's random_state, a filter's bounds)"


class DuplicateTask:
    """1.0 for a task whose spec equals that of an earlier task (by id) of the same source, or differs from it only
    in what `NEAR_DUPLICATE_FIELDS` allows (a near-duplicate); else 0.0. The first task by id is kept."""

    name = "duplicate-task"

    def run_all(self, views: list[TaskView], config: Config) -> dict[str, Finding]:
        first: dict[tuple[str, str], str] = {}
        near: dict[tuple[str, str], tuple[str, dict]] = {}
        findings: dict[str, Finding] = {}
        for view in sorted(views, key=lambda v: v.task.id):
            task = view.task
            if task.spec is None:
                findings[task.id] = Finding("no IF spec to compare (one MM/TS task per family)", 0.0)
                continue
            spec = _parsed(task.spec)
            key = (task.source_id, json.dumps(spec, sort_keys=True) if isinstance(spec, dict) else spec)
            close = _near_key(spec)
            if key in first:
                findings[task.id] = Finding(
                    f"same spec as task `{first[key]}` of the same source",
                    1.0,
                    details={"twin": first[key]},
                )
            elif close is not None and (task.source_id, close) in near:
                twin, twin_spec = near[(task.source_id, close)]
                findings[task.id] = Finding(
                    f"near-duplicate of task `{twin}` of the same source: the same features, filters, pipeline "
                    f"and model, differing only in {_differences(spec, twin_spec)}",
                    1.0,
                    details={"twin": twin, "near": True},
                )
            else:
                first[key] = task.id
                if close is not None:
                    near[(task.source_id, close)] = (task.id, spec)
                findings[task.id] = Finding("spec differs from every earlier task of the source", 0.0)
        return findings


TASK_CHECKS: tuple = ()
RUN_CHECKS = (DuplicateSource(), DuplicateTask())
