"""Leakage checks: a single feature that gives the target away, one or two features that compute it, an id or
row order that does, test rows that repeat training rows. Each stores a score; the gate compares it with `validate:` thresholds later.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dareforge.config import Config
from dareforge.reference_solutions.leaks import (
    CanonicalLabels,
    Formula,
    LabelCopies,
    encode_column,
    exact_formula,
    pair_formula,
    single_column_scores,
)
from dareforge.schema import TaskType
from dareforge.understand.timeaxis import read_dates
from dareforge.validators.check import Finding, TaskView

MAX_ROWS = 20_000
MIN_ROWS = 20
TOP = 3
MAX_ORDER_CLASSES = 50
MIN_CLASS_ROWS = 10
MIN_CLASS_SHARE = 0.01


def is_time_series(view: TaskView) -> bool:
    return view.family.kind == TaskType.TIME_SERIES


def split_in_time(view: TaskView) -> bool:
    """The task's test rows come after its training rows: a forecast, or a tabular task on time-indexed rows."""
    return is_time_series(view) or view.prepared.split == "chronological"


def is_classification(view: TaskView) -> bool:
    return view.family.kind == TaskType.CLASSIFICATION


def key_columns(view: TaskView) -> set[str]:
    """Columns that identify a row rather than describe it: the id and the metric's keys."""
    return {view.prepared.id_column, *view.task.metric.key_columns}


QUESTION_NOTE = (
    "{family} task: a question with one answer, no prediction features to leak (see the shortcut probe)"
)


def question_finding(view: TaskView) -> Finding:
    return Finding(QUESTION_NOTE.format(family=view.task.family), None)


def family_metric(view: TaskView) -> str:
    """The metric a single feature is scored with: macro-F1 for classification, clipped R² otherwise.

    The task's own metric is a pass/fail one for IF tasks (exact-match, allclose), which says nothing about
    a one-column model, so the family decides.
    """
    return "macro-f1" if is_classification(view) else "clipped-r2"


def canonical_labels(view: TaskView) -> CanonicalLabels:
    """The canonical labels worked out so far for the tasks sharing `view.shared` (a function of text alone)."""
    return view.derived(("canonical labels",), CanonicalLabels)


def _target(view: TaskView, frame: pd.DataFrame, column: str) -> pd.Series:
    values = frame[column]
    if is_classification(view):
        return values.where(values.isna(), values.map(canonical_labels(view).of))
    return pd.to_numeric(values, errors="coerce").where(lambda s: np.isfinite(s))


def train_target(view: TaskView, column: str) -> pd.Series:
    """`_target` of a train.csv column, worked out once: leakage-feature, -order and -copy all read it."""
    key = ("train target", view.digest("public", "train.csv"), is_classification(view), column)
    return view.derived(key, lambda: _target(view, view.train, column))


class LeakageFeature:
    """Best held-out score of a shallow tree on ONE feature column; the score is that best value.

    Rows: the public train, at most 20k sampled (seeded by the task's seed), rows with a missing target
    dropped; 70% fit, 30% held out at random, or the last 30% in time for tasks split in time (a feature must
    predict the future there). Features: columns of both train and test (what an agent can use at
    prediction time) except the id, the metric's keys, the targets, and a time-series task's time column.
    Metric: macro-F1 for classification, clipped R² for regression and time series; with several targets,
    each column's score is its best over the targets.
    """

    name = "leakage-feature"

    def run(self, view: TaskView, config: Config) -> Finding:
        if view.is_question:
            return question_finding(view)
        train, targets = view.train, view.task.metric.target_columns
        excluded = key_columns(view) | set(targets)
        if is_time_series(view) and view.prepared.time_column:
            excluded.add(view.prepared.time_column)
        if not view.has("public", "test.csv"):
            return Finding("public/test.csv is missing; nothing to compare features with", None, flagged=True)
        test_columns = set(view.test.columns)
        features = [c for c in train.columns if c not in excluded and c in test_columns]
        if not features:
            return Finding("no feature columns besides keys and targets in test.csv; nothing to leak", None)
        metric_name = family_metric(view)
        scores: dict[str, float] = {}
        for target in targets:
            if target not in train.columns:
                return Finding(f"target column `{target}` is missing from train.csv", None, flagged=True)
            for column, score in self._scores(view, train, target, features).items():
                scores[column] = max(score, scores.get(column, 0.0))
        if not scores:
            return Finding(f"fewer than {MIN_ROWS} training rows with a target; nothing measured", None)
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        best_column, best = ranked[0]
        details = {
            "metric": metric_name,
            "top": [{"column": c, "score": round(s, 4)} for c, s in ranked[:TOP]],
            "features": len(features),
        }
        label = "macro-F1" if metric_name == "macro-f1" else "clipped R²"
        return Finding(
            f"feature `{best_column}` alone reaches {label} {best:.3f} on held-out train rows",
            best,
            details=details,
        )

    def _scores(
        self, view: TaskView, train: pd.DataFrame, target: str, features: list[str]
    ) -> dict[str, float]:
        y = train_target(view, target)
        frame = train.loc[y.notna()]
        y = y.loc[frame.index]
        if len(frame) < MIN_ROWS:
            return {}
        rng = np.random.default_rng(view.task.seed)
        if len(frame) > MAX_ROWS:
            frame = frame.iloc[np.sort(rng.choice(len(frame), MAX_ROWS, replace=False))]
            y = y.loc[frame.index]
        if split_in_time(view) and view.prepared.time_column in frame.columns:
            time = frame[view.prepared.time_column]
            time = time.to_numpy() if pd.api.types.is_numeric_dtype(time) else time.astype(str).to_numpy()
            order = np.argsort(time, kind="stable")
        else:
            order = rng.permutation(len(frame))
        columns = {c: encode_column(frame[c]) for c in features}
        return single_column_scores(columns, y.to_numpy(), is_classification(view), order)


