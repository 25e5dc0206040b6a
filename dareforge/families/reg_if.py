"""Reg-IF: build exactly the stated scikit-learn workflow for a number; graded by agreement with the reference
run's predictions within the configured tolerance (DARE-bench's instruction following)."""

from dareforge.families.family import MODELS, DareBenchSlot, Family, Grading, Words, predicts
from dareforge.families.tabular import if_tasks, if_variant
from dareforge.families.trivial import if_trivial
from dareforge.schema import TaskType

FAMILY = Family(
    name="Reg-IF",
    kind=TaskType.REGRESSION,
    grading=Grading.EXACT,
    metrics=("exact-match", "allclose"),
    words=Words(
        asks="regression, instruction following",
        agent="build exactly the stated scikit-learn workflow",
        hub_category="tabular-regression",
    ),
    build=if_tasks,
    applies=predicts(TaskType.REGRESSION),
    trivial=if_trivial,
    needs=MODELS,
    variant=if_variant,
    certificate_runs=2,
    shows_clean_data=2,
    dare_bench=DareBenchSlot("reg", 1),
)
