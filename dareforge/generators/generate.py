"""The generate stage: turn each prepared framing into IF, MM and time-series tasks with seeded references.

A task is written as `tasks/<id>/public/` (what an agent sees), `tasks/<id>/private/` (answers, reference code
and outputs) and `tasks/<id>/_MANIFEST.json` (checksums and the task record), the manifest last. The id hashes
everything that defines the task, so a task whose manifest exists is finished and is never rebuilt.
"""

from __future__ import annotations

import time

from dareforge.context import RunContext
from dareforge.generators import tabular, timeseries
from dareforge.generators.prepare import load_prepared, prepare_failure
from dareforge.generators.taskio import GenerateReport, Runners, TaskWriter, read_frames
from dareforge.schema import PreparedSource, Task, TaskType
from dareforge.understand.stage import framed_source_ids


def generate(ctx: RunContext, source_ids: list[str] | None = None) -> GenerateReport:
    started = time.perf_counter()
    report = GenerateReport()
    ids = source_ids if source_ids is not None else framed_source_ids(ctx)
    runners = Runners.start(ctx.config.generate.reference_timeout_s)
    try:
        with ctx.progress() as progress:
            bar = progress.add_task("generate", total=len(ids), item="")
            for source_id in ids:
                progress.update(bar, item=source_id)
                with ctx.source_lock(source_id):
                    _generate_source(ctx, source_id, runners, report)
                progress.advance(bar)
    finally:
        runners.close()
    report.wall_seconds = time.perf_counter() - started
    return report


def _generate_source(ctx: RunContext, source_id: str, runners: Runners, report: GenerateReport) -> None:
    framings = load_prepared(ctx, source_id)
    if not framings:
        report.failures[source_id] = _not_prepared(ctx, source_id)
        return
    tasks = []
    for prepared in framings:
        writer = TaskWriter(ctx, prepared, report)
        tasks += build_source_tasks(ctx, prepared, writer, runners)
    for task in tasks:
        report.families[task.family] += task.status == "candidate"
        if task.status == "rejected":
            report.rejected[task.id] = task.reject_reason or ""
    if tasks and ctx.store.write_records(source_id, tasks):
        report.written.append(ctx.store.table_key(Task.table, source_id))


def _not_prepared(ctx: RunContext, source_id: str) -> str:
    failure = prepare_failure(ctx, source_id)
    if failure is None:
        return "not prepared; run `dareforge prepare` first"
    reason = failure.reason.removeprefix(f"{source_id}: ")
    return f"prepare failed for this source: {reason} (then run `dareforge prepare` again)"


def build_source_tasks(
    ctx: RunContext, prepared: PreparedSource, writer: TaskWriter, runners: Runners
) -> list[Task]:
    cfg = ctx.config.generate
    frames = read_frames(ctx, prepared)
    if prepared.task_type == TaskType.TIME_SERIES:
        tasks = timeseries.ts_tasks(ctx, prepared, frames, writer, runners)
    else:
        seeds = [cfg.seed + i for i in range(cfg.if_variants)]
        tasks = [tabular.if_task(ctx, prepared, frames, writer, runners, seed) for seed in seeds]
        tasks.append(tabular.mm_task(ctx, prepared, frames, writer, runners))
    return [t for t in tasks if t is not None]
