"""Grading a question task's answer (metric `answer`) by its KramaBench answer type.

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

import json
import math
import re
import unicodedata
from pathlib import Path
from typing import Any

from dareforge.reference_solutions.metrics import (
    GradingError,
    canonical_label,
)
from dareforge.reference_solutions.results import GradeResult, Paraphrase, Rejected
from dareforge.reference_solutions.submission_files import MAX_ANSWER_BYTES, read_regular_file
from dareforge.schema import MetricSpec

# --- question answers ----------------------------------------------------------------------------------

ANSWER_KEY = "answer"
APPROXIMATE_ITEM_TOLERANCE = 0.01
"""list_approximate: numeric items match within this relative error (KramaBench's f1_approximate)."""
EXACT_RELATIVE_TOLERANCE = 1e-6
"""numeric_exact without decimals: a fractional answer matches within this relative error (KramaBench's)."""

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_PLAIN_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_TRUE, _FALSE = {"true", "yes", "1"}, {"false", "no", "0"}
MAX_JSON_DEPTH = 8
"""An answer is a value or a list of values inside {"answer": ...}: deeper nesting is no answer."""
MAX_INTEGER_DIGITS = 308
"""Longer integers exceed a float (and Python's own int parsing refuses 4,300 digits with a ValueError)."""
MAX_LIST_ITEMS = 10_000
"""A list answer longer than this is refused: F1 matching is quadratic in the items."""


class _BadAnswer(Exception):
    """A submitted value that cannot be read as the question's type; the message names the fix."""


def grade_answer(
    metric: MetricSpec, submission: Any, answers: Any, paraphrase: Paraphrase | None
) -> GradeResult:
    if metric.answer_type is None:
        raise GradingError("an `answer` metric needs answer_type; set MetricSpec.answer_type in the task")
    try:
        expected = _answer_value(answers, "answers")
    except Rejected as exc:
        raise GradingError(
            f"bad answers for an `answer` metric: {exc} (a fault of the task, not of the submission; "
            "regenerate the task's private files)"
        ) from None
    try:
        predicted = _answer_value(submission, "submission")
    except Rejected as exc:
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
        fix = '; write {"answer": <value>} as JSON to this path' if what == "submission" else ""
        try:
            data = read_regular_file(path, MAX_ANSWER_BYTES)
        except FileNotFoundError:
            raise Rejected(f"{what} file not found: {path} does not exist{fix}") from None
        except OSError as exc:
            raise Rejected(f"{what} {path} cannot be graded: {exc}{fix} as a regular file") from None
        document = strict_json(data, f"{what} {path}")
    if not isinstance(document, dict) or ANSWER_KEY not in document:
        raise Rejected(f'{what} must be a JSON object with an "answer" key, e.g. {{"answer": 42}}')
    return document[ANSWER_KEY]


def strict_json(data: bytes, what: str) -> Any:
    """One JSON document in the form every reader takes alike: UTF-8, no repeated key (readers disagree on
    which one wins), no NaN or Infinity (not JSON), no number a float cannot hold (`1e999`, a 400-digit
    integer), no nesting deeper than `MAX_JSON_DEPTH`; `Rejected` naming the problem otherwise."""
    write_it = 'write it with json.dump({"answer": value}, open(path, "w"))'
    try:
        text = data.decode("utf-8-sig")
        document = json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
        too_deep = _depth(document) > MAX_JSON_DEPTH
    except _NotPlainJSON as exc:
        raise Rejected(f"{what} is not plain JSON: {exc}; {write_it}") from None
    except RecursionError:
        too_deep = True
    except (UnicodeDecodeError, ValueError) as exc:
        raise Rejected(f"could not read {what} as UTF-8 JSON ({str(exc)[:200]}); {write_it}") from None
    if too_deep:
        raise Rejected(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels; {write_it}")
    return document


class _NotPlainJSON(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise _NotPlainJSON(f"the key(s) {repeated} appear more than once in one object")
    return dict(pairs)


def _refuse_constant(name: str) -> float:
    raise _NotPlainJSON(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotPlainJSON(f"{text[:40]} is beyond a float's range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise _NotPlainJSON(f"an integer of {len(text)} digits is beyond a float's range")
    return int(text)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


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
    error = _BadAnswer if role == "submission" else GradingError
    if isinstance(value, str):
        try:
            parsed = strict_json(value.encode(), f"the {role}")
        except Rejected:
            parsed = None
        value = (
            parsed
            if isinstance(parsed, list)
            else [item.strip() for item in value.split(",") if item.strip()]
        )
    if not isinstance(value, list):
        raise error(f'the {role} must be a list, got {_kind(value)}; write a JSON list such as ["a", "b"]')
    if len(value) > MAX_LIST_ITEMS:
        raise error(
            f"the {role} lists {len(value)} items, more than the {MAX_LIST_ITEMS} a list answer may have"
        )
    return value


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
