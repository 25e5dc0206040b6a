"""Grade a predictions CSV against the private answers (or an IF task's reference predictions), or a question
task's `answer.json` against its certified answer.

`grade` never raises for a bad submission: it returns the metric's worst score with an `error` that names
the problem and the fix. A bad answers file, an unknown metric or bad metric parameters are the
benchmark's fault and raise `GradingError`.

Both tables are read with every column as text (so an id "007" stays "007"), cells and header names
stripped of surrounding whitespace. Rows are joined on `MetricSpec.key_columns`: a key column whose answers
are all plain integers ("12", "-3", no leading zeros) matches by integer value, so "12.0" (what pandas writes
back for an integer column that held a missing value) finds "12", while "12.5" matches nothing and is named
in the error; every other key column (text, dates, zero-padded ids such as "007") matches on its exact text.
Target values are converted to floats only for numeric metrics. Extra submission columns are ignored.

Question tasks (metric `answer`) are graded by KramaBench's answer types. The submission is `answer.json`, a
JSON object `{"answer": <value>}` (the private side has the same shape); the score is in [0, 1]:

- `string_exact`: 1 when the texts are equal after normalisation (Unicode NFKC, case-folded, whitespace
  collapsed, surrounding quotes and a final period removed; a number-like text compared as its exact value,
  so "7" == "7.0"), else 0.
- `string_approximate`: an LLM judge's paraphrase verdict when one is given (`paraphrase`), else the
  normalised exact match; `GradeResult.method` says which decided.
- `numeric_exact`: a number read from a JSON number or a text ("1,000", "12.5%", "3 kg" when the question's
  unit is '%' or 'kg'; "1,5" is refused as ambiguous). With `decimals` d, it passes when it lies within half a
  unit of the d-th decimal of the answer (an unrounded value that rounds to the answer passes; "3.15" for 3.14
  does not); without, an integer answer needs the same integer and a fractional one a relative error < 1e-6.
- `numeric_approximate`: 1 / (1 + |pred - true| / |true|), KramaBench's RAE score (for a true 0: 1 only when
  the prediction is 0).
- `list_exact` / `list_approximate`: F1 of a one-to-one matching of items, order ignored (KramaBench's F1;
  questions state an order so answers read alike, but the grade does not depend on it). Items match as
  `string_exact` / `numeric_exact` items; approximately: texts by the judge (else normalised exact) and numbers
  within 1% relative error. A text submission is read as a JSON list, else split on commas.
- `boolean`: true/false, yes/no or 1/0, as JSON or text.
"""

from __future__ import annotations

import csv
import json
import math
import re
import unicodedata
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from dareforge.reference_solutions.metrics import (
    METRICS,
    GradingError,
    InvalidPredictionError,
    Metric,
    canonical_label,
    get_metric,
    is_pass_metric,
)
from dareforge.schema import ANSWER_METRIC, MetricSpec

__all__ = [
    "METRICS",
    "GradeResult",
    "GradingError",
    "InvalidPredictionError",
    "Paraphrase",
    "grade",
    "is_pass_metric",
]


