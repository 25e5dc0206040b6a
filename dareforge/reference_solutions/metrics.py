"""Metrics: pure functions on aligned arrays, and a registry that names them.

Every function takes ``(y_true, y_pred)`` in that order (sklearn's convention), already aligned row by row,
and returns a plain ``float``. Invalid *predictions* raise `InvalidPredictionError` (the grader turns that
into a failed grade); invalid *answers* or arguments raise `GradingError` (the benchmark is at fault).

Label metrics (exact-match, accuracy, macro-f1, map-at-k) compare labels by a canonical text form: the
value's text with surrounding whitespace stripped, and numbers reduced to their exact decimal value, so
"1" == "1.0" == " 1 " but "a" != "A" and "007" == "7" (as labels, not as row keys: the grader joins keys
on their exact text, or by integer value for keys whose answers are all integers).

IF tasks have two rules. Our releases score an IF task by the *share of rows* that match the reference run
(`exact-match`; `allclose`: ``|pred - true| <= tolerance * max(|true|, 1)``, tolerance
`generate.regression_tolerance`, 1e-6), so one wrong row of 300 scores 0.997. DARE-bench scores it *all or
nothing* (`exact-match-all-rows`; `allclose-all-rows`: numpy.allclose, rtol = tolerance, atol 1e-8), so that
row scores 0; the DARE-bench layout export writes these names, with DARE-bench's tolerance 1e-5, so its
evaluator and our grader agree (`dareforge.exports.dare_bench`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Literal

import numpy as np
import pandas as pd

from dareforge.errors import DareforgeError


class GradingError(DareforgeError):
    """The benchmark side is wrong: unknown metric, bad parameters, or a bad answers file."""


class InvalidPredictionError(GradingError):
    """The predictions cannot be scored (non-numeric, out of range, wrong length); the submission's fault."""


ArrayLike = Sequence[Any] | np.ndarray


# --- helpers -------------------------------------------------------------------------------------------


def canonical_label(value: object) -> str:
    """The form labels are compared by: stripped text; numbers as their exact normalized decimal value."""
    text = str(value).strip()
    if "_" in text:  # Decimal and float accept "1_000"; a label with an underscore is text, not a number.
        return text
    try:
        number = Decimal(text)
    except InvalidOperation:
        return text
    if not number.is_finite():
        return text
    if number.is_zero():
        return "0"
    return str(number.normalize(Context(prec=max(28, len(text)))))


def _labels(values: ArrayLike) -> list[str]:
    # A column holds few distinct labels and many rows: each distinct value is read once. Keyed by type too, so
    # equal values of other types (True and 1, which read as "True" and "1") keep their own forms.
    seen: dict[tuple[type, object], str] = {}
    out = []
    for value in values:
        key = (type(value), value)
        label = seen.get(key)
        if label is None:
            label = seen[key] = canonical_label(value)
        out.append(label)
    return out


BOOLEAN_WORDS = {
    True: frozenset({"true", "yes", "t", "y", "1"}),
    False: frozenset({"false", "no", "f", "n", "0"}),
}
"""Spellings of one boolean, compared case-insensitively: what an agent may write for a boolean label."""


def _boolean_of(label: str) -> bool | None:
    folded = label.casefold()
    return next((value for value, words in BOOLEAN_WORDS.items() if folded in words), None)


