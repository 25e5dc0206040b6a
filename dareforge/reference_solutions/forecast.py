"""The forecasts a forecast task must beat, and the scale its score is measured in.

A series task is only worth posing when a model can win it: its bar is the best of three forecasts that need
no model, each per series (entity): the training mean, the last value, and the seasonal-naive forecast (the
last season of training values repeated: 24 hours, 7 days, 52 weeks, 12 months, 4 quarters). The best of them
on the test rows sets the task's `scale`, its mean absolute error: `forecast-skill` scores `1 - MAE / scale`
floored at 0, so no model-free forecast scores above 0, a perfect one scores 1, and the score means the same
for a series in millions as for one in fractions (clipped R² on a trending or random-walk window scores 0 for
every forecast, which measures nothing).
"""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd

SEASONS = (  # (days per step, tolerance in days, steps per season)
    (1 / 24, 1 / 96, 24),
    (1.0, 0.1, 7),
    (7.0, 0.5, 52),
    (30.4, 3.5, 12),
    (91.3, 5.0, 4),
)


def clock(values: pd.Series) -> np.ndarray:
    """Times as floats that sort like the times: days for dates, the numbers themselves for years or steps."""
    if pd.api.types.is_datetime64_any_dtype(values):
        when = pd.Series(values)
    else:
        numbers = pd.to_numeric(values, errors="coerce")
        if numbers.notna().mean() >= 0.98:
            return numbers.to_numpy(dtype=float)
        when = pd.to_datetime(values, errors="coerce", format="mixed")
    return _days(when)


def _days(when: pd.Series) -> np.ndarray:
    """Datetimes as days since 1970 (NaN where missing), whatever their resolution (pandas 3 keeps the unit
    it parsed, so the raw integers may be seconds or microseconds)."""
    when = pd.Series(pd.to_datetime(when))
    delta = (when - pd.Timestamp("1970-01-01")) / pd.Timedelta(days=1)
    return delta.to_numpy(dtype=float, na_value=np.nan)


def is_dated(values: pd.Series) -> bool:
    """Whether `clock` reads `values` as dates (days), not as plain numbers (years, or steps of no calendar)."""
    if pd.api.types.is_datetime64_any_dtype(values):
        return True
    return pd.to_numeric(values, errors="coerce").notna().mean() < 0.98


def season_length(times: np.ndarray, dated: bool = True, known: float = 2.5) -> int:
    """Steps per season from the usual step between distinct times (1 when the series has no known season).
    Plain numbers (`dated` False: years as 1871, 1872...) have no calendar: a step of 1 is a year or a step, not
    a day, and no season is known. A series shorter than `known` seasons (two whole seasons to learn from once
    a fifth is held out) has none either: 80 weeks hold one yearly cycle and a half, from which no forecaster
    estimates a 52-week season (statsforecast's and fpp3's practice: a non-seasonal model, or seasonal naive
    only where a whole season repeats), so it is forecast as a series without season, not skipped."""
    if not dated:
        return 1
    distinct = np.unique(times[np.isfinite(times)])
    if len(distinct) < 2:
        return 1
    step = float(np.median(np.diff(distinct)))
    season = next((m for days, tolerance, m in SEASONS if abs(step - days) <= tolerance), 1)
    return season if len(distinct) >= known * season else 1


def naive_forecasts(
    train: pd.DataFrame, test: pd.DataFrame, time: str, target: str, entity: str | None
) -> dict[str, np.ndarray]:
    """The model-free forecasts of `target` for each test row (in test's row order), by name."""
    train_clock, test_clock = clock(train[time]), clock(test[time])
    season = season_length(np.concatenate([train_clock, test_clock]), is_dated(train[time]))
    values = pd.to_numeric(train[target], errors="coerce").to_numpy(dtype=float)
    overall = float(np.nanmean(values)) if np.isfinite(values).any() else 0.0
    keys_train = _series_keys(train, entity)
    keys_test = _series_keys(test, entity)
    out = {name: np.full(len(test), overall) for name in ("training mean", "last value", "seasonal naive")}
    for key in pd.unique(keys_test):
        rows = np.flatnonzero(keys_test == key)
        history = np.flatnonzero((keys_train == key) & np.isfinite(values) & np.isfinite(train_clock))
        if len(history) == 0:
            continue
        history = history[np.argsort(train_clock[history], kind="stable")]
        past = values[history]
        # Test rows numbered by their distinct time within the series: the k-th future step repeats the value
        # one season before it.
        step = pd.Series(test_clock[rows]).rank(method="dense").fillna(1).to_numpy(dtype=int) - 1
        last_season = past[-season:]
        out["training mean"][rows] = past.mean()
        out["last value"][rows] = past[-1]
        out["seasonal naive"][rows] = last_season[step % len(last_season)]
    return out


def _series_keys(frame: pd.DataFrame, entity: str | None) -> np.ndarray:
    """Each row's series: its entity as text, or one series for the whole table."""
    if entity is None or entity not in frame.columns:
        return np.zeros(len(frame), dtype=object)
    return frame[entity].astype(str).to_numpy(dtype=object)


