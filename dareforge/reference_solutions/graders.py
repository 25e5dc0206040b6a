"""Grade a predictions CSV against the private answers (or an IF task's reference predictions), or a question
task's `answer.json` against its certified answer.

`grade` never raises for a bad submission: it returns the metric's worst score with an `error` that names
the problem and the fix. A bad answers file, an unknown metric or bad metric parameters are the
benchmark's fault and raise `GradingError`.

A path is read only when it is a regular file of at most `MAX_PREDICTIONS_BYTES`, opened without following a
link (`submission_files`): a symbolic link, FIFO, device or folder where the predictions should be scores the
worst, whatever it points at. It is streamed, keeping only the key and target columns, and a submission is
refused past the answers' row count and `ROW_MARGIN`, `MAX_CSV_COLUMNS` fields or a cell of `MAX_CELL_CHARS`,
so grading holds at most those rows' cells in memory, whatever the file's size. Both tables are read with every column as text (so an id "007" stays "007"), cells and header names
stripped of surrounding whitespace. Rows are joined on `MetricSpec.key_columns`: a key column whose answers
are all plain integers ("12", "-3", no leading zeros) matches by integer value, so "12.0" (what pandas writes
back for an integer column that held a missing value) finds "12", while "12.5" matches nothing and is named
in the error; every other key column (text, dates, zero-padded ids such as "007") matches on its exact text.
Target values are converted to floats only for numeric metrics. Extra submission columns are ignored.

Question tasks (metric `answer`) are graded by `dareforge.reference_solutions.answers`.
"""

from __future__ import annotations

import csv
import math
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import is_scalar

from dareforge.reference_solutions.answers import grade_answer
from dareforge.reference_solutions.metrics import (
    METRICS,
    GradingError,
    InvalidPredictionError,
    Metric,
    get_metric,
    is_pass_metric,
)
from dareforge.reference_solutions.results import GradeResult, Paraphrase, Rejected
from dareforge.reference_solutions.submission_files import ROW_MARGIN, CsvRefused, read_csv_columns
from dareforge.schema import ANSWER_METRIC, MetricSpec

__all__ = [
    "METRICS",
    "GradeResult",
    "GradingError",
    "InvalidPredictionError",
    "Paraphrase",
    "bootstrap_scores",
    "grade",
    "is_pass_metric",
]


PLAIN_INTEGER = re.compile(r"0|-?[1-9][0-9]*")
"""An integer as str(int) writes it: the form that makes an answers key column integer-valued."""
MAX_KEY_DIGITS = 100
"""Longer numbers are left as text: no id has them, and int() of "1e999999999" would exhaust memory."""


def grade(
    metric: MetricSpec,
    submission: Path | str | pd.DataFrame,
    answers: Path | str | pd.DataFrame,
    *,
    paraphrase: Paraphrase | None = None,
) -> GradeResult:
    """Score `submission` against `answers` with `metric`; see the module docstring for the rules.

    `paraphrase` is used only by approximate string answers of question tasks."""
    if metric.name == ANSWER_METRIC:
        return grade_answer(metric, submission, answers, paraphrase)
    scorer = get_metric(metric.name)
    for target in metric.target_columns or [None]:
        scorer.check_params(tolerance=metric.tolerance, k=metric.k, scale=scale_of(metric, target))
    _check_spec(metric)
    truth = _load_answers(metric, scorer, answers)

    try:
        table = _read_table(submission, "submission", _needed(metric), len(truth) + ROW_MARGIN)
    except Rejected as exc:
        return GradeResult(score=scorer.worst, error=str(exc), rows=0)
    try:
        score = _score(metric, scorer, truth, table)
    except (Rejected, InvalidPredictionError) as exc:
        return GradeResult(score=scorer.worst, error=str(exc), rows=len(table))
    return GradeResult(score=score, error=None, rows=len(table))


# --- reading -------------------------------------------------------------------------------------------


def _read_table(
    source: Path | str | pd.DataFrame, what: str, columns: list[str], max_rows: int | None = None
) -> pd.DataFrame:
    """`columns` of a table (all of a frame's), every header and cell as stripped text, missing cells (NaN,
    None) "". A file is streamed and refused past `max_rows` rows or the other bounds of `read_csv_columns`;
    when its header lacks one of `columns`, the frame has the header's columns and no row."""
    if isinstance(source, pd.DataFrame):
        return _text_frame(source)
    path = Path(source)
    fix = "; write the predictions CSV to this path" if what == "submission" else ""
    try:
        header, cells = read_csv_columns(path, columns, max_rows)
    except FileNotFoundError:
        raise Rejected(f"{what} file not found: {path} does not exist{fix}") from None
    except CsvRefused as exc:
        raise Rejected(f"{what} cannot be graded: {exc}") from None
    except OSError as exc:
        raise Rejected(f"{what} {path} cannot be graded: {exc}{fix} as a regular file") from None
    except (ValueError, csv.Error) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Rejected(
            f"could not read {what} {path} as a UTF-8 comma-separated CSV ({detail}); "
            "write it with a header line, e.g. with pandas DataFrame.to_csv(path, index=False)"
        ) from None
    if not cells:
        return pd.DataFrame(columns=header, dtype=object)
    frame = pd.DataFrame(
        {i: np.array(column, dtype=object) for i, column in enumerate(cells)},
        index=pd.RangeIndex(len(cells[0])),
        dtype=object,
    )
    frame.columns = columns
    return frame


