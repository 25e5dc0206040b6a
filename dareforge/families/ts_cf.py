"""TS-CF: forecast a series from its timestamps (and series keys) alone; graded by skill over the best
model-free forecast (DARE-bench's Time-CF). Only where the understand stage found time alone forecasts it."""

from dareforge.families.family import SERIES, DareBenchSlot, Family, Grading, Words, predicts
from dareforge.families.timeseries import cf_tasks, cf_variant, forecasts_from_time
from dareforge.families.trivial import forecast_trivial
from dareforge.schema import PreparedSource, TaskType


def _applies(prepared: PreparedSource) -> bool:
    return predicts(TaskType.TIME_SERIES)(prepared) and forecasts_from_time(prepared)


FAMILY = Family(
    name="TS-CF",
    kind=TaskType.TIME_SERIES,
    grading=Grading.GOAL,
    metrics=("forecast-skill",),
    words=Words(
        asks="canonical forecasting",
        agent="future rows come with timestamps (and series keys) only",
        hub_category="time-series-forecasting",
        column="Time-CF",
    ),
    build=cf_tasks,
    applies=_applies,
    skips="understand found the timestamps alone do not forecast the series better than a model-free forecast",
    trivial=forecast_trivial,
    needs=SERIES,
    pass_bar=0.3,
    variant=cf_variant,
    shows_clean_data=1,
    dare_bench=DareBenchSlot("ts", 2),
)
