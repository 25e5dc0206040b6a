"""The solver ladder of a forecast: rungs that differ in kind, not only in the model behind one pipeline.

On a series the tabular ladder's rungs above the linear one each choose between their model and the linear
trend-and-season one on the latest training rows (as the strong reference does), so on a trending seasonal
series every rung picks the same model and they tie: the ladder measured its own sameness. A forecasting
practitioner's baselines (statsforecast's and sktime's SeasonalNaive, AutoETS, Theta) are instead models of
different kinds. The series ladder, weakest first:

- `trivial`: the best of the model-free forecasts (training mean, last value, seasonal naive) on the test
  rows, the task's bar (seasonal naive is there already, so it is no rung of its own);
- `smoothing`: Holt-Winters exponential smoothing per series (statsmodels' `ExponentialSmoothing`: additive
  damped trend, additive season when two seasons of history hold one), on the target's own history only: the
  strong reference's smoothing candidate alone (`forecast.smoothing_source`).
  This is ETS without the model search (AutoETS's search would cost a fit per model form); Theta is simple
  exponential smoothing with drift, which the damped trend covers, so it is left out;
- `linear`: the strong reference's linear trend-and-season model (time, calendar parts and every feature the
  task gives);
- `strong`: the strong reference itself (gradient boosting, the linear model or smoothing, whichever forecasts
  the latest training rows best: a forecaster tries each), graded on its stored predictions at no cost.

The tree and early-stopped rungs are not on it: on a series they choose the same model as `strong` or
`linear` and so add only ties and CPU seconds.
"""

from __future__ import annotations

from dareforge.reference_solutions.reference_code import SMOOTHING_ONLY, StrongSpec, strong_reference_code


def smoothing_code(spec: StrongSpec) -> str:
    """The `smoothing` rung's standalone script: the strong reference's script with its smoothing candidate
    alone (per series of `spec.entity`, one series without it)."""
    return strong_reference_code(spec, only=SMOOTHING_ONLY)