def _text_frame(frame: pd.DataFrame) -> pd.DataFrame:
    # Cell by cell in Python: a CSV read as text is all str already, and per-column pandas steps cost more
    # than the cells on the tables graded here (a grade is on every agent episode's path).
    columns = {}
    for i in range(frame.shape[1]):
        values = frame.iloc[:, i].to_numpy(dtype=object)
        text = np.empty(len(values), dtype=object)
        text[:] = [v.strip() if type(v) is str else _cell_text(v) for v in values]
        columns[i] = text
    out = pd.DataFrame(columns, index=pd.RangeIndex(len(frame)), dtype=object)
    out.columns = [str(c).strip() for c in frame.columns]
    return out


def _cell_text(value: object) -> str:
    if isinstance(value, str):
        return value.strip()
    if is_scalar(value) and pd.isna(value):  # None, NaN, pd.NA, NaT
        return ""
    return str(value).strip()


# --- checks --------------------------------------------------------------------------------------------


def _check_spec(metric: MetricSpec) -> None:
    if not metric.key_columns or not metric.target_columns:
        raise GradingError(
            f"metric spec needs key_columns and target_columns, got keys={metric.key_columns} "
            f"targets={metric.target_columns}; fill both in the task's MetricSpec"
        )
    overlap = set(metric.key_columns) & set(metric.target_columns)
    if overlap:
        raise GradingError(f"columns {sorted(overlap)} are both key and target in the metric spec; fix it")


def _load_answers(metric: MetricSpec, scorer: Metric, answers: Path | str | pd.DataFrame) -> pd.DataFrame:
    try:
        truth = _read_table(answers, "answers", _needed(metric))
        _check_columns(truth, metric, "answers")
        if len(truth) == 0:
            raise Rejected("answers have no rows")
        _check_duplicates(truth, metric.key_columns, "answers")
        for column in metric.target_columns:
            _target_values(truth[column], truth, metric.key_columns, column, scorer, "answers")
    except Rejected as exc:
        raise GradingError(
            f"bad answers for metric {metric.name!r}: {exc} (a fault of the task, not of the submission; "
            "regenerate the task's private files)"
        ) from None
    return truth


def _check_columns(table: pd.DataFrame, metric: MetricSpec, what: str) -> None:
    needed = _needed(metric)
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise Rejected(
            f"{what} is missing column(s) {_names(missing)}; found columns {_names(list(table.columns))}. "
            f"The header must include {_names(needed)}"
        )


def _needed(metric: MetricSpec) -> list[str]:
    return [*metric.key_columns, *metric.target_columns]


def _check_duplicates(table: pd.DataFrame, keys: list[str], what: str) -> None:
    repeated = table.duplicated(subset=keys, keep="first")
    if repeated.any():
        first = table.loc[repeated, keys].iloc[0]
        times = int((table[keys] == first.to_numpy()).all(axis=1).sum())
        raise Rejected(
            f"{what} has {int(repeated.sum())} duplicate row(s) for a key already present, e.g. "
            f"{_key_text(keys, first.tolist())} appears {times} times; write exactly one row per key"
        )


def _integer_keys(truth: pd.DataFrame, keys: list[str]) -> list[str]:
    """The key columns whose answers are all plain integers; they match by integer value."""
    return [k for k in keys if all(PLAIN_INTEGER.fullmatch(v) for v in truth[k])]


def _integer_text(text: str) -> str | None:
    """`text` as a plain integer when it is a whole number ("12.0", "1.2e1" -> "12"), else None."""
    if PLAIN_INTEGER.fullmatch(text):
        return text
    if "_" in text:  # Decimal accepts "1_2"; an id with an underscore is text
        return None
    try:
        number = Decimal(text)
    except InvalidOperation:
        return None
    if not number.is_finite() or number.adjusted() > MAX_KEY_DIGITS or number != number.to_integral_value():
        return None
    return str(int(number))


