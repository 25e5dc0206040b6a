"""Class-IF: build exactly the stated scikit-learn workflow for a label; graded by exact match against the
reference run's predictions (DARE-bench's instruction following)."""

from dareforge.families.family import MODELS, DareBenchSlot, Family, Grading, Words, predicts
from dareforge.families.tabular import if_tasks, if_variant
from dareforge.families.trivial import if_trivial
from dareforge.schema import TaskType

FAMILY = Family(
    name="Class-IF",
    kind=TaskType.CLASSIFICATION,
    grading=Grading.EXACT,
    metrics=("exact-match", "allclose"),
    words=Words(
        asks="classification, instruction following",
        agent="build exactly the stated scikit-learn workflow",
        hub_category="tabular-classification",
    ),
    build=if_tasks,
    applies=predicts(TaskType.CLASSIFICATION),
    trivial=if_trivial,
    needs=MODELS,
    variant=if_variant,
    certificate_runs=2,
    shows_clean_data=2,
    dare_bench=DareBenchSlot("class", 1),
)