def _label_pair(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[list[str], list[str]]:
    """Canonical labels of both sides; when the answers are booleans (every label one spelling of true or of
    false: True/False, TRUE/FALSE, yes/no, 1/0), a prediction spelling the same boolean another way is read
    as the answers spell it, so `true` and `True` are one class, as are `yes` and `True`."""
    truth, predicted = _labels(y_true), _labels(y_pred)
    spelling: dict[bool, str] = {}
    for label in set(truth):
        value = _boolean_of(label)
        if value is None or spelling.setdefault(value, label) != label:
            return truth, predicted
    if not spelling:
        return truth, predicted
    read = [spelling.get(_boolean_of(p), p) if _boolean_of(p) is not None else p for p in predicted]
    return truth, read


def _check_lengths(y_true: ArrayLike, y_pred: ArrayLike) -> None:
    if len(y_true) != len(y_pred):
        raise InvalidPredictionError(
            f"{len(y_pred)} predictions for {len(y_true)} answers; align predictions to answers row by row"
        )
    if len(y_true) == 0:
        raise GradingError("no answers to score against; the answers must have at least one row")


def _floats(values: ArrayLike, role: Literal["y_true", "y_pred"]) -> np.ndarray:
    error = InvalidPredictionError if role == "y_pred" else GradingError
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise error(f"{role} must be numeric ({exc}); convert the values to numbers") from exc
    if array.ndim != 1:
        raise error(f"{role} must be one-dimensional, got shape {array.shape}")
    bad = int((~np.isfinite(array)).sum())
    if bad:
        raise error(f"{role} has {bad} NaN or infinite value(s); every row needs a finite number")
    return array


def _numeric_pair(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    _check_lengths(y_true, y_pred)
    return _floats(y_true, "y_true"), _floats(y_pred, "y_pred")


def _binary_truth(y_true: np.ndarray, metric: str) -> None:
    if not np.isin(y_true, (0.0, 1.0)).all():
        found = sorted({float(v) for v in y_true})[:5]
        raise GradingError(f"{metric} needs answers of 0 or 1 (binary); found values such as {found}")


# --- metrics -------------------------------------------------------------------------------------------


def exact_match(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Fraction of rows whose labels are equal in canonical form ("1" == "1.0", "a" != "A"; a boolean answer
    in any of its spellings, `_label_pair`)."""
    _check_lengths(y_true, y_pred)
    truth, predicted = _label_pair(y_true, y_pred)
    return float(np.mean([t == p for t, p in zip(truth, predicted, strict=True)]))


def accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Classification accuracy on canonical labels (the same comparison as `exact_match`)."""
    return exact_match(y_true, y_pred)


def allclose(y_true: ArrayLike, y_pred: ArrayLike, tolerance: float) -> float:
    """Fraction of rows with ``|pred - true| <= tolerance * max(|true|, 1)``.

    Relative to ``|true|``, so large values get a proportionate slack, but never less than ``tolerance`` in
    absolute terms, so answers at or near 0 do not demand bit-exact predictions. Equal values always match.
    """
    _check_tolerance(tolerance)
    truth, pred = _numeric_pair(y_true, y_pred)
    slack = tolerance * np.maximum(np.abs(truth), 1.0)
    return float(np.mean((np.abs(pred - truth) <= slack) | (pred == truth)))


ALL_ROWS_ATOL = 1e-8
"""The absolute tolerance of `allclose_all_rows`: numpy.allclose's default, which DARE-bench's evaluator uses."""


def exact_match_all_rows(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """1 when every row's label equals the answer (canonical form, as `exact_match`), else 0: DARE-bench's IF
    classification rule (its evaluator compares the whole column at once)."""
    return 1.0 if exact_match(y_true, y_pred) == 1.0 else 0.0


def allclose_all_rows(y_true: ArrayLike, y_pred: ArrayLike, tolerance: float) -> float:
    """1 when ``numpy.allclose(y_true, y_pred, rtol=tolerance, atol=1e-8)``, else 0: DARE-bench's IF regression
    rule (it calls numpy.allclose with its defaults, rtol 1e-5). Row by row ``|true - pred| <= 1e-8 +
    tolerance * |pred|``: numpy measures the slack on the prediction, not on the answer as `allclose` does."""
    _check_tolerance(tolerance)
    truth, pred = _numeric_pair(y_true, y_pred)
    return float(np.allclose(truth, pred, rtol=tolerance, atol=ALL_ROWS_ATOL))


def macro_f1(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Unweighted mean of per-class F1 over canonical labels (sklearn ``average="macro"``).

    The classes are the union of true and predicted labels, as in sklearn: a predicted label that never
    occurs in the answers counts as a class with F1 0.
    """
    _check_lengths(y_true, y_pred)
    truth_labels, predicted_labels = _label_pair(y_true, y_pred)
    codes, _ = pd.factorize(np.asarray(truth_labels + predicted_labels, dtype=object), sort=True)
    return macro_f1_codes(codes[: len(y_true)], codes[len(y_true) :])


def macro_f1_codes(truth: np.ndarray, predicted: np.ndarray) -> float:
    """Macro-F1 of integer class codes, counted: per class 2·hits / (true count + predicted count), averaged
    over the classes of either side (sklearn's `average="macro", zero_division=0`, without its per-call
    validation: the leak checks call it once per column of every table)."""
    classes = np.union1d(truth, predicted)
    hits = np.array([np.sum((truth == c) & (predicted == c)) for c in classes], dtype=float)
    counts = np.array([np.sum(truth == c) + np.sum(predicted == c) for c in classes], dtype=float)
    f1 = np.divide(2 * hits, counts, out=np.zeros_like(hits), where=counts > 0)
    return float(f1.mean())


def clipped_r2(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Coefficient of determination floored at 0: ``max(R², 0)``; worse than predicting the mean scores 0.

    Constant answers give 1 for a perfect prediction and 0 otherwise (sklearn's convention).
    """
    truth, pred = _numeric_pair(y_true, y_pred)
    if len(truth) < 2:
        raise GradingError("R² needs at least 2 answer rows; the answers have 1")
    total = float(np.sum((truth - truth.mean()) ** 2))
    error = float(np.sum((truth - pred) ** 2))
    if total == 0:
        return 1.0 if error == 0 else 0.0
    return max(0.0, 1.0 - error / total)


def forecast_skill(y_true: ArrayLike, y_pred: ArrayLike, scale: float) -> float:
    """``max(0, 1 - MAE / scale)``: `scale` is the MAE of the best model-free forecast (training mean, last
    value, seasonal naive) on the same rows, stored with the task (see `reference_solutions.forecast`), so no
    such forecast scores above 0, a perfect one scores 1, and the score means the same for a series in
    millions as for one in fractions."""
    _check_scale(scale)
    truth, pred = _numeric_pair(y_true, y_pred)
    return max(0.0, 1.0 - float(np.mean(np.abs(pred - truth))) / scale)


# --- the goal metrics on many resamples at once ------------------------------------------------------------
# `counts[r, i]` is how often answer row i is drawn into resample r (each row of `counts` sums to the number of
# rows): a metric of sums over rows is then one matrix product per sum, where scoring each resample's rows
# one at a time costs a call per resample (a solver ladder's bootstrap draws hundreds per rung).


def macro_f1_resampled(y_true: ArrayLike, y_pred: ArrayLike, counts: np.ndarray) -> np.ndarray:
    """`macro_f1` of every resample: the classes of a resample are those drawn on either side of it."""
    _check_lengths(y_true, y_pred)
    truth_labels, predicted_labels = _label_pair(y_true, y_pred)
    codes, _ = pd.factorize(np.asarray(truth_labels + predicted_labels, dtype=object), sort=True)
    truth, predicted = codes[: len(y_true)], codes[len(y_true) :]
    one_hot = np.eye(int(codes.max()) + 1)
    true_counts, predicted_counts = counts @ one_hot[truth], counts @ one_hot[predicted]
    hits = counts @ (one_hot[truth] * (truth == predicted)[:, None])
    drawn = true_counts + predicted_counts
    f1 = np.divide(2 * hits, drawn, out=np.zeros_like(hits), where=drawn > 0)
    return f1.sum(axis=1) / (drawn > 0).sum(axis=1)


def clipped_r2_resampled(y_true: ArrayLike, y_pred: ArrayLike, counts: np.ndarray) -> np.ndarray:
    """`clipped_r2` of every resample."""
    truth, pred = _numeric_pair(y_true, y_pred)
    rows = counts.sum(axis=1)
    # Deviations from the full sample's mean: the resample's sum of squares about its own mean is then a
    # difference of two sums of the data's own magnitude, not of the raw values' (which can be far larger).
    centred = truth - truth.mean()
    shift = counts @ centred / rows
    total = counts @ centred**2 - rows * shift**2
    error = counts @ (truth - pred) ** 2
    # A resample that drew one answer value only has no variance: what rounding leaves of it is not one.
    constant = total <= 1e-12 * (counts @ centred**2 + np.finfo(float).tiny)
    r2 = 1.0 - np.divide(error, total, out=np.zeros_like(error), where=~constant)
    return np.where(constant, (error == 0).astype(float), np.maximum(r2, 0.0))


def forecast_skill_resampled(
    y_true: ArrayLike, y_pred: ArrayLike, counts: np.ndarray, scale: float
) -> np.ndarray:
    """`forecast_skill` of every resample."""
    _check_scale(scale)
    truth, pred = _numeric_pair(y_true, y_pred)
    return np.maximum(0.0, 1.0 - counts @ np.abs(pred - truth) / counts.sum(axis=1) / scale)


def rmse(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Root mean squared error."""
    truth, pred = _numeric_pair(y_true, y_pred)
    return float(np.sqrt(np.mean((pred - truth) ** 2)))


def mae(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Mean absolute error."""
    truth, pred = _numeric_pair(y_true, y_pred)
    return float(np.mean(np.abs(pred - truth)))


def rmsle(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Root mean squared logarithmic error, ``sqrt(mean((log1p(pred) - log1p(true))²))``; no negatives."""
    truth, pred = _numeric_pair(y_true, y_pred)
    if (truth < 0).any():
        raise GradingError(f"RMSLE is undefined for negative answers; found {int((truth < 0).sum())}")
    if (pred < 0).any():
        raise InvalidPredictionError(
            f"RMSLE is undefined for negative predictions; found {int((pred < 0).sum())}, "
            f"e.g. {float(pred[pred < 0][0])}; clip predictions at 0"
        )
    return float(np.sqrt(np.mean((np.log1p(pred) - np.log1p(truth)) ** 2)))


LOG_LOSS_EPS = 1e-15


def log_loss(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Binary cross-entropy: answers 0/1, predictions the probability of class 1, clipped to [eps, 1-eps].

    Multi-class log loss (one probability column per class, normalized per row) is not supported: it needs
    all class columns at once, while the grader scores target columns one by one.
    """
    truth, pred = _numeric_pair(y_true, y_pred)
    _binary_truth(truth, "log-loss")
    outside = (pred < 0) | (pred > 1)
    if outside.any():
        raise InvalidPredictionError(
            f"log-loss needs probabilities in [0, 1]; {int(outside.sum())} prediction(s) are outside, "
            f"e.g. {float(pred[outside][0])}"
        )
    p = np.clip(pred, LOG_LOSS_EPS, 1 - LOG_LOSS_EPS)
    return float(-np.mean(truth * np.log(p) + (1 - truth) * np.log(1 - p)))


def roc_auc(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Binary ROC AUC: answers 0/1, predictions any score that ranks class 1 higher."""
    truth, pred = _numeric_pair(y_true, y_pred)
    _binary_truth(truth, "roc-auc")
    if len(np.unique(truth)) < 2:
        raise GradingError("ROC AUC needs both classes (0 and 1) among the answers; found only one")
    # Imported here: scikit-learn costs a Harbor verifier about 2 CPU-s to import, and only this metric uses it.
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(truth, pred))


def map_at_k(y_true: ArrayLike, y_pred: ArrayLike, k: int) -> float:
    """Mean average precision at k; each cell holds space-separated labels (true set; ranked predictions).

    Per row: ``sum(precision@i for each hit i <= k) / min(len(true), k)``; a repeated predicted label counts
    once; a row with no true labels scores 0 (Kaggle's convention).
    """
    _check_k(k)
    _check_lengths(y_true, y_pred)
    scores = []
    for true_cell, pred_cell in zip(y_true, y_pred, strict=True):
        actual = set(_labels(str(true_cell).split()))
        predicted = _labels(str(pred_cell).split())[:k]
        hits, total, seen = 0, 0.0, set()
        for i, label in enumerate(predicted, start=1):
            if label in actual and label not in seen:
                hits += 1
                total += hits / i
            seen.add(label)
        scores.append(total / min(len(actual), k) if actual else 0.0)
    return float(np.mean(scores))


def _check_tolerance(tolerance: float | None) -> None:
    if tolerance is None or not math.isfinite(tolerance) or tolerance < 0:
        raise GradingError(
            f"allclose needs a finite relative tolerance >= 0, got {tolerance!r}; set MetricSpec.tolerance"
        )


def _check_scale(scale: float | None) -> None:
    if scale is None or isinstance(scale, bool) or not math.isfinite(scale) or scale <= 0:
        raise GradingError(f"forecast-skill needs a finite scale > 0, got {scale!r}; set MetricSpec.scale")


def _check_k(k: int | None) -> None:
    if k is None or isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise GradingError(f"map-at-k needs an integer k >= 1, got {k!r}; set MetricSpec.k")


# --- registry ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """A registered metric: its function, its direction, and how the grader should read the values.

    `kind` is "label" when values are compared as text, "numeric" when the grader must convert them to
    floats first. `params` names the MetricSpec fields the function needs ("tolerance", "k", "scale").
    """

    name: str
    fn: Callable[..., float]
    higher_is_better: bool
    kind: Literal["label", "numeric"]
    params: tuple[str, ...] = ()
    is_pass: bool = False
    resampled: Callable[..., np.ndarray] | None = None
    """The metric of many resamples at once, from per-resample row counts (the goal metrics have one)."""

    @property
    def worst(self) -> float:
        """The score a submission that cannot be graded gets: 0 when higher is better, else +inf."""
        return 0.0 if self.higher_is_better else math.inf

    def check_params(
        self, *, tolerance: float | None = None, k: int | None = None, scale: float | None = None
    ) -> None:
        if "tolerance" in self.params:
            _check_tolerance(tolerance)
        if "k" in self.params:
            _check_k(k)
        if "scale" in self.params:
            _check_scale(scale)

    def __call__(
        self,
        y_true: ArrayLike,
        y_pred: ArrayLike,
        *,
        tolerance: float | None = None,
        k: int | None = None,
        scale: float | None = None,
    ) -> float:
        self.check_params(tolerance=tolerance, k=k, scale=scale)
        given = {"tolerance": tolerance, "k": k, "scale": scale}
        return self.fn(y_true, y_pred, **{p: given[p] for p in self.params})

    def on_resamples(
        self,
        y_true: ArrayLike,
        y_pred: ArrayLike,
        counts: np.ndarray,
        *,
        tolerance: float | None = None,
        k: int | None = None,
        scale: float | None = None,
    ) -> np.ndarray:
        """The metric of each resample of the rows, `counts[r, i]` being how often row i is in resample r:
        at once for a metric with a `resampled` form, else one call per resample."""
        self.check_params(tolerance=tolerance, k=k, scale=scale)
        given = {p: {"tolerance": tolerance, "k": k, "scale": scale}[p] for p in self.params}
        if self.resampled is not None:
            return self.resampled(y_true, y_pred, counts, **given)
        true, pred, rows = (
            np.asarray(y_true, dtype=object),
            np.asarray(y_pred, dtype=object),
            np.arange(len(y_true)),
        )
        return np.array(
            [self.fn(true[picked], pred[picked], **given) for picked in (np.repeat(rows, c) for c in counts)]
        )


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("exact-match", exact_match, higher_is_better=True, kind="label", is_pass=True),
        Metric("allclose", allclose, True, "numeric", params=("tolerance",), is_pass=True),
        Metric("exact-match-all-rows", exact_match_all_rows, True, "label", is_pass=True),
        Metric("allclose-all-rows", allclose_all_rows, True, "numeric", params=("tolerance",), is_pass=True),
        Metric("macro-f1", macro_f1, True, "label", resampled=macro_f1_resampled),
        Metric("clipped-r2", clipped_r2, True, "numeric", resampled=clipped_r2_resampled),
        Metric(
            "forecast-skill",
            forecast_skill,
            True,
            "numeric",
            params=("scale",),
            resampled=forecast_skill_resampled,
        ),
        Metric("accuracy", accuracy, True, "label"),
        Metric("roc-auc", roc_auc, True, "numeric"),
        Metric("map-at-k", map_at_k, True, "label", params=("k",)),
        Metric("rmse", rmse, False, "numeric"),
        Metric("mae", mae, False, "numeric"),
        Metric("rmsle", rmsle, False, "numeric"),
        Metric("log-loss", log_loss, False, "numeric"),
    )
}

_ALIASES = {"map@k": "map-at-k", "mapk": "map-at-k", "logloss": "log-loss", "auc": "roc-auc"}


def get_metric(name: str) -> Metric:
    """The registered metric called `name` (case-insensitive; "_" and "-" are interchangeable)."""
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in METRICS:
        raise GradingError(f"unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}")
    return METRICS[key]


def is_pass_metric(name: str) -> bool:
    """Whether `name` is pass/fail-style (exact-match, allclose and their all-rows forms): a correct solution
    scores exactly 1."""
    return get_metric(name).is_pass