def _match_integer_keys(table: pd.DataFrame, integer_keys: list[str]) -> pd.DataFrame:
    """The submission with whole-number values of integer key columns rewritten as plain integers."""
    if not integer_keys:
        return table
    table = table.copy()
    for column in integer_keys:
        table[column] = [_integer_text(v) or v for v in table[column]]
    return table


def _key_tuples(table: pd.DataFrame, keys: list[str]) -> list[tuple[str, ...]]:
    return list(zip(*(table[k].tolist() for k in keys), strict=True))


def _check_keys(truth: pd.DataFrame, table: pd.DataFrame, keys: list[str], integer_keys: list[str]) -> None:
    # Both sides hold each key once (checked before), so sets compare them; examples are the smallest, as
    # an outer merge (which sorts its keys) would list them first.
    expected, given = set(_key_tuples(truth, keys)), set(_key_tuples(table, keys))
    if expected == given:
        return
    missing = pd.DataFrame(sorted(expected - given), columns=keys, dtype=object)
    extra = pd.DataFrame(sorted(given - expected), columns=keys, dtype=object)
    parts = []
    if len(table) != len(truth):
        parts.append(f"submission has {len(table)} rows but {len(truth)} were expected (one per test row)")
    if not missing.empty:
        parts.append(
            f"{len(missing)} expected key(s) are missing, e.g. {_key_text(keys, missing.iloc[0].tolist())}"
        )
    if not extra.empty:
        parts.append(
            f"{len(extra)} unexpected key(s) not in the test set, e.g. "
            f"{_key_text(keys, extra.iloc[0].tolist())}"
        )
    for column in integer_keys:
        fractional = [v for v in extra[column] if _integer_text(v) is None and _is_number(v)]
        if fractional:
            parts.append(
                f"key {column!r} holds whole numbers in the test set, but {len(fractional)} submission "
                f"value(s) are not whole, e.g. {fractional[0]!r}; write the test file's integers"
            )
    if integer_keys:
        rule = (
            f"Integer keys ({_names(integer_keys)}) match by value ('12' == '12.0'), any other key by its "
            "exact text: copy the keys from the test file and predict every test row"
        )
    else:
        rule = (
            f"Keys ({_names(keys)}) are compared as exact text: copy them unchanged from the test file "
            "(e.g. '007', not '7' or '7.0') and predict every test row"
        )
    raise Rejected("; ".join(parts) + f". {rule}")


def _target_values(
    values: pd.Series, table: pd.DataFrame, keys: list[str], column: str, scorer: Metric, what: str
) -> list[str] | np.ndarray:
    """The column as the metric wants it (text or floats), or `Rejected` naming the bad values."""
    texts = values.tolist()

    def example(mask: list[bool]) -> str:
        row = mask.index(True)
        return _key_text(keys, table[keys].iloc[row].tolist())

    empty = [t == "" for t in texts]
    if scorer.kind == "label":
        if any(empty):
            raise Rejected(
                f"{what} column {column!r} has {sum(empty)} empty value(s), e.g. at {example(empty)}; "
                "every row needs a value"
            )
        return texts

    numbers = [_to_float(t) for t in texts]
    nan = [e or (n is not None and math.isnan(n)) for e, n in zip(empty, numbers, strict=True)]
    if any(nan):
        raise Rejected(
            f"{what} column {column!r} has {sum(nan)} empty or NaN value(s), e.g. at {example(nan)}; "
            "every row needs a value"
        )
    bad = [n is None for n in numbers]
    if any(bad):
        first = texts[bad.index(True)]
        raise Rejected(
            f"{what} column {column!r} has {sum(bad)} non-numeric value(s), e.g. {first!r} at {example(bad)}; "
            f"metric {scorer.name!r} needs plain numbers"
        )
    array = np.asarray(numbers, dtype=float)
    infinite = [bool(v) for v in np.isinf(array)]
    if any(infinite):
        raise Rejected(
            f"{what} column {column!r} has {sum(infinite)} infinite value(s), e.g. at {example(infinite)}; "
            "every row needs a finite number"
        )
    return array


def _is_number(text: str) -> bool:
    number = _to_float(text)
    return number is not None and math.isfinite(number)


def _to_float(text: str) -> float | None:
    if "_" in text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


# --- scoring -------------------------------------------------------------------------------------------


def _score(metric: MetricSpec, scorer: Metric, truth: pd.DataFrame, table: pd.DataFrame) -> float:
    return _mean_score(metric, scorer, _aligned(metric, scorer, truth, table))


def _mean_score(metric: MetricSpec, scorer: Metric, pairs: list[tuple[str, np.ndarray, np.ndarray]]) -> float:
    """The metric of the aligned answers and predictions, averaged over the targets."""
    scores = [
        scorer(y_true, y_pred, tolerance=metric.tolerance, k=metric.k, scale=scale_of(metric, column))
        for column, y_true, y_pred in pairs
    ]
    return float(np.mean(scores))


