"""How well one column alone predicts a target, and whether one or two columns compute it: the measures the
understand stage uses to leave a leaking column out of a framing and the validation gate uses to reject a task,
so the two never disagree on what leaks.

A shallow tree on the one column, fitted on the first 70% of a row order and scored on the last 30% (a random
order, or time for a forecast: a feature must then predict the future), by macro-F1 for a label and clipped
R² for a number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dareforge.reference_solutions.metrics import canonical_label, clipped_r2, macro_f1_codes

HOLDOUT_SHARE = 0.3
TREE_DEPTH = 6
MIN_FORMULA_ROWS = 20
DERIVED_FIT = 0.9999
"""A target that one or two columns determine this exactly (through a line, or a line in logarithms) is a
formula's result: rounding to the printed decimals still leaves R2 above it."""
FORMULA_COLUMNS = 40
"""Only this many columns, the most correlated with the target, are paired: a wide table costs no more."""


def natural_key(value: object) -> list:
    """`P9` before `P10`: digit runs compare as numbers, so codes handed out in order keep that order."""
    parts = re.split(r"(\d+)", str(value))
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts]


TREE_BOUND = float(np.finfo(np.float32).max) / 4
"""The largest magnitude a column keeps as a tree input (larger ones are clipped to it)."""


def encode_column(values: pd.Series) -> np.ndarray:
    """One column as a tree input: numbers as they are, anything else as category codes in natural order (so a
    key whose order follows the target is found too: `P1`..`P250` one class, `P251`..`P500` the next). Missing values become a constant below every observed value, so a
    tree can still split on missingness."""
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64", na_value=np.nan, copy=True)
        numbers[~np.isfinite(numbers)] = np.nan
        # Trees take float32: a physical constant of 1e50 failed the fit; this bound keeps the floor in range
        np.clip(numbers, -TREE_BOUND, TREE_BOUND, out=numbers)
    else:
        text = values.astype(object).where(values.notna(), None)
        categories = sorted({v for v in text if v is not None}, key=natural_key)
        codes = pd.Categorical(text, categories=categories).codes
        numbers = np.where(codes < 0, np.nan, codes).astype("float64")
    observed = numbers[~np.isnan(numbers)]
    floor = float(observed.min()) - 1.0 - float(observed.max() - observed.min()) if len(observed) else 0.0
    return np.where(np.isnan(numbers), floor, numbers).reshape(-1, 1)


def single_column_scores(
    columns: dict[str, np.ndarray], y: np.ndarray, classification: bool, order: np.ndarray
) -> dict[str, float]:
    """Held-out score of each column alone. Every column is `encode_column`'s array, aligned with `y` row by
    row; `order` lists the row positions to use, of which the last `HOLDOUT_SHARE` is held out."""
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    n_test = max(2, round(len(order) * HOLDOUT_SHARE))
    fit, held = order[:-n_test], order[-n_test:]
    if classification:
        # Labels as codes once: every tree then fits integers, and macro-F1 is counted on them.
        y = pd.factorize(pd.Series(y).map(canonical_label), sort=True)[0]
    tree_cls = DecisionTreeClassifier if classification else DecisionTreeRegressor
    score = macro_f1_codes if classification else clipped_r2
    scores = {}
    for name, x in columns.items():
        tree = tree_cls(max_depth=TREE_DEPTH, min_samples_leaf=3, random_state=0)
        tree.fit(x[fit], y[fit])
        value = score(y[held], tree.predict(x[held]))
        scores[name] = value if math.isfinite(value) else 0.0
    return scores


@dataclass(frozen=True)
class Formula:
    """A target computed from `columns`: `text` says how, `fit` is the R² of the line through them."""

    text: str
    columns: tuple[str, ...]
    fit: float


def pair_formula(y: np.ndarray, x: np.ndarray, names: list[str], target: str) -> Formula | None:
    """How `y` is computed from one or two of `x`'s columns (`names`), when it is: R² >= DERIVED_FIT of a least
    squares line through them, or through their logarithms for products and ratios: a difference
    `price - benchmark`, a sum `casual + registered`, a unit twin `F = 1.8 C + 32`, a ratio `weight / height²`.
    Rows with a missing value in the target or a column are left out; three or more parts are left to a
    cross-validated model."""
    y = np.asarray(y, dtype=float)
    x = np.asarray(x, dtype=float).reshape(len(y), -1)
    rows = np.isfinite(y) & np.isfinite(x).all(axis=1)
    if rows.sum() < MIN_FORMULA_ROWS:
        return None
    y, x = y[rows], x[rows]
    found = _best_pair(y, x, names, target, "")
    if found is None and (y > 0).all():
        logs = np.where(x > 0, np.log(np.where(x > 0, x, 1)), np.nan)
        usable = [i for i in range(x.shape[1]) if np.isfinite(logs[:, i]).all()]
        if usable:
            found = _best_pair(np.log(y), logs[:, usable], [names[i] for i in usable], target, "log ")
    return found


def _best_pair(y: np.ndarray, x: np.ndarray, names: list[str], target: str, scale: str) -> Formula | None:
    spread = x.std(axis=0)
    keep = np.flatnonzero(spread > 0)
    if y.std() == 0 or len(keep) == 0:
        return None
    x, names = x[:, keep], [names[i] for i in keep]
    corr = np.corrcoef(np.column_stack([y, x]), rowvar=False)
    r_y = np.nan_to_num(corr[0, 1:])
    top = np.argsort(-np.abs(r_y), kind="stable")[:FORMULA_COLUMNS]
    best = int(top[0])
    if r_y[best] ** 2 >= DERIVED_FIT:
        fit = float(r_y[best] ** 2)
        text = f"{scale}{target} is a linear function of {scale}{names[best]} (R2 {fit:.5f})"
        return Formula(text, (names[best],), fit)
    r_x = np.nan_to_num(corr[1:, 1:][np.ix_(top, top)])
    a, b = r_y[top][:, None], r_y[top][None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        fits = (a**2 + b**2 - 2 * a * b * r_x) / (1 - r_x**2)
    fits = np.where(np.isfinite(fits) & (np.abs(r_x) < 0.9999), fits, 0.0)
    np.fill_diagonal(fits, 0.0)
    i, j = np.unravel_index(int(np.argmax(fits)), fits.shape)
    if fits[i, j] < DERIVED_FIT:
        return None
    first, second = names[top[i]], names[top[j]]
    fit = float(fits[i, j])
    text = f"{scale}{target} is a linear function of {scale}{first} and {scale}{second} (R2 {fit:.5f})"
    return Formula(text, (first, second), fit)
