"""Reg-MM: predict a number with any model; graded by R² clipped at 0 on the held-out answers (DARE-bench's
ML modelling)."""

from dareforge.families.family import MODELS, DareBenchSlot, Family, Grading, Words, predicts
from dareforge.families.tabular import mm_tasks, mm_variant
from dareforge.families.trivial import mm_trivial
from dareforge.schema import TaskType

FAMILY = Family(
    name="Reg-MM",
    kind=TaskType.REGRESSION,
    grading=Grading.GOAL,
    metrics=("clipped-r2",),
    words=Words(
        asks="regression, ML modelling",
        agent="any model; only the predictions count",
        hub_category="tabular-regression",
    ),
    build=mm_tasks,
    applies=predicts(TaskType.REGRESSION),
    trivial=mm_trivial,
    needs=MODELS,
    pass_bar=0.7,
    variant=mm_variant,
    dare_bench=DareBenchSlot("reg", 2),
)