def _aligned(
    metric: MetricSpec, scorer: Metric, truth: pd.DataFrame, table: pd.DataFrame
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Per target: its name, the answers and the submission's values, row by row in the answers' order."""
    keys, targets = metric.key_columns, metric.target_columns
    _check_columns(table, metric, "submission")
    integer_keys = _integer_keys(truth, keys)
    table = _match_integer_keys(table, integer_keys)
    _check_duplicates(table, keys, "submission")
    _check_keys(truth, table, keys, integer_keys)

    true_names = {c: f"__true{i}" for i, c in enumerate(targets)}
    pred_names = {c: f"__pred{i}" for i, c in enumerate(targets)}
    # The submission's rows in the answers' order (the same keys, each once: checked above).
    row_of = {key: row for row, key in enumerate(_key_tuples(table, keys))}
    order = [row_of[key] for key in _key_tuples(truth, keys)]
    aligned = truth[keys + targets].rename(columns=true_names)
    for column in targets:
        aligned[pred_names[column]] = table[column].to_numpy(dtype=object)[order]
    pairs = []
    for column in targets:
        y_true = _target_values(aligned[true_names[column]], aligned, keys, column, scorer, "answers")
        y_pred = _target_values(aligned[pred_names[column]], aligned, keys, column, scorer, "submission")
        pairs.append((column, np.asarray(y_true, dtype=object), np.asarray(y_pred, dtype=object)))
    return pairs


def bootstrap_scores(
    metric: MetricSpec,
    submission: Path | str | pd.DataFrame,
    answers: Path | str | pd.DataFrame,
    resamples: int,
    seed: int,
) -> tuple[float, np.ndarray]:
    """The submission's score (as `grade` scores it) and the metric on `resamples` bootstrap resamples of the
    answer rows (drawn with replacement by a seeded generator, every target on the same rows): how much a
    score owes to which test rows were drawn. The same seed draws the same resamples for every submission of
    a task, so their scores are paired. Both come from one reading and alignment of the tables.

    A submission `grade` rejects raises InvalidPredictionError with grade's error; bad answers, GradingError."""
    if resamples < 1:
        raise GradingError(f"a bootstrap needs at least one resample; got {resamples}")
    scorer = get_metric(metric.name)
    try:
        truth = _load_answers(metric, scorer, answers)
        table = _read_table(submission, "submission", _needed(metric), len(truth) + ROW_MARGIN)
        pairs = _aligned(metric, scorer, truth, table)
    except Rejected as exc:
        raise InvalidPredictionError(str(exc)) from None
    rows = len(pairs[0][1])
    drawn = np.random.default_rng(seed).integers(0, rows, size=(resamples, rows))
    # How often each row is in each resample: resample r's draws are offset into a block of its own.
    counts = np.bincount((drawn + rows * np.arange(resamples)[:, None]).ravel(), minlength=resamples * rows)
    counts = counts.reshape(resamples, rows)
    per_target = [
        scorer.on_resamples(
            y_true, y_pred, counts, tolerance=metric.tolerance, k=metric.k, scale=scale_of(metric, column)
        )
        for column, y_true, y_pred in pairs
    ]
    return _mean_score(metric, scorer, pairs), np.mean(per_target, axis=0)


BOOTSTRAP_RESAMPLES = 200
BOOTSTRAP_SEED = 0
INTERVAL = (2.5, 97.5)
"""Percentiles of the bootstrap scores that bound a score's interval."""


def score_interval(
    metric: MetricSpec,
    submission: Path | str | pd.DataFrame,
    answers: Path | str | pd.DataFrame,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float, float]:
    """The submission's score and the bounds of its bootstrap interval (`INTERVAL` of `bootstrap_scores`):
    how far the score could move had other test rows been drawn. The same seed draws the same rows for every
    submission of a task, so intervals of a task's submissions compare. Raises as `bootstrap_scores` does."""
    score, resampled = bootstrap_scores(metric, submission, answers, resamples, seed)
    low, high = np.percentile(resampled, INTERVAL)
    # A bootstrap's percentiles need not hold the full sample's score (a skewed metric); the interval does.
    return score, min(float(low), score), max(float(high), score)


def scale_of(metric: MetricSpec, target: str | None) -> float | None:
    """A target's scale (forecast-skill), or None when the spec has none for it."""
    if not metric.scale or target not in metric.target_columns:
        return None
    position = metric.target_columns.index(target)
    return metric.scale[position] if position < len(metric.scale) else None


def _names(columns: list[str]) -> str:
    return ", ".join(repr(c) for c in columns) if columns else "(none)"


def _key_text(keys: list[str], values: list[object]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in zip(keys, values, strict=True))
