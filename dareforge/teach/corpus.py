"""Which rows of an SFT export a proxy model trains on, and the proof that nothing of the test side reaches them.

The rows are the `tools` config's train split, of the variant's kinds of trajectory (`gold`, `sampled`: the
first word of a row's `source`), a sample seeded by `teach.seed` when `teach.examples` is smaller. Before a model
sees them, `check_disjoint` refuses a corpus whose tasks share a source (or a task) with the evaluated tasks:
the benchmark's split is grouped by source, and a corpus that broke that would measure memorisation.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dareforge.errors import DareforgeError
from dareforge.families.registry import family_of
from dareforge.schema import Task

CONFIG = "tools"
TRAIN = "train"
VARIANTS: dict[str, tuple[str, ...]] = {"gold": ("gold",), "gold+sampled": ("gold", "sampled")}
"""Corpus variant -> the kinds of trajectory it keeps (DataComp: the recipe is fixed, only the data varies)."""


class TeachError(DareforgeError):
    pass


def kind_of(row: Mapping[str, Any]) -> str:
    """`gold` or `sampled`: the export's `source` column is `<kind>:<endpoint>/<model>`."""
    return str(row["source"]).partition(":")[0]


def train_rows(
    rows: Iterable[Mapping[str, Any]], variant: str, examples: int | None, seed: int
) -> list[Mapping[str, Any]]:
    """The variant's train-split rows, sorted by id; at most `examples` of them, a sample seeded by `seed`."""
    if variant not in VARIANTS:
        raise TeachError(f"unknown corpus variant {variant!r} (teach.variants): use {', '.join(VARIANTS)}")
    kinds = VARIANTS[variant]
    chosen = sorted(
        (r for r in rows if r["split"] == TRAIN and kind_of(r) in kinds), key=lambda r: str(r["id"])
    )
    if examples is not None and len(chosen) > examples:
        chosen = sorted(random.Random(seed).sample(chosen, examples), key=lambda r: str(r["id"]))
    return chosen


def check_disjoint(
    rows: Sequence[Mapping[str, Any]], tasks_by_id: Mapping[str, Task], test: Sequence[Task]
) -> None:
    """Raise TeachError when a training row is of an evaluated task, or of a task from an evaluated source."""
    tested_ids = {t.id for t in test}
    tested_sources = {t.source_id for t in test}
    for row in rows:
        task_id = str(row["task_id"])
        if task_id in tested_ids:
            raise TeachError(
                f"training row {row['id']} is of evaluated task {task_id}: the corpus leaks the test"
            )
        task = tasks_by_id.get(task_id)
        if task is None:
            raise TeachError(
                f"training row {row['id']} is of task {task_id}, which its release does not hold; re-export the "
                "corpus from that release (`dareforge export --format sft`)"
            )
        if task.source_id in tested_sources:
            raise TeachError(
                f"training row {row['id']} (task {task_id}) comes from source {task.source_id}, which the evaluated "
                "tasks come from too: train and test must come from disjoint sources"
            )


def sample_tasks(tasks: Sequence[Task], per_family: int | None, seed: int) -> list[Task]:
    """At most `per_family` of `tasks` per family, a sample seeded by `seed`; sorted as `evaluate` plays them."""
    by_family: dict[str, list[Task]] = {}
    for t in sorted(tasks, key=lambda t: t.id):
        by_family.setdefault(family_of(t).name, []).append(t)
    chosen: list[Task] = []
    for family, group in sorted(by_family.items()):
        if per_family is not None and len(group) > per_family:
            group = random.Random(f"{seed}:{family}").sample(group, per_family)
        chosen += group
    return sorted(chosen, key=lambda t: (t.family, t.id))
