"""The data checks every candidate framing must pass, whoever proposed it: enough labelled rows and classes,
learnable (a quick cross-validated model beats the trivial predictor by a margin), not leaked (no column gives
the target away alone; such columns are left out and the candidate is checked without them), and for a series
enough distinct timestamps to hold out the last 20% chronologically."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dareforge.config import Config
from dareforge.families.registry import model_needs, question_needs
from dareforge.reference_solutions.forecast import clock as forecast_clock
from dareforge.reference_solutions.forecast import is_dated, model_free_scale, naive_forecasts, season_length
from dareforge.reference_solutions.leaks import Formula, pair_formula, single_column_scores
from dareforge.reference_solutions.metrics import forecast_skill
from dareforge.schema import TaskType
from dareforge.understand.columns import Column, Sample

CV_ROWS = 2000
MIN_LEAK_ROWS = 20
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
    """The failure is one a person may overrule (learnability), not a fact of the data (rows, classes)."""
    forecastable: bool = True
    """For a series: a quick model forecasts its last 20% better than every model-free forecast by the margin."""
    from_time: bool = True
    """For a series: it does so from the timestamps (and entity) alone, as a TS-CF task asks."""
    questions: bool = False
    """It failed as a prediction target only (noise, a formula, no usable feature): its table still poses
    questions."""
    formula: Formula | None = None
    """How one or two columns compute the target, when they do (a target named in the config or by a
    competition is then posed without them)."""


def labelled_rows(sample: Sample, target: Column) -> int:
    """The table's rows with a target, estimated from the sample."""
    share = target.nonnull / sample.rows if sample.rows else 0.0
    return round(share * sample.total_rows)


