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
from itertools import combinations

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
EXACT_COLUMNS = 12
"""The search for a formula that holds on most rows fits every pair of this many columns, the most
rank-correlated with the target (ranks, because the rows it misses can be wild)."""
EXACT_TOLERANCE = 1e-3
"""A row is reproduced when the formula lands within this share of its target (or within half the target's
printed step, when that is wider: a ratio printed to two decimals)."""
TRIMMED_SHARE = 0.5
TRIMMED_STEPS = 6
EXACT_ROWS = 5_000
"""Rows the trimmed fits use at most (evenly spaced over the held-out rows)."""
MONOTONE_ROWS = 2_000
MAX_COPY_CLASSES = 50


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
        codes, distinct = values.factorize()
        text = [str(v) for v in distinct.to_numpy()]
        # Values of one natural key (`01` and `1`) in text order, so their codes never follow the hash seed.
        order = sorted(range(len(text)), key=lambda i: (natural_key(text[i]), text[i]))
        rank = np.empty(len(text) + 1)
        rank[order], rank[-1] = np.arange(len(text)), np.nan  # code -1 (missing) reads the last slot
        numbers = rank[codes]
    observed = numbers[~np.isnan(numbers)]
    floor = float(observed.min()) - 1.0 - float(observed.max() - observed.min()) if len(observed) else 0.0
    return np.where(np.isnan(numbers), floor, numbers).reshape(-1, 1)


def single_column_scores(
    columns: dict[str, np.ndarray], y: np.ndarray, classification: bool, order: np.ndarray
) -> dict[str, float]:
    """Held-out score of each column alone. Every column is `encode_column`'s array, aligned with `y` row by
    row; `order` lists the row positions to use, of which the last `HOLDOUT_SHARE` is held out."""
    from sklearn import config_context
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
    from sklearn.utils import assert_all_finite

    n_test = max(2, round(len(order) * HOLDOUT_SHARE))
    fit, held = order[:-n_test], order[-n_test:]
    if classification:
        # Labels as codes once: every tree then fits integers, and macro-F1 is counted on them.
        y = pd.factorize(pd.Series(y).map(canonical_label), sort=True)[0]
    tree_cls = DecisionTreeClassifier if classification else DecisionTreeRegressor
    score = macro_f1_codes if classification else clipped_r2
    # The trees' own input checks, made once for all columns instead of once per fit and prediction (most of a
    # small tree's cost): the training targets are finite (as each fit checked), and every column is float32
    # as a tree converts it to, finite by `encode_column`'s construction. The parameters are constants.
    assert_all_finite(y[fit], input_name="y")
    scores = {}
    with config_context(skip_parameter_validation=True):
        for name, x in columns.items():
            x = np.ascontiguousarray(x, dtype=np.float32)
            tree = tree_cls(max_depth=TREE_DEPTH, min_samples_leaf=3, random_state=0)
            tree.fit(x[fit], y[fit], check_input=False)
            value = score(y[held], tree.predict(x[held], check_input=False))
            scores[name] = value if math.isfinite(value) else 0.0
    return scores


@dataclass(frozen=True)
class Formula:
    """A target computed from `columns`: `text` says how, `fit` is the R² of the line through them."""

    text: str
    columns: tuple[str, ...]
    fit: float
    share: float | None = None
    """For `exact_formula`: the share of rows it reproduces beyond what the target's most common value does."""


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