def _spearman(x: pd.Series, y: pd.Series) -> float:
    return _ranks_correlation(x.rank(), y.rank())


def _ranks_correlation(x_ranks: pd.Series, y_ranks: pd.Series) -> float:
    value = x_ranks.corr(y_ranks)
    return 0.0 if value is None or not math.isfinite(value) else float(value)


class LeakageOrder:
    """|Spearman| between the target and the row order of train.csv, or a numeric id column.

    Regression: the plain rank correlation. Classification: one-vs-rest over classes with at least 10 rows
    and 1% of the train (the 50 most frequent), each |rho| divided by the largest rho that class's share
    allows (rows sorted by class), so a train sorted by class scores 1.0 whatever the class balance; the
    score is the largest such value. Time-series tasks are skipped: their row order is time by design.
    """

    name = "leakage-order"

    def run(self, view: TaskView, config: Config) -> Finding:
        if view.is_question:
            return question_finding(view)
        if is_time_series(view):
            return Finding("time-series task: row order is time, which the target follows by design", None)
        train = view.train
        orders = {"row order": pd.Series(np.arange(len(train), dtype=float), index=train.index)}
        for column in sorted(key_columns(view)):
            if column in train.columns and pd.api.types.is_numeric_dtype(train[column]):
                orders[f"id `{column}`"] = train[column].astype("float64")
        found: dict[str, float] = {}
        for target in view.task.metric.target_columns:
            if target not in train.columns:
                return Finding(f"target column `{target}` is missing from train.csv", None, flagged=True)
            y = train_target(view, target)
            for name, order in orders.items():
                keep = y.notna() & order.notna()
                value = self._correlation(view, order[keep], y[keep])
                found[name] = max(value, found.get(name, 0.0))
        if not found:
            return Finding("no rows to correlate", None)
        name, best = max(found.items(), key=lambda kv: (kv[1], kv[0]))
        how = "one-vs-rest, normalized" if is_classification(view) else "Spearman"
        return Finding(
            f"{name} correlates with the target at |rho| {best:.3f} ({how})",
            best,
            details={name: round(value, 4) for name, value in found.items()},
        )

    def _correlation(self, view: TaskView, order: pd.Series, y: pd.Series) -> float:
        if len(y) < 3:
            return 0.0
        if not is_classification(view):
            return abs(_spearman(order, y))
        counts = y.value_counts()
        counts = counts[(counts >= MIN_CLASS_ROWS) & (counts >= MIN_CLASS_SHARE * len(y))]
        best = 0.0
        ranks = order.rank()
        # What every class's Spearman ranks the order as, ranked once for all classes.
        ranks_ranked, sorted_ranked = ranks.rank(), pd.Series(np.sort(ranks.to_numpy())).rank()
        ceilings: dict[int, float] = {}  # by class size: a class's ceiling depends on nothing else
        for label, size in counts.iloc[:MAX_ORDER_CLASSES].items():
            indicator = (y == label).astype(float)
            if indicator.nunique() < 2:
                continue
            if size not in ceilings:
                # The largest |rho| this class share allows: every row of the class at one end of the order.
                sorted_indicator = pd.Series(np.sort(indicator.to_numpy())).rank()
                ceilings[size] = abs(_ranks_correlation(sorted_ranked, sorted_indicator))
            if ceilings[size] > 0:
                rho = _ranks_correlation(ranks_ranked, indicator.rank())
                best = max(best, min(abs(rho) / ceilings[size], 1.0))
        return best


