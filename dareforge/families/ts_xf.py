"""TS-XF: forecast a series whose future rows come with every exogenous feature; graded by skill over the best
model-free forecast (DARE-bench's Time-XF)."""

from dareforge.families.family import SERIES, DareBenchSlot, Family, Grading, Words, predicts
from dareforge.families.timeseries import xf_tasks, xf_variant
from dareforge.families.trivial import forecast_trivial
from dareforge.schema import TaskType

FAMILY = Family(
    name="TS-XF",
    kind=TaskType.TIME_SERIES,
    grading=Grading.GOAL,
    metrics=("forecast-skill",),
    words=Words(
        asks="forecasting with exogenous features",
        agent="future rows come with every feature but the target",
        hub_category="time-series-forecasting",
        column="Time-XF",
    ),
    build=xf_tasks,
    applies=predicts(TaskType.TIME_SERIES),
    trivial=forecast_trivial,
    needs=SERIES,
    pass_bar=0.6,
    variant=xf_variant,
    dare_bench=DareBenchSlot("ts", 1),
)