def exact_formula(y: np.ndarray, x: np.ndarray, names: list[str], target: str) -> Formula | None:
    """The line through one or two of `x`'s columns (or their logarithms) that reproduces the most rows of `y`
    within `EXACT_TOLERANCE`, fitted by least trimmed squares (refitted on the half of the rows it fits best
    until that half stops changing), so the few rows a formula does not hold on (a typo, a sentinel, 3% of
    the rows) cannot hide it the way they ruin `pair_formula`'s R². Its `share` counts every row with a
    target (a row whose columns are missing is not reproduced) and is normalised by the share of the target's
    most common value, so a target that is mostly zeros is no formula of anything: 1 when every row is
    reproduced, 0 when no more rows than that value's. An honest noisy relation reproduces few rows this
    tightly, however strongly it correlates."""
    y = np.asarray(y, dtype=float)
    x = np.asarray(x, dtype=float).reshape(len(y), -1)
    known = np.flatnonzero(np.isfinite(y))
    if len(known) > EXACT_ROWS:
        known = known[np.linspace(0, len(known) - 1, EXACT_ROWS).astype(int)]
    y, x = y[known], x[known]
    if len(y) < MIN_FORMULA_ROWS:
        return None
    common = float(pd.Series(y).value_counts().iloc[0]) / len(y)
    if common >= 1.0:
        return None
    tolerance = np.maximum(EXACT_TOLERANCE * np.abs(y), printed_step(y) / 2) * (1 + 1e-9)
    best: tuple[float, tuple[int, ...], str, np.ndarray] | None = None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scales = [("", y, x)]
        if (y > 0).mean() > 0.5:
            scales.append(("log ", np.log(np.where(y > 0, y, np.nan)), np.log(np.where(x > 0, x, np.nan))))
        for scale, ys, xs in scales:
            ranked = _rank_correlated(ys, xs)
            for combo in [(i,) for i in ranked] + list(combinations(ranked, 2)):
                line = _trimmed_line(ys, xs[:, list(combo)])
                if line is None:
                    continue
                predicted = np.exp(line) if scale else line
                share = float(np.mean(np.abs(predicted - y) <= tolerance))
                if best is None or share > best[0]:
                    best = (share, combo, scale, predicted)
    if best is None:
        return None
    share, combo, scale, predicted = best
    excess = max(0.0, (share - common) / (1 - common))
    columns = tuple(names[i] for i in combo)
    parts = " and ".join(f"{scale}{c}" for c in columns)
    text = f"{scale}{target} is a linear function of {parts} on {share:.1%} of the rows"
    # Its R² as a prediction of every row (the target's mean where a column is missing), beside a model's.
    score = clipped_r2(y, np.where(np.isfinite(predicted), predicted, y.mean()))
    return Formula(text, columns, score, excess)


def printed_step(values: np.ndarray) -> float:
    """The step the values are printed to (1 for whole numbers, 0.01 for cents), 0 past six decimals."""
    for decimals in range(7):
        scaled = values * 10.0**decimals
        whole = np.abs(scaled - np.round(scaled)) <= 1e-6 * np.maximum(1.0, np.abs(scaled))
        if whole.mean() >= 0.99:
            return 10.0**-decimals
    return 0.0


def _rank_correlated(y: np.ndarray, x: np.ndarray) -> list[int]:
    """`EXACT_COLUMNS` columns of `x` by |Spearman| with `y` over the rows both hold, strongest first."""
    frame = pd.DataFrame(x)
    usable = frame.notna().sum() >= MIN_FORMULA_ROWS
    usable &= frame.nunique() > 1
    rho = frame.loc[:, usable].corrwith(pd.Series(y), method="spearman").abs().fillna(0.0)
    ranked = rho.sort_values(ascending=False, kind="stable").index[:EXACT_COLUMNS]
    return [int(i) for i in ranked]


def _trimmed_line(y: np.ndarray, x: np.ndarray) -> np.ndarray | None:
    """Least trimmed squares: predictions of the line fitted to the half of the rows it fits best (NaN where a
    column is missing), or None with too few complete rows."""
    rows = np.isfinite(y) & np.isfinite(x).all(axis=1)
    if rows.sum() < MIN_FORMULA_ROWS:
        return None
    design = np.column_stack([np.ones(int(rows.sum())), x[rows]])
    target = y[rows]
    half = max(MIN_FORMULA_ROWS, int(TRIMMED_SHARE * len(target)))
    keep = np.arange(len(target))
    for _ in range(TRIMMED_STEPS):
        coef = np.linalg.lstsq(design[keep], target[keep], rcond=None)[0]
        chosen = np.sort(np.argsort(np.abs(design @ coef - target), kind="stable")[:half])
        if np.array_equal(chosen, keep):
            break
        keep = chosen
    predicted = np.full(len(y), np.nan)
    predicted[rows] = design @ coef
    return predicted