def check_tabular(
    sample: Sample,
    target: Column,
    task_type: TaskType,
    features: list[Column],
    config: Config,
    keys: list[Column] = (),
    times: pd.Series | None = None,
) -> Outcome:
    """`keys`: columns that are no features (ids, row numbers) but stay in the files unless they leak: a key
    whose order follows the target (ids handed out class by class) is left out of the files too. `times`: the
    parsed time of each sampled row when the rows are indexed by time; the task is then split in time, and so
    is every check here (a column must predict later rows from earlier ones)."""
    cfg, out = config.understand, Outcome(passed=False)
    rows = labelled_rows(sample, target)
    short = model_needs(task_type, config).short_by(rows)
    if short:
        out.reason = f"{task_type} models skip it: {short.replace(' rows', ' labelled rows', 1)}"
        # Too few rows for a model, not for a question: the table still poses questions when they have theirs.
        out.questions = question_needs(config).short_by(rows) is None
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
    clock = None if times is None else forecast_clock(pd.Series(times))[labelled]
    if clock is not None:
        out.checks.append("rows indexed by time: checked (and split) in time")
    key_names = {c.name for c in keys}
    scores = single_scores([*features, *keys], y, labelled, classification, cfg.seed, clock)
    kept = []
    for column in [*features, *keys]:
        score = scores.get(column.name, 0.0)
        if score >= cfg.max_single_column_score:
            out.excluded.append(column.name)
            what = "its order follows the target" if column.name in key_names else "alone scores"
            out.checks.append(f"leak: {column.name} {what} ({score:.3f} held out; left out)")
        elif column.name not in key_names:
            kept.append(column)
    if not kept:
        out.reason = (
            "no feature is left once the columns that give the target away are removed"
            if out.excluded
            else "no column can be a feature: the others are ids, free text, constant, empty, mostly missing "
            "or of too many categories"
        )
        out.questions = True
        return out
    formula = None if classification else derived_formula(target, kept, labelled)
    if formula:
        out.reason = f"derived: {formula.text}, so a model only recomputes a formula"
        out.soft = out.questions = True
        out.formula = formula
        return out
    score, baseline = cross_validated(kept, y, labelled, classification, cfg.seed, clock)
    metric = "macro-F1" if classification else "R2"
    out.checks.append(f"learnable: {metric} {score:.3f} against {baseline:.3f} for the trivial predictor")
    if not classification and score >= DERIVED_SCORE:
        out.reason = (
            f"derived: the other columns determine it ({metric} {score:.3f} cross-validated), so a model only "
            "recomputes a formula"
        )
        out.soft = out.questions = True
        return out
    if score - baseline < cfg.min_learnable_margin:
        out.reason = (
            f"not learnable: a quick model reaches {metric} {score:.3f}, the trivial predictor {baseline:.3f} "
            f"(margin under understand.min_learnable_margin={cfg.min_learnable_margin})"
        )
        out.soft = out.questions = True
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
    # Enough periods, counted in seasons of the series' own step, not in rows (a panel has many rows a period).
    season = season_length(
        forecast_clock(pd.Series(times))[target.text.notna().to_numpy()], is_dated(pd.Series(times))
    )
    series = model_needs(TaskType.TIME_SERIES, config)
    periods = series.periods(season, config.prepare.test_share)
    if stamps < periods:
        out.reason = (
            f"forecasting families skip it: {stamps} distinct timestamps (a season of {season} steps), fewer than "
            f"the {periods} it needs ({series.why})"
        )
        return out
    out.checks.append(
        f"timestamps: {stamps} distinct, {periods} needed (a season of {season} steps); rows: {rows}"
        + (f"; series by {entity}" if entity else "")
    )
    values = target.numbers.to_numpy()
    labelled = np.isfinite(values)
    # The gate's leak measure, in time: a column that alone predicts later values (a storage volume beside a
    # level, a copy in other units) is left out of the framing's files.
    scores = single_scores(
        others, values[labelled], labelled, False, cfg.seed, forecast_clock(pd.Series(times))[labelled]
    )
    for column in others:
        score = scores.get(column.name, 0.0)
        if score >= cfg.max_single_column_score:
            out.excluded.append(column.name)
            out.checks.append(f"leak: {column.name} alone scores {score:.3f} on later rows (left out)")
    exogenous = [c for c in others if c.name not in out.excluded]
    # Columns known in the forecast window that compute the target (its parts, `count = casual + registered`)
    # give every future value away, whichever split; the one-column measure above sees neither part alone.
    formula = derived_formula(target, exogenous, labelled)
    if formula:
        out.excluded += list(formula.columns)
        out.checks.append(f"leak: {formula.text} (left out)")
        exogenous = [c for c in exogenous if c.name not in formula.columns]
    skill, from_time = forecastable(times, entity_codes(sample, entity), exogenous, values, cfg.seed)
    # Not a verdict on the framing (the gate measures the strong reference on the real split): among series
    # that pass, the stage prefers one a quick model forecasts, and poses TS-CF only where the timestamps alone
    # let a model beat the model-free forecasts (a random walk's CF task would measure nothing).
    out.checks.append(
        f"forecastable: skill {skill:.3f} with its columns, {from_time:.3f} from the time alone, on the last "
        "20% of time (0 for the best model-free forecast: mean, last value, seasonal naive)"
    )
    out.forecastable = skill >= cfg.min_learnable_margin
    out.from_time = from_time >= cfg.min_learnable_margin
    out.passed = True
    return out


def entity_codes(sample: Sample, entity: str | None) -> np.ndarray | None:
    column = sample.column(entity) if entity else None
    return None if column is None else pd.Categorical(column.text).codes.astype(float)


