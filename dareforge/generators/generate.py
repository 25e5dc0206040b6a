"""The generate stage: turn each prepared framing into IF, MM and time-series tasks with seeded references, and
each source's first framing into question tasks (QA on its table, Lake on a folder of files with distractors
from other sources).

A task is written as `tasks/<id>/public/` (what an agent sees), `tasks/<id>/private/` (answers, reference code
and outputs) and `tasks/<id>/_MANIFEST.json` (checksums and the task record), the manifest last. The id hashes
everything that defines the task, so a task whose manifest exists is finished and is never rebuilt.
"""

from __future__ import annotations

import logging
import time

from dareforge.context import RunContext
from dareforge.errors import machine_at_fault
from dareforge.generators import tabular, timeseries
from dareforge.generators.prepare import load_prepared, prepare_failure
from dareforge.generators.questions.lake import DistractorPool, lake_tasks
from dareforge.generators.questions.qa import qa_tasks
from dareforge.generators.taskio import Runners, TaskWriter, read_frames
from dareforge.queries import framed_source_ids
from dareforge.report import StageReport
from dareforge.schema import PreparedSource, Source, Task, TaskType

log = logging.getLogger(__name__)


def generate(ctx: RunContext, source_ids: list[str] | None = None) -> StageReport:
    """Generate the tasks of the sources (default: every framed one). The report's counts: candidate tasks per
    family; its outcomes: `rejected` (task -> why its builder rejected it); failures: per source, framing or
    family and seed; reused: tasks found finished; seconds: its own wall time, `seconds_in["references"]` the
    CPU seconds of the references it ran."""
    started = time.perf_counter()
    report = StageReport("generate")
    every = framed_source_ids(ctx)
    ids = source_ids if source_ids is not None else every
    # Lake distractors come from the other sources of the whole store, whichever sources this run generates.
    framings = DistractorPool.framings(ctx, every)
    runners = Runners.start(ctx.config.generate.reference_timeout_s)
    try:
        with ctx.progress() as progress:
            bar = progress.add_task("generate", total=len(ids), item="")
            for source_id in ids:
                progress.update(bar, item=source_id)
                with ctx.source_lock(source_id):
                    _generate_source(
                        ctx, source_id, runners, report, DistractorPool(ctx, framings, source_id)
                    )
                progress.advance(bar)
    finally:
        runners.close()
    report.seconds = time.perf_counter() - started
    if not sum(report.counts.values()):
        rejected = "select id, reject_reason from tasks where status = 'rejected'"
        report.nothing_left = (
            f"no task to validate: {len(report.labels('rejected'))} rejected, {len(report.failures)} failed "
            f'(the reasons are above; every rejected one: dareforge sql "{rejected}")'
        )
    return report


def _generate_source(
    ctx: RunContext, source_id: str, runners: Runners, report: StageReport, lake_pool: DistractorPool
) -> None:
    framings = sorted(load_prepared(ctx, source_id), key=lambda p: p.framing)
    if not framings:
        report.failures[source_id] = _not_prepared(ctx, source_id)
        return
    tasks = []
    for prepared in framings:
        writer = TaskWriter(ctx, prepared, report)
        tasks += _guarded(
            report, f"{source_id}/{prepared.framing}", build_source_tasks, ctx, prepared, writer, runners
        )
    # Questions on the first framing only: a second framing's table is the same data split another way.
    first = framings[0]
    writer = TaskWriter(ctx, first, report)
    tasks += _guarded(
        report, f"{source_id}/questions", build_question_tasks, ctx, first, writer, runners, lake_pool
    )
    for task in tasks:
        report.counts[task.family] += task.status == "candidate"
        if task.status == "rejected":
            report.add("rejected", task.id, task.reject_reason or "")
    if tasks and ctx.store.write_records(source_id, tasks):
        report.written.append(ctx.store.table_key(Task.table, source_id))


def _guarded(report: StageReport, label: str, build, *args) -> list[Task]:
    """The tasks `build` makes, or none with the failure recorded: no table, however odd, stops the stage for
    the other sources (the traceback goes to the debug log)."""
    try:
        return build(*args)
    except Exception as exc:  # any failure of one source's data is that source's alone
        if machine_at_fault(exc):
            raise
        report.failures[label] = f"{type(exc).__name__}: {exc}"
        log.warning("generate %s failed: %s", label, report.failures[label])
        log.debug("generate %s failed", label, exc_info=True)
        return []


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
    if prepared.questions_only:
        return []  # no learnable target: its questions come from `build_question_tasks`
    frames = read_frames(ctx, prepared)
    if prepared.task_type == TaskType.TIME_SERIES:
        tasks = timeseries.ts_tasks(ctx, prepared, frames, writer, runners)
    else:
        seeds = [cfg.seed + i for i in range(cfg.if_variants)]
        tasks = [tabular.if_task(ctx, prepared, frames, writer, runners, seed) for seed in seeds]
        tasks.append(tabular.mm_task(ctx, prepared, frames, writer, runners))
    return [t for t in tasks if t is not None]


def build_question_tasks(
    ctx: RunContext,
    prepared: PreparedSource,
    writer: TaskWriter,
    runners: Runners,
    lake_pool: DistractorPool,
) -> list[Task]:
    sources = ctx.store.read_partition(Source, prepared.source_id)
    title = sources[-1].title if sources else prepared.source_id
    train = read_frames(ctx, prepared)[0]
    tasks = qa_tasks(ctx, prepared, train, writer, runners, title)
    return tasks + lake_tasks(ctx, prepared, lake_pool, writer, runners, title)
