"""How well one column alone predicts a target: the score the understand stage uses to leave a leaking column
out of a framing and the validation gate uses to reject a task, so the two never disagree on what leaks.

A shallow tree on the one column, fitted on the first 70% of a row order and scored on the last 30% (a random
order, or time for a forecast: a feature must then predict the future), by macro-F1 for a label and clipped
R² for a number.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from dareforge.reference_solutions.metrics import canonical_label, clipped_r2, macro_f1_codes

HOLDOUT_SHARE = 0.3
TREE_DEPTH = 6


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