ARROW_TEXT = pd.StringDtype("pyarrow", na_value=np.nan)
"""pandas' text type (`str`), what read_csv gives a text column and what a column of Python strings becomes."""


def _comparable(frame: pd.DataFrame, columns: list[str], numeric: set[str]) -> pd.DataFrame:
    """Cells in one form on both sides: numbers as floats, everything else as stripped text."""
    out = {}
    for column in columns:
        values = frame[column]
        if column in numeric:
            out[column] = pd.to_numeric(values, errors="coerce").astype("float64")
        elif values.dtype == ARROW_TEXT:
            # Text already in the type the cells' `str` would be read back as: stripped by the same Arrow
            # kernel, without a Python object per cell.
            out[column] = values.fillna("").str.strip()
        else:
            out[column] = values.astype(object).where(values.notna(), "").map(str).str.strip()
    return pd.DataFrame(out, index=frame.index)


class LeakageSharedRows:
    """Excess of test rows repeating a train row over how often train repeats itself.

    Score = share of test rows whose feature values (every test column except the keys) equal some train
    row's, minus the share of train rows that repeat within train. A dataset of a few discrete features repeats
    everywhere (that is not leakage); test rows copied from train show up as an excess.
    """

    name = "leakage-shared-rows"

    def run(self, view: TaskView, config: Config) -> Finding:
        if view.is_question:
            return question_finding(view)
        if not view.has("public", "test.csv"):
            return Finding("public/test.csv is missing; no rows to compare", None, flagged=True)
        train, test = view.train, view.test
        keys = key_columns(view)
        columns = [c for c in test.columns if c not in keys]
        missing = [c for c in columns if c not in train.columns]
        if missing:
            return Finding(f"test columns {missing} are not in train.csv; rows cannot be compared", None)
        if not columns:
            return Finding("test.csv has no columns besides the keys; no rows to compare", None)
        if len(test) == 0:
            return Finding("test.csv has no rows", None)
        numeric = {
            c
            for c in columns
            if pd.api.types.is_numeric_dtype(train[c]) and pd.api.types.is_numeric_dtype(test[c])
        }
        train_hashes = pd.util.hash_pandas_object(_comparable(train, columns, numeric), index=False)
        # A framing's variants share test.csv: its rows are hashed once for them all.
        hashed = (
            "test row hashes",
            view.digest("public", "test.csv"),
            tuple(columns),
            tuple(sorted(numeric)),
        )
        test_hashes = view.derived(
            hashed, lambda: pd.util.hash_pandas_object(_comparable(test, columns, numeric), index=False)
        )
        shared = test_hashes.isin(set(train_hashes.to_numpy()))
        share = float(shared.mean())
        # For auditors: how often train repeats itself on these columns (high for few discrete features).
        within_train = float(train_hashes.duplicated(keep=False).mean()) if len(train) else 0.0
        excess = max(share - within_train, 0.0)
        return Finding(
            f"{int(shared.sum())} of {len(test)} test rows ({share:.1%}) repeat a train row on {len(columns)} "
            f"feature columns, {excess:.1%} more than train repeats itself ({within_train:.1%})",
            excess,
            details={
                "shared": int(shared.sum()),
                "shared_share": round(share, 4),
                "test_rows": len(test),
                "columns": len(columns),
                "train_rows_repeated_within_train": round(within_train, 4),
            },
        )


DATE_PARTS = {
    "year": lambda d: d.dt.year,
    "month": lambda d: d.dt.month,
    "day": lambda d: d.dt.day,
    "weekday": lambda d: d.dt.day_of_week,
    "day_of_year": lambda d: d.dt.day_of_year,
    "days": lambda d: (d - pd.Timestamp("1970-01-01")) // pd.Timedelta(days=1),
}
"""What a target may be computed from a date as (`days`: since an epoch; a line through it is days since any
date, or whole weeks): `<column>.<part>` stands beside the public columns in the leak checks."""