def model_free_scale(truth: np.ndarray, forecasts: dict[str, np.ndarray]) -> float:
    """The smallest MAE of the model-free forecasts on the test rows; a tiny positive number when one is exact
    (a constant window: nothing to forecast, and any error scores 0)."""
    errors = [float(np.mean(np.abs(truth - predicted))) for predicted in forecasts.values()]
    return min(errors) or 1e-12


MIN_TEST_STEPS = 30
"""A series' test window holds at least this many distinct times where two thirds of them stay for training:
scored by a bootstrap over the test rows, a window of 20 yearly values leaves every forecast's interval too wide
to tell any two apart."""


def held_out_steps(times: np.ndarray, share: float, dated: bool = True) -> int:
    """How many of the latest distinct `times` (as `clock` reads them) a series holds out: `share` of them, at
    least `MIN_TEST_STEPS` where that keeps two thirds for training, in whole seasons where the series has one
    (a window ending mid-season scores a seasonal forecast on part of its cycle), never all of them."""
    distinct = np.unique(times[np.isfinite(times)])
    count = len(distinct)
    if count < 2:
        return count
    season = season_length(distinct, dated)
    cap = count // 3
    steps = max(round(count * share), min(MIN_TEST_STEPS, cap))
    if season > 1:
        whole = -(-steps // season) * season  # up to whole seasons
        if whole > max(cap, steps):  # up would take too much of the training history: down instead
            whole = steps // season * season
        steps = whole or steps
    return min(max(steps, 1), count - 1)


_SMOOTHING = '''
# Forecasts only: Holt-Winters exponential smoothing per series, a candidate beside the two models above
import warnings

from sklearn.base import BaseEstimator, RegressorMixin
from statsmodels.tsa.holtwinters import ExponentialSmoothing

SEASONS = {seasons!r}
{helpers}


class Smoothing(RegressorMixin, BaseEstimator):
    """Holt-Winters per series of `entity` (one series without it): additive damped trend, additive season
    where two seasons of history hold one; it reads the target's own history and the times, no feature. The
    k-th distinct future time of a series is its k-th step ahead, as in the seasonal-naive forecast."""

    def __init__(self, time={time!r}, entity={entity!r}):
        self.time, self.entity = time, entity

    def _keys(self, X):
        return X[self.entity].astype(str).to_numpy() if self.entity else np.zeros(len(X), dtype=object)

    def fit(self, X, y):
        self.clock_, self.keys_, self.dated_ = clock(X[self.time]), self._keys(X), is_dated(X[self.time])
        self.values_ = pd.to_numeric(pd.Series(y), errors="coerce").to_numpy(dtype=float)
        return self

    def predict(self, X):
        future, keys = clock(X[self.time]), self._keys(X)
        season = season_length(np.concatenate([self.clock_, future]), self.dated_)
        known = np.isfinite(self.values_) & np.isfinite(self.clock_)
        predicted = np.full(len(X), np.nanmean(self.values_[known]) if known.any() else 0.0)
        for key in pd.unique(keys):
            rows = np.flatnonzero(keys == key)
            mine = (self.keys_ == key) & known
            if not mine.any():
                continue
            # One value per distinct time (the mean of rows sharing it), oldest first
            history = pd.Series(self.values_[mine]).groupby(self.clock_[mine]).mean().sort_index().to_numpy()
            step = pd.Series(future[rows]).rank(method="dense").fillna(1).to_numpy(dtype=int) - 1
            predicted[rows] = smoothed(history, int(step.max()) + 1, season)[step]
        return predicted


def smoothed(history, steps, season):
    """`steps` forecasts of `history` (one value per distinct time, oldest first) by Holt-Winters."""
    if len(history) < 4:
        return np.full(steps, history[-1])
    seasonal = "add" if season > 1 and len(history) >= 2 * season + 2 else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # The optimizer starts from statsmodels' default values, not from a brute-force grid search: as good
            # on the series tasks measured, at three fifths of the CPU
            fitted = ExponentialSmoothing(
                history, trend="add", damped_trend=True, seasonal=seasonal,
                seasonal_periods=season if seasonal else None, initialization_method="estimated",
            ).fit(use_brute=False)
            out = np.asarray(fitted.forecast(steps), dtype=float)
    except (ValueError, np.linalg.LinAlgError):
        out = np.full(steps, np.nan)
    return np.where(np.isfinite(out), out, history[-1])

'''


def smoothing_source(time: str, entity: str | None) -> str:
    """The source of the `Smoothing` forecaster a forecast's strong reference script defines (a candidate it
    chooses on the latest training rows, and the series ladder's `smoothing` rung alone). The time helpers are
    this module's own, copied in by source so the script reads times and seasons exactly as the bar does."""
    helpers = "\n\n".join(inspect.getsource(f) for f in (clock, _days, is_dated, season_length))
    return _SMOOTHING.format(seasons=SEASONS, helpers=helpers, time=time, entity=entity)