class LabelCopies:
    """How completely one feature gives a class label away on held-out rows, whatever values it took in
    training, and how: `equal` (the feature is the label), `recoded` (a one-to-one relabelling learned on the
    training rows: each label's most common value stands for it) or `monotone` (a numeric feature whose order
    follows the labels' order: the best non-decreasing or non-increasing map from its values to the labels
    on the held-out rows, the label order natural: `2` before `10`; measured only where the held-out rows hold
    a label training never did, which a tree cannot predict). Labels are canonical text. The score is
    the share of held-out rows reproduced beyond the most common label's share (1: every row; 0: no more than
    predicting that label), so a feature that only matches an imbalanced label's majority scores nothing.

    Built once per pair of label columns (`train_y`, `held_y`, no missing label) and asked of each feature:
    what the labels alone decide is worked out once, not once per feature."""

    def __init__(self, train_y: pd.Series, held_y: pd.Series, canonical: CanonicalLabels | None = None):
        self.canonical = CanonicalLabels() if canonical is None else canonical
        self.truth = held_y.to_numpy(dtype=object)
        self.common = float(held_y.value_counts().iloc[0]) / len(held_y) if len(held_y) else 1.0
        self.labels = train_y.to_numpy(dtype=object)
        # Only for labels training never held (a tree maps a feature's order to the labels it saw): a map
        # fitted on the held-out rows themselves would call an honest strong feature a copy (iris' petal length).
        self.monotone = not set(self.truth) <= set(self.labels) and held_y.nunique() <= MAX_COPY_CLASSES

    def score(self, train_x: pd.Series, held_x: pd.Series) -> tuple[float, str]:
        """The feature's score and how it copies; `train_x` and `held_x` row by row beside the labels."""
        if self.common >= 1.0:
            return 0.0, "equal"
        held_codes, held_labels = canonical_codes(held_x, self.canonical)
        shares = {"equal": float(np.mean(_decode(held_codes, held_labels) == self.truth))}
        train_codes, train_labels = canonical_codes(train_x, self.canonical)
        given = train_codes >= 0
        if given.any():
            stands_for = _stands_for(train_labels[train_codes[given]], self.labels[given])
            recoded = np.array([stands_for.get(label) for label in held_labels], dtype=object)
            shares["recoded"] = float(np.mean(_decode(held_codes, recoded) == self.truth))
        if self.monotone:
            numbers = pd.to_numeric(held_x, errors="coerce")
            if numbers.notna().mean() >= 0.95:
                shares["monotone"] = _monotone_share(numbers.to_numpy(dtype=float), self.truth)
        how = max(shares, key=lambda k: shares[k])
        return max(0.0, (shares[how] - self.common) / (1 - self.common)), how


class CanonicalLabels(dict[str, str]):
    """`canonical_label` of each text met, remembered: the tasks of a source hold the same values column after
    column, and parsing a number as a Decimal is most of what a label costs."""

    def of(self, value: object) -> str:
        text = str(value)  # canonical_label reads nothing of a value but its text
        if text not in self:
            self[text] = canonical_label(text)
        return self[text]


def canonical_codes(values: pd.Series, canonical: CanonicalLabels) -> tuple[np.ndarray, np.ndarray]:
    """Each value's code (-1 where missing) and the canonical label of each code: labels are worked out per
    distinct value, the rows stay integers."""
    codes, distinct = values.factorize()
    return codes, np.array([canonical.of(v) for v in distinct.to_numpy()], dtype=object)


def _decode(codes: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The label of each code, None where missing (a missing value matches no label)."""
    return np.append(labels, None)[codes]


def _stands_for(values: np.ndarray, labels: np.ndarray) -> dict[str, str]:
    """The value that stands for each label: pairs taken by how often they occur (ties in label, then value
    order), a label given the first value not already taken."""
    label_codes, label_names = pd.factorize(labels, sort=True)
    value_codes, value_names = pd.factorize(values, sort=True)
    pairs, counts = np.unique(label_codes * len(value_names) + value_codes, return_counts=True)
    stands_for: dict[int, int] = {}
    taken: set[int] = set()
    for pair in pairs[np.argsort(-counts, kind="stable")]:
        label, value = divmod(int(pair), len(value_names))
        if label not in taken and value not in stands_for:
            stands_for[value] = label
            taken.add(label)
            if len(taken) == len(label_names):
                break
    return {value_names[v]: label_names[label] for v, label in stands_for.items()}


def _monotone_share(x: np.ndarray, labels: np.ndarray) -> float:
    """Most rows a monotone map from `x` (equal values to one label) to the labels reproduces, either way,
    over at most `MONOTONE_ROWS` evenly spaced rows; a missing value reproduces nothing."""
    if len(x) > MONOTONE_ROWS:
        pick = np.linspace(0, len(x) - 1, MONOTONE_ROWS).astype(int)
        x, labels = x[pick], labels[pick]
    order = sorted(set(labels), key=natural_key)
    codes = np.array([order.index(v) for v in labels])
    finite = np.isfinite(x)
    groups, inverse = np.unique(x[finite], return_inverse=True)
    counts = np.zeros((len(groups), len(order)))
    np.add.at(counts, (inverse, codes[finite]), 1)
    best = 0.0
    for table in (counts, counts[:, ::-1]):
        # Longest map: best[j] = most rows reproduced so far with the last group given label j or below.
        reached = np.zeros(len(order))
        for row in table:
            reached = np.maximum.accumulate(reached) + row
        best = max(best, float(reached.max()))
    return best / len(x)