def with_date_parts(frame: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """`frame` with each date part of every text column of `columns` that holds dates, and the parts' names."""
    parts = {}
    for column in columns:
        dates = read_dates(frame[column])
        if dates is not None:
            for part, compute in DATE_PARTS.items():
                parts[f"{column}.{part}"] = compute(dates).astype("float64")
    return pd.concat([frame, pd.DataFrame(parts, index=frame.index)], axis=1), list(parts)


def held_out_key(view: TaskView) -> tuple | str:
    """What `held_out_rows` depends on (test.csv and answers.csv by content, the id, keys and targets): a
    framing's variants share it, their noise and filters being in train.csv; or why there are no such rows."""
    if not (view.has("public", "test.csv") and view.has("private", "answers.csv")):
        return "no test.csv or answers.csv to measure on"
    metric = view.task.metric
    return (
        view.digest("public", "test.csv"),
        view.digest("private", "answers.csv"),
        view.prepared.id_column,
        tuple(metric.key_columns),
        tuple(metric.target_columns),
    )


def held_out_rows(view: TaskView) -> tuple[pd.DataFrame, list[str], list[str]] | str:
    """test.csv's features (`public_features`) beside the private answers' targets, joined on the metric's keys:
    the rows the task is scored on, whatever its split and noise, its targets and features; or why none."""
    key = held_out_key(view)
    return key if isinstance(key, str) else view.derived(("held-out rows", key), lambda: _held_out_rows(view))


def _held_out_rows(view: TaskView) -> tuple[pd.DataFrame, list[str], list[str]] | str:
    features = public_features(view)
    keys = view.task.metric.key_columns
    unjoined = [k for k in keys if k not in view.test.columns or k not in view.answers.columns]
    if unjoined:
        return f"test.csv or answers.csv lacks the key(s) {unjoined}; no rows to measure on"
    targets = [t for t in view.task.metric.target_columns if t in view.answers.columns]
    # Only keys and targets from the answers: a series' answers also hold its entity, a test column too.
    rows = view.test[[*keys, *features]].merge(view.answers[[*keys, *targets]], on=keys, how="inner")
    return rows, targets, features


def public_features(view: TaskView) -> list[str]:
    """test.csv's columns besides the keys and targets: what an agent has for every row it predicts (the time
    column too: a target may be computed from the date)."""
    skip = key_columns(view) | set(view.task.metric.target_columns)
    return [c for c in view.test.columns if c not in skip]


class LeakageFormula:
    """Whether one or two public features (or parts of a public date) compute a numeric target on the task's
    held-out rows: `leaks.pair_formula` (a sum, difference, ratio or other line through them or their
    logarithms, `count = casual + registered`; the score is that line's R², 0 when none is found) and
    `leaks.exact_formula` (the line that reproduces the most rows within a tight tolerance, fitted by trimmed
    least squares; details `share`, what the gate thresholds, and `formula_r2` beside the strong reference),
    which sees a formula that holds on most rows but not all. The features are test.csv's numeric columns
    besides the keys and the time (a trend is no formula), and the year, month, day, weekday,
    day of year and day number of every column of dates, the time included (a target that is the day of the
    year); the target is the private answers', joined on the metric's keys, so an IF task's noise rows and a
    chronological split change nothing. Numeric targets only."""

    name = "leakage-formula"

    def run(self, view: TaskView, config: Config) -> Finding:
        if view.is_question:
            return question_finding(view)
        if is_classification(view):
            return Finding("a class label is no formula's result; leakage-copy covers labels", None)
        key = held_out_key(view)
        if isinstance(key, str):
            return Finding(key, None)
        # The search depends on the held-out rows and the time column only: a framing's variants share it.
        measured = view.derived(("formulas", key, view.prepared.time_column), lambda: self._formulas(view))
        if isinstance(measured, str):
            return Finding(measured, None)
        found, exact, numeric = measured
        if not numeric:
            return Finding("no numeric feature or date in test.csv", 0.0, details={"share": 0.0})
        details = {
            "columns": list(found.columns) if found else [],
            "fit": round(found.fit, 6) if found else 0.0,
            "share": round(exact.share, 4) if exact else 0.0,
            "share_columns": list(exact.columns) if exact else [],
            "formula_r2": round(exact.fit, 4) if exact else None,
            "strong": view.task.scores.strong,
            "over_strong": _formula_over_strong(exact, view.task.scores.strong),
        }
        said = [found.text] if found else []
        if exact is not None:
            said.append(f"{exact.text} (R2 {exact.fit:.3f}, strong reference {view.task.scores.strong})")
        if not said:
            return Finding(
                f"no one or two of {len(numeric)} numeric features compute the target", 0.0, details=details
            )
        return Finding(
            "; ".join(said) + " on the held-out rows", found.fit if found else 0.0, details=details
        )

    def _formulas(self, view: TaskView) -> tuple[Formula | None, Formula | None, list[str]] | str:
        """The best `pair_formula` and `exact_formula` over the targets, and the numeric features searched;
        or why there are no held-out rows."""
        held = held_out_rows(view)
        if isinstance(held, str):
            return held
        rows, targets, features = held
        time = view.prepared.time_column
        rows, parts = with_date_parts(rows, [*features, *([time] if time in rows.columns else [])])
        numeric = [c for c in features if c != time and pd.api.types.is_numeric_dtype(rows[c])] + parts
        if not numeric:
            return None, None, numeric
        found, exact = None, None
        matrix = rows[numeric].to_numpy(dtype=float)
        for target in targets:
            y = pd.to_numeric(rows[target], errors="coerce").to_numpy(dtype=float)
            formula = pair_formula(y, matrix, numeric, target)
            if formula is not None and (found is None or formula.fit > found.fit):
                found = formula
            formula = exact_formula(y, matrix, numeric, target)
            if formula is not None and (exact is None or formula.share > exact.share):
                exact = formula
        return found, exact, numeric


RIVAL_SHARE = 0.5
"""A formula that reproduces at least this share of held-out rows exactly is weighed against the strong reference:
on fewer rows a good R² is a strong honest relation, not an arithmetic one."""
NOT_A_RIVAL = -1.0


def _formula_over_strong(exact, strong: float | None) -> float:
    """How far the exact formula's R² lies above the strong reference's score, where the formula reproduces at
    least `RIVAL_SHARE` of the rows exactly; `NOT_A_RIVAL` otherwise. A line through two public columns that
    reproduces most rows and out-scores every model the task's ladder fits is the answer's arithmetic, not a
    relation to learn (issue 41: a target that two columns compute on 77% of rows, R² 0.965, strong 0.763)."""
    if exact is None or strong is None or exact.share < RIVAL_SHARE:
        return NOT_A_RIVAL
    return round(exact.fit - strong, 4)


class LeakageCopy:
    """Whether one public feature (or part of a public date) gives a class label away on the task's held-out
    rows, whatever values it took in training (`leaks.LabelCopies`: the label itself, a one-to-one relabelling
    learned on train.csv, or a numeric feature whose order follows the labels'); a tree on it, fitted on
    earlier rows, misses a copy whose test rows hold values it never saw. The score is the best feature's share
    of held-out rows reproduced beyond the most common label's share. Classification only: a numeric copy is a
    line through one column (leakage-formula)."""

    name = "leakage-copy"

    def run(self, view: TaskView, config: Config) -> Finding:
        if view.is_question:
            return question_finding(view)
        if not is_classification(view):
            return Finding("a number's copy is a line through one column; leakage-formula covers it", None)
        held = held_out_rows(view)
        if isinstance(held, str):
            return Finding(held, None)
        rows, targets, features = held
        train = view.train
        usable = [c for c in features if c in train.columns]
        dated = ("held-out dates", held_out_key(view), tuple(usable))
        rows, parts = view.derived(dated, lambda: with_date_parts(rows, usable))
        train, _ = with_date_parts(train, usable)
        scores: dict[str, tuple[float, str]] = {}
        for target in (t for t in targets if t in train.columns):
            held_y, train_y = _target(view, rows, target), train_target(view, target)
            labelled, known = held_y.notna(), train_y.notna()
            if labelled.sum() < MIN_ROWS:
                continue
            copies = LabelCopies(train_y[known], held_y[labelled], canonical_labels(view))
            train_known, held_labelled = train.loc[known], rows.loc[labelled]
            for column in [*usable, *parts]:
                if column not in train.columns:
                    continue
                score = copies.score(train_known[column], held_labelled[column])
                if score[0] >= scores.get(column, (-1.0, ""))[0]:
                    scores[column] = score
        if not scores:
            return Finding(f"fewer than {MIN_ROWS} held-out rows with a label, or no feature", None)
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1][0], kv[0]))
        column, (best, how) = ranked[0]
        return Finding(
            f"feature `{column}` reproduces the label ({how}) on held-out rows, {best:.3f} of the way from the "
            "most common label's share to every row",
            best,
            details={"top": [{"column": c, "score": round(s, 4), "how": h} for c, (s, h) in ranked[:TOP]]},
        )


TASK_CHECKS = (LeakageFeature(), LeakageFormula(), LeakageCopy(), LeakageOrder(), LeakageSharedRows())
RUN_CHECKS: tuple = ()