def forecastable(
    times: pd.Series, entities: np.ndarray | None, others: list[Column], y: np.ndarray, seed: int
) -> tuple[float, float]:
    """Forecast skill of a quick model on the latest 20% of timestamps, trained on the earlier 80%, (with the
    other numeric columns, as a TS-XF task offers them; from the time and entity alone, as TS-CF does): the
    better of a tree and a ridge line, in the units the tasks are scored in (0 for the best of the training
    mean, the last value and the seasonal-naive forecast)."""
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeRegressor

    clock = forecast_clock(pd.Series(times))
    time_columns = [clock] + ([entities] if entities is not None else []) + _calendar_numbers(times)
    columns = time_columns + [c.numbers.to_numpy(dtype=float) for c in others if c.numeric]
    x = np.nan_to_num(np.column_stack(columns), nan=-1e12)
    usable = np.isfinite(y) & np.isfinite(clock)
    if usable.sum() < 10:
        return 0.0, 0.0
    x, target, clock = x[usable], y[usable], clock[usable]
    series = entities[usable] if entities is not None else np.zeros(len(target))
    cutoff = np.quantile(np.unique(clock), 0.8)
    train, test = clock <= cutoff, clock > cutoff
    if train.sum() < 5 or test.sum() < 2 or np.var(target[test]) == 0:
        return 0.0, 0.0
    frame = pd.DataFrame({"t": clock, "y": target, "e": series})
    scale = model_free_scale(target[test], naive_forecasts(frame[train], frame[test], "t", "y", "e"))

    def skill(features: np.ndarray) -> float:
        tree = DecisionTreeRegressor(max_depth=6, min_samples_leaf=3, random_state=seed)
        line = make_pipeline(StandardScaler(), Ridge(alpha=1.0))  # a trend, which a tree cannot extrapolate
        fitted = [m.fit(features[train], target[train]).predict(features[test]) for m in (tree, line)]
        return float(max(forecast_skill(target[test], predicted, scale) for predicted in fitted))

    with_columns = skill(x)
    from_time = with_columns if x.shape[1] == len(time_columns) else skill(x[:, : len(time_columns)])
    return with_columns, from_time


def _calendar_numbers(times: pd.Series) -> list[np.ndarray]:
    """Month, weekday and hour of datetime times (what a forecast from the time alone can use for seasons)."""
    if not np.issubdtype(np.asarray(times).dtype, np.datetime64):
        return []
    when = pd.Series(pd.to_datetime(times))
    return [
        getattr(when.dt, part).to_numpy(dtype=float, na_value=np.nan)
        for part in ("month", "day_of_week", "hour")
    ]


def _target_values(target: Column, classification: bool) -> np.ndarray:
    if classification:
        return target.text.fillna("").astype(str).to_numpy()
    return target.numbers.to_numpy(dtype=float)


def single_scores(
    columns: list[Column],
    y: np.ndarray,
    labelled: np.ndarray,
    classification: bool,
    seed: int,
    clock: np.ndarray | None = None,
) -> dict[str, float]:
    """Held-out score of each column alone on at most CV_ROWS labelled sample rows (the gate's leak measure,
    see `reference_solutions.leaks`), in a seeded random order, or in time when `clock` (per labelled row) is
    given."""
    rows, finite = labelled.copy(), np.ones(len(y), dtype=bool)
    if not classification:
        finite = np.isfinite(y)
        rows[labelled] = finite
        y = y[finite]
    if len(y) < MIN_LEAK_ROWS:
        return {}
    values = {c.name: c.codes[rows] for c in columns}
    rng = np.random.default_rng(seed)
    if clock is None:
        order = rng.permutation(len(y))[:CV_ROWS]
    else:
        # A seeded subset kept in time order: the held-out rows are still the latest.
        order = np.argsort(clock[finite], kind="stable")
        if len(order) > CV_ROWS:
            order = order[np.sort(rng.choice(len(order), CV_ROWS, replace=False))]
    return single_column_scores(values, y, classification, order)


def derived_formula(target: Column, features: list[Column], labelled: np.ndarray) -> Formula | None:
    """How the target is computed from one or two numeric feature columns, when it is (`leaks.pair_formula`)."""
    numeric = [c for c in features if c.numeric]
    if not numeric:
        return None
    y = target.numbers.to_numpy(dtype=float)
    matrix = np.column_stack([c.numbers.to_numpy(dtype=float) for c in numeric])
    return pair_formula(y[labelled], matrix[labelled], [c.name for c in numeric], target.name)


