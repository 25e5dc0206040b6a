"""The solver ladder of a forecast: rungs that differ in kind, not only in the model behind one pipeline.

On a series the tabular ladder's rungs above the linear one each choose between their model and the linear
trend-and-season one on the latest training rows (as the strong reference does), so on a trending seasonal
series every rung picks the same model and they tie: the ladder measured its own sameness. A forecasting
practitioner's baselines (statsforecast's and sktime's SeasonalNaive, AutoETS, Theta) are instead models of
different kinds. The series ladder, weakest first:

- `trivial`: the best of the model-free forecasts (training mean, last value, seasonal naive) on the test
  rows, the task's bar (seasonal naive is there already, so it is no rung of its own);
- `smoothing`: Holt-Winters exponential smoothing per series (statsmodels' `ExponentialSmoothing`: additive
  damped trend, additive season when two seasons of history hold one), on the target's own history only.
  This is ETS without the model search (AutoETS's search would cost a fit per model form); Theta is simple
  exponential smoothing with drift, which the damped trend covers, so it is left out;
- `linear`: the strong reference's linear trend-and-season model (time, calendar parts and every feature the
  task gives);
- `boosted`: the strong reference itself (gradient boosting or the linear model, whichever forecasts the
  latest training rows better), graded on its stored predictions at no cost.

The tree and early-stopped rungs are not on it: on a series they choose the same model as `boosted` or
`linear` and so add only ties and CPU seconds.
"""

from __future__ import annotations

import inspect

from dareforge.reference_solutions import forecast
from dareforge.reference_solutions.reference_code import PREDICTIONS, StrongSpec

_SMOOTHING = """import warnings

import numpy as np
import pandas as pd
from statsmodels.tsa.holtwinters import ExponentialSmoothing

SEASONS = {seasons!r}
{helpers}

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
time, entity = {time!r}, {entity!r}
train_clock, test_clock = clock(train[time]), clock(test[time])
season = season_length(np.concatenate([train_clock, test_clock]), is_dated(train[time]))


def smoothed(history, steps):
    \"\"\"`steps` forecasts of `history` (one value per distinct time, oldest first) by Holt-Winters.\"\"\"
    if len(history) < 4:
        return np.full(steps, history[-1])
    seasonal = "add" if season > 1 and len(history) >= 2 * season + 2 else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = ExponentialSmoothing(
                history, trend="add", damped_trend=True, seasonal=seasonal,
                seasonal_periods=season if seasonal else None, initialization_method="estimated",
            ).fit()
            out = np.asarray(fitted.forecast(steps), dtype=float)
    except (ValueError, np.linalg.LinAlgError):
        out = np.full(steps, np.nan)
    return np.where(np.isfinite(out), out, history[-1])


keys_train = train[entity].astype(str).to_numpy() if entity else np.zeros(len(train), dtype=object)
keys_test = test[entity].astype(str).to_numpy() if entity else np.zeros(len(test), dtype=object)
out = test[{keys!r}].copy()
for target in {targets!r}:
    values = pd.to_numeric(train[target], errors="coerce").to_numpy(dtype=float)
    known = np.isfinite(values) & np.isfinite(train_clock)
    predicted = np.full(len(test), np.nanmean(values[known]) if known.any() else 0.0)
    for key in pd.unique(keys_test):
        rows = np.flatnonzero(keys_test == key)
        mine = (keys_train == key) & known
        if not mine.any():
            continue
        # One value per distinct time (the mean of rows sharing it), oldest first
        history = pd.Series(values[mine]).groupby(train_clock[mine]).mean().sort_index().to_numpy()
        # The k-th distinct future time of the series is the k-th step ahead
        step = pd.Series(test_clock[rows]).rank(method="dense").fillna(1).to_numpy(dtype=int) - 1
        predicted[rows] = smoothed(history, int(step.max()) + 1)[step]
    out[target] = predicted
out.to_csv("{predictions}", index=False)
"""


def smoothing_code(spec: StrongSpec, entity: str | None) -> str:
    """The `smoothing` rung's standalone script: Holt-Winters per series of `entity` (one series without it),
    stepping through the test rows' distinct times as the seasonal-naive forecast does. The time helpers are
    `forecast`'s own, copied in by source so the script reads times and seasons exactly as the bar does."""
    helpers = "\n\n".join(
        inspect.getsource(f)
        for f in (forecast.clock, forecast._days, forecast.is_dated, forecast.season_length)
    )
    return _SMOOTHING.format(
        seasons=forecast.SEASONS,
        helpers=helpers,
        time=spec.time_column,
        entity=entity,
        keys=list(spec.output_keys),
        targets=list(spec.targets),
        predictions=PREDICTIONS,
    )
