"""Class-MM: predict a label with any model; graded by macro-F1 on the held-out answers (DARE-bench's ML
modelling)."""

from dareforge.families.family import MODELS, DareBenchSlot, Family, Grading, Words, predicts
from dareforge.families.tabular import mm_tasks, mm_variant
from dareforge.families.trivial import mm_trivial
from dareforge.schema import TaskType

FAMILY = Family(
    name="Class-MM",
    kind=TaskType.CLASSIFICATION,
    grading=Grading.GOAL,
    metrics=("macro-f1",),
    words=Words(
        asks="classification, ML modelling",
        agent="any model; only the predictions count",
        hub_category="tabular-classification",
    ),
    build=mm_tasks,
    applies=predicts(TaskType.CLASSIFICATION),
    trivial=mm_trivial,
    needs=MODELS,
    pass_bar=0.8,
    variant=mm_variant,
    dare_bench=DareBenchSlot("class", 2),
)