def cross_validated(
    features: list[Column],
    y: np.ndarray,
    labelled: np.ndarray,
    classification: bool,
    seed: int,
    clock: np.ndarray | None = None,
) -> tuple[float, float]:
    """(score, trivial score): the better of a pruned decision tree and (for numbers) a ridge line, scored by
    3-fold cross-validated macro-F1 or R2 on up to CV_ROWS rows, or, with a `clock` (per labelled row), on the
    latest 20% of the rows trained on the earlier 80%. Cheap on purpose: it only has to tell a learnable
    target from noise, and it runs for every candidate of every source."""
    from sklearn.linear_model import Ridge
    from sklearn.metrics import f1_score, r2_score
    from sklearn.model_selection import KFold, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    x = np.column_stack([c.codes[labelled, 0] for c in features])
    if clock is not None:
        # Split in time, a model needs the time itself to carry a trend past the training rows (a ridge line
        # extrapolates it; a tree cannot).
        x = np.column_stack(
            [x, np.nan_to_num(clock, nan=float(np.nanmean(clock)) if np.isfinite(clock).any() else 0.0)]
        )
    target = y
    if not classification:
        finite = np.isfinite(target)
        x, target = x[finite], target[finite]
        clock = None if clock is None else clock[finite]
    if len(target) > CV_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(len(target), CV_ROWS, replace=False))
        x, target = x[rows], target[rows]
        clock = None if clock is None else clock[rows]
    if clock is not None:
        order = np.argsort(np.where(np.isnan(clock), -np.inf, clock), kind="stable")
        cut = int(len(order) * 0.8)
        folds = [(order[:cut], order[cut:])]
        scored = order[cut:]
    else:
        scored = np.arange(len(target))
    if classification:
        counts = pd.Series(target).value_counts()
        if clock is None:
            splitter = StratifiedKFold if counts.min() >= FOLDS else KFold
            folds = list(splitter(FOLDS, shuffle=True, random_state=seed).split(x, target))
        tree = DecisionTreeClassifier(max_depth=8, min_samples_leaf=3, random_state=seed)
        predicted = _predict(tree, x, target, folds)[scored]
        # The bar the validation gate applies later: the better of the majority vote and classes drawn at
        # their shares (for macro-F1 the vote scores far below chance).
        truth = target[scored]
        majority = np.full(len(truth), counts.index[0], dtype=object)
        drawn = np.random.default_rng(0).choice(
            counts.index.to_numpy(), len(truth), p=(counts / counts.sum()).to_numpy()
        )
        baseline = max(f1_score(truth, guess, average="macro") for guess in (majority, drawn))
        return float(f1_score(truth, predicted, average="macro")), float(baseline)
    if clock is None:
        folds = list(KFold(FOLDS, shuffle=True, random_state=seed).split(x))
    # A tree for shapes, a ridge line for small tables a tree cannot learn (20 rows of a textbook regression)
    # and for sums a tree only approximates: the better of the two.
    tree = DecisionTreeRegressor(max_depth=6, min_samples_leaf=5, random_state=seed)
    line = make_pipeline(StandardScaler(), Ridge(alpha=1.0))
    return max(
        float(r2_score(target[scored], _predict(m, x, target, folds)[scored])) for m in (tree, line)
    ), 0.0


def _predict(model, x: np.ndarray, y: np.ndarray, folds: list) -> np.ndarray:
    """Out-of-fold predictions of a fresh clone of `model` per fold."""
    from sklearn.base import clone

    predicted = np.empty(len(y), dtype=y.dtype)
    for train, test in folds:
        predicted[test] = clone(model).fit(x[train], y[train]).predict(x[test])
    return predicted
