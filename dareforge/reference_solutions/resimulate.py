"""Re-run stored IF references on this machine's stack and report which tasks' predictions changed.

IF reference predictions depend on library versions (DARE-bench asks its users to regenerate them); this
shows a consumer which tasks still match on their stack, without rewriting anything in the store.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from dareforge.context import RunContext
from dareforge.reference_solutions.graders import grade
from dareforge.reference_solutions.reference_code import PREDICTIONS, REFERENCE_PREDICTIONS
from dareforge.reference_solutions.reference_runner import ReferenceRunner, package_versions
from dareforge.schema import Task


@dataclass(frozen=True)
class Resimulation:
    task_id: str
    family: str
    matches: bool
    score: float
    detail: str
    stack_differs: list[str]


def resimulate(ctx: RunContext, task_ids: list[str] | None = None) -> list[Resimulation]:
    here = set(package_versions())
    tasks = [
        t
        for t in ctx.store.iter_records(Task)
        if _reproduces(t) and t.status == "candidate" and (task_ids is None or t.id in task_ids)
    ]
    results = []
    limits = ctx.config.generate
    with (
        ReferenceRunner(1, limits.reference_timeout_s, limits.reference_ready_timeout_s) as runner,
        ctx.progress() as progress,
    ):
        bar = progress.add_task("resimulate", total=len(tasks), item="")
        for task in sorted(tasks, key=lambda t: t.id):
            progress.update(bar, item=task.id)
            results.append(_one(ctx, runner, task, sorted(set(task.package_versions) - here)))
            progress.advance(bar)
    return results


def _reproduces(task: Task) -> bool:
    """A task graded by reproducing its reference run: it keeps that run's predictions privately."""
    return any(f.name == REFERENCE_PREDICTIONS for f in task.private_files)


def _one(ctx: RunContext, runner: ReferenceRunner, task: Task, stack_differs: list[str]) -> Resimulation:
    folder = ctx.scratch_dir(f"resim-{task.id}")
    try:
        for f in task.public_files:
            target = folder / f.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(ctx.store.read_bytes(f"tasks/{task.id}/public/{f.name}"))
        code = ctx.store.read_bytes(f"tasks/{task.id}/private/reference.py").decode()
        stored = folder.parent / f"{folder.name}-stored.csv"
        stored.write_bytes(ctx.store.read_bytes(f"tasks/{task.id}/private/{REFERENCE_PREDICTIONS}"))
        outcome = runner.run(code, folder)
        if not outcome.ok:
            return Resimulation(
                task.id, task.family, False, 0.0, f"reference failed: {outcome.error}", stack_differs
            )
        result = grade(task.metric, folder / PREDICTIONS, stored)
        detail = result.error or (
            "same predictions" if result.score == 1.0 else f"{result.score:.4f} of rows match"
        )
        return Resimulation(task.id, task.family, result.score == 1.0, result.score, detail, stack_differs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        (folder.parent / f"{folder.name}-stored.csv").unlink(missing_ok=True)