class GradeResult(BaseModel):
    """`score` is the metric averaged over target columns; on `error`, the metric's worst score.

    The worst score is 0.0 for higher-is-better metrics (all task-family metrics) and +inf for
    lower-is-better ones (rmse, mae, rmsle, log-loss), so a failed grade never looks like a good one.
    `rows` counts the submission's data rows (0 when it could not be read).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    score: float
    error: str | None = None
    rows: int = 0
    method: str | None = Field(
        None,
        description="Question tasks: how the answer was compared (e.g. which string comparison decided).",
    )

    @property
    def ok(self) -> bool:
        return self.error is None


class _Rejected(Exception):
    """A table problem; the caller decides whose fault it is."""


PLAIN_INTEGER = re.compile(r"0|-?[1-9][0-9]*")
"""An integer as str(int) writes it: the form that makes an answers key column integer-valued."""
MAX_KEY_DIGITS = 100
"""Longer numbers are left as text: no id has them, and int() of "1e999999999" would exhaust memory."""
Paraphrase = Callable[[str, str], bool | None]
"""`paraphrase(predicted, target)`: an LLM judge's verdict whether two texts say the same; None when it could
not decide (the grade then falls back to the normalised exact match)."""


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
        return _grade_answer(metric, submission, answers, paraphrase)
    scorer = get_metric(metric.name)
    scorer.check_params(tolerance=metric.tolerance, k=metric.k)
    _check_spec(metric)
    truth = _load_answers(metric, scorer, answers)

    try:
        table = _read_table(submission, "submission")
    except _Rejected as exc:
        return GradeResult(score=scorer.worst, error=str(exc), rows=0)
    try:
        score = _score(metric, scorer, truth, table)
    except (_Rejected, InvalidPredictionError) as exc:
        return GradeResult(score=scorer.worst, error=str(exc), rows=len(table))
    return GradeResult(score=score, error=None, rows=len(table))


# --- reading -------------------------------------------------------------------------------------------


def _read_table(source: Path | str | pd.DataFrame, what: str = "table") -> pd.DataFrame:
    """A table with every header and cell as stripped text; missing cells (NaN, None) become ""."""
    if isinstance(source, pd.DataFrame):
        return _text_frame(source)
    path = Path(source)
    if not path.is_file():
        where = "is a directory" if path.is_dir() else "does not exist"
        fix = "; write the predictions CSV to this path" if what == "submission" else ""
        raise _Rejected(f"{what} file not found: {path} {where}{fix}")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except pd.errors.EmptyDataError:
        raise _Rejected(
            f"{what} file {path} is empty; write a CSV with a header line and one row per test row"
        ) from None
    except (OSError, ValueError, csv.Error) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _Rejected(
            f"could not read {what} {path} as a UTF-8 comma-separated CSV ({detail}); "
            "write it with a header line, e.g. with pandas DataFrame.to_csv(path, index=False)"
        ) from None
    return _text_frame(frame)


def _text_frame(frame: pd.DataFrame) -> pd.DataFrame:
    columns = {}
    for i in range(frame.shape[1]):
        values = pd.Series(frame.iloc[:, i].to_numpy(dtype=object), dtype=object)
        missing = values.isna()  # None, NaN, pd.NA, NaT
        text = values.where(~missing, "").map(str).str.strip()
        columns[i] = text.to_numpy(dtype=object)
    out = pd.DataFrame(columns, index=pd.RangeIndex(len(frame)), dtype=object)
    out.columns = [str(c).strip() for c in frame.columns]
    return out


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
        truth = _read_table(answers, "answers")
        if len(truth) == 0:
            raise _Rejected("answers have no rows")
        _check_columns(truth, metric, "answers")
        _check_duplicates(truth, metric.key_columns, "answers")
        for column in metric.target_columns:
            _target_values(truth[column], truth, metric.key_columns, column, scorer, "answers")
    except _Rejected as exc:
        raise GradingError(
            f"bad answers for metric {metric.name!r}: {exc} (a fault of the task, not of the submission; "
            "regenerate the task's private files)"
        ) from None
    return truth


def _check_columns(table: pd.DataFrame, metric: MetricSpec, what: str) -> None:
    needed = [*metric.key_columns, *metric.target_columns]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise _Rejected(
            f"{what} is missing column(s) {_names(missing)}; found columns {_names(list(table.columns))}. "
            f"The header must include {_names(needed)}"
        )


def _check_duplicates(table: pd.DataFrame, keys: list[str], what: str) -> None:
    repeated = table.duplicated(subset=keys, keep="first")
    if repeated.any():
        first = table.loc[repeated, keys].iloc[0]
        times = int((table[keys] == first.to_numpy()).all(axis=1).sum())
        raise _Rejected(
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


def _check_keys(truth: pd.DataFrame, table: pd.DataFrame, keys: list[str], integer_keys: list[str]) -> None:
    both = truth[keys].merge(table[keys], on=keys, how="outer", indicator="__side__")
    missing = both.loc[both["__side__"] == "left_only", keys]
    extra = both.loc[both["__side__"] == "right_only", keys]
    if missing.empty and extra.empty:
        return
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
    raise _Rejected("; ".join(parts) + f". {rule}")


def _target_values(
    values: pd.Series, table: pd.DataFrame, keys: list[str], column: str, scorer: Metric, what: str
) -> list[str] | np.ndarray:
    """The column as the metric wants it (text or floats), or `_Rejected` naming the bad values."""
    texts = values.tolist()

    def example(mask: list[bool]) -> str:
        row = mask.index(True)
        return _key_text(keys, table[keys].iloc[row].tolist())

    empty = [t == "" for t in texts]
    if scorer.kind == "label":
        if any(empty):
            raise _Rejected(
                f"{what} column {column!r} has {sum(empty)} empty value(s), e.g. at {example(empty)}; "
                "every row needs a value"
            )
        return texts

    numbers = [_to_float(t) for t in texts]
    nan = [e or (n is not None and math.isnan(n)) for e, n in zip(empty, numbers, strict=True)]
    if any(nan):
        raise _Rejected(
            f"{what} column {column!r} has {sum(nan)} empty or NaN value(s), e.g. at {example(nan)}; "
            "every row needs a value"
        )
    bad = [n is None for n in numbers]
    if any(bad):
        first = texts[bad.index(True)]
        raise _Rejected(
            f"{what} column {column!r} has {sum(bad)} non-numeric value(s), e.g. {first!r} at {example(bad)}; "
            f"metric {scorer.name!r} needs plain numbers"
        )
    array = np.asarray(numbers, dtype=float)
    infinite = [bool(v) for v in np.isinf(array)]
    if any(infinite):
        raise _Rejected(
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
    keys, targets = metric.key_columns, metric.target_columns
    _check_columns(table, metric, "submission")
    integer_keys = _integer_keys(truth, keys)
    table = _match_integer_keys(table, integer_keys)
    _check_duplicates(table, keys, "submission")
    _check_keys(truth, table, keys, integer_keys)

    true_names = {c: f"__true{i}" for i, c in enumerate(targets)}
    pred_names = {c: f"__pred{i}" for i, c in enumerate(targets)}
    aligned = (
        truth[keys + targets]
        .rename(columns=true_names)
        .merge(table[keys + targets].rename(columns=pred_names), on=keys, how="left", validate="one_to_one")
    )
    scores = []
    for column in targets:
        y_true = _target_values(aligned[true_names[column]], aligned, keys, column, scorer, "answers")
        y_pred = _target_values(aligned[pred_names[column]], aligned, keys, column, scorer, "submission")
        scores.append(scorer(y_true, y_pred, tolerance=metric.tolerance, k=metric.k))
    return float(np.mean(scores))


def _names(columns: list[str]) -> str:
    return ", ".join(repr(c) for c in columns) if columns else "(none)"


def _key_text(keys: list[str], values: list[object]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in zip(keys, values, strict=True))


# --- question answers ----------------------------------------------------------------------------------

ANSWER_KEY = "answer"
APPROXIMATE_ITEM_TOLERANCE = 0.01
"""list_approximate: numeric items match within this relative error (KramaBench's f1_approximate)."""
EXACT_RELATIVE_TOLERANCE = 1e-6
"""numeric_exact without decimals: a fractional answer matches within this relative error (KramaBench's)."""

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_PLAIN_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_TRUE, _FALSE = {"true", "yes", "1"}, {"false", "no", "0"}


class _BadAnswer(Exception):
    """A submitted value that cannot be read as the question's type; the message names the fix."""


def _grade_answer(
    metric: MetricSpec, submission: Any, answers: Any, paraphrase: Paraphrase | None
) -> GradeResult:
    if metric.answer_type is None:
        raise GradingError("an `answer` metric needs answer_type; set MetricSpec.answer_type in the task")
    try:
        expected = _answer_value(answers, "answers")
    except _Rejected as exc:
        raise GradingError(
            f"bad answers for an `answer` metric: {exc} (a fault of the task, not of the submission; "
            "regenerate the task's private files)"
        ) from None
    try:
        predicted = _answer_value(submission, "submission")
    except _Rejected as exc:
        return GradeResult(score=0.0, error=str(exc), rows=0)
    try:
        score, method = score_answer(metric, expected, predicted, paraphrase)
    except _BadAnswer as exc:
        return GradeResult(score=0.0, error=str(exc), rows=1)
    return GradeResult(score=score, error=None, rows=1, method=method)


def _answer_value(source: Any, what: str) -> Any:
    """The `answer` of an answer.json file (a path), or of an already-read mapping."""
    if isinstance(source, dict):
        document = source
    else:
        path = Path(source)
        if not path.is_file():
            where = "is a directory" if path.is_dir() else "does not exist"
            fix = '; write {"answer": <value>} as JSON to this path' if what == "submission" else ""
            raise _Rejected(f"{what} file not found: {path} {where}{fix}")
        try:
            document = json.loads(path.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _Rejected(
                f"could not read {what} {path} as UTF-8 JSON ({exc}); write it with "
                'json.dump({"answer": value}, open(path, "w"))'
            ) from None
    if not isinstance(document, dict) or ANSWER_KEY not in document:
        raise _Rejected(f'{what} must be a JSON object with an "answer" key, e.g. {{"answer": 42}}')
    return document[ANSWER_KEY]


def score_answer(
    metric: MetricSpec, expected: Any, predicted: Any, paraphrase: Paraphrase | None = None
) -> tuple[float, str]:
    """(score in [0, 1], how it was compared) of one answer value; `_BadAnswer` when `predicted` cannot be read
    as the question's type. See the module docstring for each type's rule."""
    kind = metric.answer_type
    if kind == "boolean":
        return float(_boolean(predicted) == _boolean(expected, "answer")), "boolean"
    if kind in ("numeric_exact", "numeric_approximate"):
        truth = _number(expected, None, "answer")
        value = _number(predicted, metric.unit)
        if kind == "numeric_exact":
            return float(_numbers_equal(truth, value, metric.decimals)), _exact_method(metric.decimals)
        return _rae_score(truth, value), "1 / (1 + relative absolute error)"
    if kind in ("string_exact", "string_approximate"):
        if predicted is None or isinstance(predicted, list | dict):
            raise _BadAnswer(f"the answer must be a text, got {_kind(predicted)}; write a JSON string")
        if kind == "string_approximate" and paraphrase is not None:
            verdict = paraphrase(str(predicted), str(expected))
            if verdict is not None:
                return float(verdict), "LLM judge (paraphrase)"
            return float(
                _same_text(predicted, expected)
            ), "normalised exact match (the LLM judge gave no verdict)"
        how = "normalised exact match"
        if kind == "string_approximate":
            how += " (no LLM judge configured)"
        return float(_same_text(predicted, expected)), how
    if kind in ("list_exact", "list_approximate"):
        return _list_f1(metric, _as_list(expected, "answer"), _as_list(predicted), paraphrase)
    raise GradingError(f"unknown answer_type {kind!r}; fix MetricSpec.answer_type")


def _exact_method(decimals: int | None) -> str:
    if decimals is None:
        return "numeric exact"
    return f"numeric exact to {decimals} decimal{'s' * (decimals != 1)}"


def _kind(value: Any) -> str:
    return {type(None): "null", list: "a list", dict: "an object", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _number(value: Any, unit: str | None, role: str = "submission") -> float:
    """A finite float from a JSON number or a text such as "1,000", "12.5 %" (unit '%'), "1e3"."""
    if isinstance(value, bool) or value is None or isinstance(value, list | dict):
        error = _BadAnswer if role == "submission" else GradingError
        raise error(f"the {role} must be a number, got {_kind(value)}; write a JSON number such as 12.5")
    number = float(value) if isinstance(value, int | float) else _parse_number(str(value), unit, role)
    if not math.isfinite(number):
        error = _BadAnswer if role == "submission" else GradingError
        raise error(f"the {role} {value!r} is not a finite number")
    return number


def _parse_number(text: str, unit: str | None, role: str) -> float:
    error = _BadAnswer if role == "submission" else GradingError
    cleaned = unicodedata.normalize("NFKC", text).strip()
    if unit and cleaned.lower().endswith(unit.lower()):
        cleaned = cleaned[: -len(unit)].strip()
    if _THOUSANDS.match(cleaned):
        cleaned = cleaned.replace(",", "")
    if not _PLAIN_NUMBER.match(cleaned):
        hint = f" (the question's unit is {unit!r})" if unit else ""
        raise error(
            f"cannot read {text!r} as a number{hint}; write a plain number such as 1234.5 (thousands may be "
            "grouped as 1,234.5; a decimal comma is ambiguous)"
        )
    return float(cleaned)


def _numbers_equal(truth: float, value: float, decimals: int | None) -> bool:
    if decimals is not None:
        # Half a unit of the last asked decimal, and a hair more so that ties at .5 pass either way.
        return abs(value - truth) <= 0.5 * 10.0**-decimals + 1e-9 * max(1.0, abs(truth))
    if truth.is_integer():
        return value == truth
    return abs(value - truth) <= EXACT_RELATIVE_TOLERANCE * abs(truth)


def _rae_score(truth: float, value: float) -> float:
    if truth == 0.0:
        return 1.0 if value == 0.0 else 0.0
    return 1.0 / (1.0 + abs(value - truth) / abs(truth))


def normalise_text(value: Any) -> str:
    """The form texts are compared in: NFKC, case-folded, whitespace collapsed, outer quotes and a final period
    removed, and number-like texts as their exact decimal value."""
    text = " ".join(unicodedata.normalize("NFKC", str(value)).casefold().split())
    text = text.rstrip(".").strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return canonical_label(text)


def _same_text(predicted: Any, expected: Any) -> bool:
    return normalise_text(predicted) == normalise_text(expected)


def _boolean(value: Any, role: str = "submission") -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().casefold().rstrip(".")
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    error = _BadAnswer if role == "submission" else GradingError
    raise error(f"the {role} {value!r} is not a boolean; write true or false")


def _as_list(value: Any, role: str = "submission") -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list):
            return parsed
        return [item.strip() for item in value.split(",") if item.strip()]
    error = _BadAnswer if role == "submission" else GradingError
    raise error(f'the {role} must be a list, got {_kind(value)}; write a JSON list such as ["a", "b"]')


def _item_matches(
    metric: MetricSpec, truth: Any, item: Any, approximate: bool, paraphrase: Paraphrase | None
) -> bool:
    if isinstance(truth, bool):
        try:
            return _boolean(item) == truth
        except _BadAnswer:
            return False
    if isinstance(truth, int | float):
        try:
            value = _number(item, metric.unit)
        except _BadAnswer:
            return False
        if approximate:
            return abs(value - truth) <= APPROXIMATE_ITEM_TOLERANCE * max(abs(truth), 1e-12)
        return _numbers_equal(float(truth), value, metric.decimals)
    if item is None or isinstance(item, list | dict):
        return False
    if approximate and paraphrase is not None:
        verdict = paraphrase(str(item), str(truth))
        if verdict is not None:
            return verdict
    return _same_text(item, truth)


def _list_f1(
    metric: MetricSpec, truth: list[Any], predicted: list[Any], paraphrase: Paraphrase | None
) -> tuple[float, str]:
    approximate = metric.answer_type == "list_approximate"
    if approximate:
        how = "F1, items matched approximately (" + (
            "LLM judge for texts"
            if paraphrase is not None
            else "texts by normalised exact match: no LLM judge"
        )
        how += ", numbers within 1%)"
    else:
        how = "F1, items matched exactly (order ignored)"
    if not truth:
        return float(not predicted), how
    used: set[int] = set()
    hits = 0
    for expected in truth:
        for j, item in enumerate(predicted):
            if j not in used and _item_matches(metric, expected, item, approximate, paraphrase):
                used.add(j)
                hits += 1
                break
    if not hits:
        return 0.0, how
    precision, recall = hits / len(predicted), hits / len(truth)
    return 2 * precision * recall / (precision + recall), how
