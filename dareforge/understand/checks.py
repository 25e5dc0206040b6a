"""The data checks every candidate framing must pass, whoever proposed it: enough labelled rows and classes,
learnable (a quick cross-validated model beats the trivial predictor by a margin), not leaked (no column gives
the target away alone; such columns are left out and the candidate is checked without them), and for a series
enough distinct timestamps to hold out the last 20% chronologically."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dareforge.config import Config
from dareforge.schema import TaskType
from dareforge.understand.columns import Column, Sample

CV_ROWS = 2000
FOLDS = 3
DERIVED_SCORE = 0.995
"""A cross-validated R2 this close to perfect means the number is computed from the other columns. (A label
that a tree separates perfectly is still a task: clean classification data, such as the mushroom set, is.)"""


@dataclass
class Outcome:
    passed: bool
    checks: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    """Columns the checks found leaking the target (left out of the framing's features)."""
    reason: str = ""
    soft: bool = False
    forecastable: bool = True
    """For a series: a quick model forecasts its last 20% better than the training mean by the margin."""
    """The failure is one a person may overrule (learnability), not a fact of the data (rows, classes)."""


def labelled_rows(sample: Sample, target: Column) -> int:
    """The table's rows with a target, estimated from the sample."""
    share = target.nonnull / sample.rows if sample.rows else 0.0
    return round(share * sample.total_rows)


def check_tabular(
    sample: Sample, target: Column, task_type: TaskType, features: list[Column], config: Config
) -> Outcome:
    cfg, out = config.understand, Outcome(passed=False)
    rows = labelled_rows(sample, target)
    if rows < config.rules.min_rows:
        out.reason = f"{rows} labelled rows, fewer than rules.min_rows={config.rules.min_rows}"
        return out
    out.checks.append(f"enough rows: {rows} labelled")
    labelled = target.text.notna().to_numpy()
    classification = task_type == TaskType.CLASSIFICATION
    y = _target_values(target, classification)[labelled]
    if classification:
        counts = pd.Series(y).value_counts()
        if len(counts) < 2 or counts.iloc[1] < 2:
            out.reason = f"{len(counts)} class(es) with 2 or more rows: nothing to classify"
            return out
        if counts.iloc[0] / counts.sum() > 0.98:
            out.reason = f"one class holds {counts.iloc[0] / counts.sum():.1%} of the rows: nothing to learn"
            return out
        out.checks.append(f"classes: {len(counts)}, largest {counts.iloc[0] / counts.sum():.0%}")
    elif np.nanstd(y) == 0:
        out.reason = "the target is constant"
        return out
    kept = []
    for column in features:
        score = single_column_score(column, y, labelled, classification)
        if score >= cfg.max_single_column_score:
            out.excluded.append(column.name)
            out.checks.append(f"leak: {column.name} alone scores {score:.3f} (left out)")
        else:
            kept.append(column)
    if not kept:
        out.reason = "no feature is left once the columns that give the target away are removed"
        return out
    score, baseline = cross_validated(kept, y, labelled, classification, cfg.seed)
    metric = "macro-F1" if classification else "R2"
    out.checks.append(f"learnable: {metric} {score:.3f} against {baseline:.3f} for the trivial predictor")
    if not classification and score >= DERIVED_SCORE:
        out.reason = (
            f"derived: the other columns determine it ({metric} {score:.3f} cross-validated), so a model only "
            "recomputes a formula"
        )
        out.soft = True
        return out
    if score - baseline < cfg.min_learnable_margin:
        out.reason = (
            f"not learnable: a quick model reaches {metric} {score:.3f}, the trivial predictor {baseline:.3f} "
            f"(margin under understand.min_learnable_margin={cfg.min_learnable_margin})"
        )
        out.soft = True
        return out
    out.passed = True
    return out


def check_series(
    sample: Sample, target: Column, times: pd.Series, entity: str | None, others: list[Column], config: Config
) -> Outcome:
    cfg, out = config.understand, Outcome(passed=False)
    if not target.numeric:
        out.reason = f"{target.name} is not numeric: nothing to forecast"
        return out
    rows = labelled_rows(sample, target)
    if rows < config.rules.min_rows:
        out.reason = f"{rows} rows with a value, fewer than rules.min_rows={config.rules.min_rows}"
        return out
    if target.distinct < 3:
        out.reason = f"{target.name} takes {target.distinct} value(s): no series to forecast"
        return out
    # Counted on the sample: a lower bound when the table is larger than understand.sample_rows.
    stamps = int(times[target.text.notna()].nunique())
    if stamps < cfg.min_timestamps:
        out.reason = (
            f"{stamps} distinct timestamps, fewer than understand.min_timestamps={cfg.min_timestamps} "
            "(the last 20% are held out)"
        )
        return out
    out.checks.append(
        f"timestamps: {stamps} distinct; rows: {rows}" + (f"; series by {entity}" if entity else "")
    )
    values = target.numbers.to_numpy()
    for column in others:
        if not column.numeric:
            continue
        both = ~np.isnan(values) & ~np.isnan(column.numbers.to_numpy())
        if both.sum() > 2 and np.nanstd(column.numbers.to_numpy()[both]) > 0:
            corr = abs(np.corrcoef(values[both], column.numbers.to_numpy()[both])[0, 1])
            if corr >= 0.9999:
                out.excluded.append(column.name)
                out.checks.append(f"leak: {column.name} is a copy of the target (|r| = {corr:.5f}; left out)")
    exogenous = [c for c in others if c.name not in out.excluded]
    score = forecastable(times, entity_codes(sample, entity), exogenous, values, config.understand.seed)
    # Not a verdict (the gate measures forecasts with the strong reference on the real split): among series
    # that pass, the understand stage prefers one a quick model forecasts.
    out.checks.append(f"forecastable: R2 {score:.3f} on the last 20% of time against 0 for the training mean")
    out.forecastable = score >= cfg.min_learnable_margin
    out.passed = True
    return out


def entity_codes(sample: Sample, entity: str | None) -> np.ndarray | None:
    column = sample.column(entity) if entity else None
    return None if column is None else pd.Categorical(column.text).codes.astype(float)


def forecastable(
    times: pd.Series, entities: np.ndarray | None, others: list[Column], y: np.ndarray, seed: int
) -> float:
    """R2 on the latest 20% of timestamps of the better of a tree and a ridge line trained on the earlier 80%,
    from the time, the entity and the other numeric columns (what a TS-XF task offers)."""
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeRegressor

    clock = (
        pd.to_numeric(pd.Series(times), errors="coerce")
        if not np.issubdtype(np.asarray(times).dtype, np.datetime64)
        else pd.Series(pd.to_datetime(times)).astype("int64") / 86400e9
    )
    clock = clock.to_numpy(dtype=float)
    columns = [clock] + ([entities] if entities is not None else [])
    columns += [c.numbers.to_numpy(dtype=float) for c in others if c.numeric]
    x = np.nan_to_num(np.column_stack(columns), nan=-1e12)
    usable = np.isfinite(y) & np.isfinite(clock)
    if usable.sum() < 10:
        return 0.0
    x, target, clock = x[usable], y[usable], clock[usable]
    cutoff = np.quantile(np.unique(clock), 0.8)
    train, test = clock <= cutoff, clock > cutoff
    if train.sum() < 5 or test.sum() < 2 or np.var(target[test]) == 0:
        return 0.0
    tree = DecisionTreeRegressor(max_depth=6, min_samples_leaf=3, random_state=seed)
    line = make_pipeline(StandardScaler(), Ridge(alpha=1.0))  # a trend, which a tree cannot extrapolate
    scores = [r2_score(target[test], m.fit(x[train], target[train]).predict(x[test])) for m in (tree, line)]
    return float(max(scores))


def _target_values(target: Column, classification: bool) -> np.ndarray:
    if classification:
        return target.text.fillna("").astype(str).to_numpy()
    return target.numbers.to_numpy(dtype=float)


def _encode(column: Column, rows: np.ndarray) -> np.ndarray:
    if column.numeric:
        values = column.numbers.to_numpy(dtype=float)[rows]
        return np.where(np.isfinite(values), values, -1e12)
    codes = pd.Categorical(column.text[rows]).codes.astype(float)
    return codes


def _bins(values: np.ndarray, n: int) -> np.ndarray:
    """Group keys for one column: its values when few, else rank bins of about 20 rows each."""
    series = pd.Series(values)
    if series.nunique() <= max(2, n // 20):
        return series.to_numpy()
    bins = max(2, min(64, n // 20))
    return (series.rank(method="first").to_numpy() - 1) * bins // n


def single_column_score(column: Column, y: np.ndarray, labelled: np.ndarray, classification: bool) -> float:
    """How well the column alone gives the target away, in-sample: for a label the share of rows whose class
    is their group's majority, scaled so the majority class scores 0 and perfection 1; for a number the
    correlation ratio (share of variance its groups explain)."""
    keys = pd.factorize(_bins(_encode(column, labelled), int(labelled.sum())))[0]
    if classification:
        classes = pd.factorize(y)[0]
        counts = np.zeros((keys.max() + 1, classes.max() + 1))
        np.add.at(counts, (keys, classes), 1)
        majority = counts.sum(axis=0).max() / len(y)
        hits = counts.max(axis=1).sum() / len(y)
        return float((hits - majority) / (1 - majority)) if majority < 1 else 0.0
    finite = np.isfinite(y)
    keys, values = keys[finite], y[finite]
    total = values.var()
    if not total or len(values) < 3:
        return 0.0
    sums = np.bincount(keys, weights=values)
    sizes = np.bincount(keys)
    means = sums[keys] / sizes[keys]
    return float(1 - ((values - means) ** 2).mean() / total)


def cross_validated(
    features: list[Column],
    y: np.ndarray,
    labelled: np.ndarray,
    classification: bool,
    seed: int,
) -> tuple[float, float]:
    """(score, trivial score): the better of a pruned decision tree and (for numbers) a ridge line, scored by
    3-fold cross-validated macro-F1 or R2 on up to CV_ROWS rows. Cheap on purpose: it only has to tell a
    learnable target from noise, and it runs for every candidate of every source."""
    from sklearn.linear_model import Ridge
    from sklearn.metrics import f1_score, r2_score
    from sklearn.model_selection import KFold, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    x = np.column_stack([_encode(c, labelled) for c in features])
    target = y
    if not classification:
        finite = np.isfinite(target)
        x, target = x[finite], target[finite]
    if len(target) > CV_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(len(target), CV_ROWS, replace=False))
        x, target = x[rows], target[rows]
    if classification:
        counts = pd.Series(target).value_counts()
        splitter = StratifiedKFold if counts.min() >= FOLDS else KFold
        folds = list(splitter(FOLDS, shuffle=True, random_state=seed).split(x, target))
        tree = DecisionTreeClassifier(max_depth=8, min_samples_leaf=3, random_state=seed)
        predicted = _predict(tree, x, target, folds)
        # The bar the validation gate applies later: the better of the majority vote and classes drawn at
        # their shares (for macro-F1 the vote scores far below chance).
        majority = np.full(len(target), counts.index[0], dtype=object)
        drawn = np.random.default_rng(0).choice(
            counts.index.to_numpy(), len(target), p=(counts / counts.sum()).to_numpy()
        )
        baseline = max(f1_score(target, guess, average="macro") for guess in (majority, drawn))
        return float(f1_score(target, predicted, average="macro")), float(baseline)
    folds = list(KFold(FOLDS, shuffle=True, random_state=seed).split(x))
    # A tree for shapes, a ridge line for small tables a tree cannot learn (20 rows of a textbook regression)
    # and for sums a tree only approximates: the better of the two.
    tree = DecisionTreeRegressor(max_depth=6, min_samples_leaf=5, random_state=seed)
    line = make_pipeline(StandardScaler(), Ridge(alpha=1.0))
    return max(float(r2_score(target, _predict(m, x, target, folds))) for m in (tree, line)), 0.0


def _predict(model, x: np.ndarray, y: np.ndarray, folds: list) -> np.ndarray:
    """Out-of-fold predictions of a fresh clone of `model` per fold."""
    from sklearn.base import clone

    predicted = np.empty(len(y), dtype=y.dtype)
    for train, test in folds:
        predicted[test] = clone(model).fit(x[train], y[train]).predict(x[test])
    return predicted
