"""The generate stage: every registered family that applies builds its tasks on each prepared framing (IF, MM
and time-series tasks with seeded references), and question families on each source's first framing (QA on its
table, Lake on a folder of files with distractors from other sources).

A task is written as `tasks/<id>/public/` (what an agent sees), `tasks/<id>/private/` (answers, reference code
and outputs) and `tasks/<id>/_MANIFEST.json` (checksums and the task record), the manifest last. The id hashes
everything that defines the task, so a task whose manifest exists is finished and is never rebuilt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from rich.markup import escape

from dareforge.context import RunContext
from dareforge.errors import machine_at_fault
from dareforge.families.family import Build
from dareforge.families.registry import families, skip_reason
from dareforge.generators.prepare import load_prepared, prepare_failure
from dareforge.generators.questions.folder_questions import DistractorPool
from dareforge.generators.taskio import Runners, TaskWriter
from dareforge.kept import kept
from dareforge.queries import framed_source_ids
from dareforge.report import SHOWN, StageReport
from dareforge.schema import PreparedSource, Task

log = logging.getLogger(__name__)


def generate(ctx: RunContext, source_ids: list[str] | None = None) -> StageReport:
    """Generate the tasks of the sources (default: every framed one). The report's counts: candidate tasks per
    family; its outcomes: `rejected` (task -> why its builder rejected it); failures: per source, framing or
    family and seed; reused: tasks found finished; seconds: its own wall time, `seconds_in["references"]` the
    CPU seconds of the references it ran."""
    started = time.perf_counter()
    report = StageReport("generate")
    every, framings = _whole_store(ctx)
    ids = source_ids if source_ids is not None else every
    timeouts = (ctx.config.generate.reference_timeout_s, ctx.config.generate.reference_ready_timeout_s)
    runners = kept(("runners", timeouts), lambda: Runners.start(*timeouts), Runners.close)
    for source_id in ctx.each_source("generate", ids):
        _generate_source(ctx, source_id, runners, report, DistractorPool(ctx, framings, source_id))
    report.seconds = time.perf_counter() - started
    return finish_report(report)


_seen: dict[tuple[str, str | None], tuple[list[str], dict[str, int]]] = {}


def _whole_store(ctx: RunContext) -> tuple[list[str], dict[str, int]]:
    """The framed sources and the prepared framings of each: Lake distractors come from the other sources of the
    whole store, whichever sources this call generates. Read once per state of the tables they come from: a
    worker of `dareforge run` calls generate once per source, and at a few thousand sources each read costs
    about half a CPU-second."""
    state = (ctx.store.root, ctx.store.tables_state("filter_decisions", "framings", "prepared"))
    if state[1] is None or state not in _seen:
        every = framed_source_ids(ctx)
        _seen.clear()
        _seen[state] = every, DistractorPool.framings(ctx, every)
    return _seen[state]


def finish_report(report: StageReport) -> StageReport:
    """The summary lines, and why nothing is left when no task was generated (also for a report merged from
    several processes)."""
    report.lines = summary_lines(report)
    if not sum(report.counts.values()):
        rejected = "select id, reject_reason from tasks where status = 'rejected'"
        report.nothing_left = (
            f"no task to validate: {len(report.labels('rejected'))} rejected, {len(report.failures)} failed "
            f'(the reasons are above; every rejected one: dareforge sql "{rejected}")'
        )
    return report


def summary_lines(report: StageReport) -> list[str]:
    counts = ", ".join(f"{f.name} {report.counts.get(f.name, 0)}" for f in families())
    rejected = report.outcomes.get("rejected", {})
    skipped = len(report.labels("skipped"))
    lines = [
        f"generate: {counts}; {len(rejected)} rejected, {len(report.failures)} failed, {skipped} family skips, "
        f"{report.reused} reused; {report.seconds:.1f}s "
        f"({report.seconds_in.get('references', 0.0):.1f}s in references)"
    ]
    lines += [f"  [yellow]rejected[/] {escape(k)}: {escape(r)}" for k, r in list(rejected.items())[:SHOWN]]
    lines += [f"  [red]failed[/] {escape(k)}: {escape(r)}" for k, r in list(report.failures.items())[:SHOWN]]
    return lines


def _generate_source(
    ctx: RunContext, source_id: str, runners: Runners, report: StageReport, others: DistractorPool
) -> None:
    framings = sorted(load_prepared(ctx, source_id), key=lambda p: p.framing)
    if not framings:
        report.failures[source_id] = _not_prepared(ctx, source_id)
        return
    # The first framing's frames and title, read once for its own families and the first-framing ones.
    first_read: dict[str, object] = {}

    def builds(prepared: PreparedSource, per_framing: bool, read: dict[str, object]) -> list[Build]:
        writer = TaskWriter(ctx, prepared, report)
        chosen = [f for f in families() if f.per_framing == per_framing]
        return [Build(ctx, prepared, writer, runners, f, others, read=read) for f in chosen]

    tasks = []
    for prepared in framings:
        read = first_read if prepared is framings[0] else {}
        tasks += _guarded(
            report, f"{source_id}/{prepared.framing}", build_tasks, builds(prepared, True, read)
        )
    # First-framing families (questions) on the first framing only: a second framing's table is the same data
    # split another way.
    tasks += _guarded(report, f"{source_id}/questions", build_tasks, builds(framings[0], False, first_read))
    _record_skips(ctx, source_id, framings, report)
    for task in tasks:
        report.counts[task.family] += task.status == "candidate"
        if task.status == "rejected":
            report.add("rejected", task.id, task.reject_reason or "")
    if tasks and ctx.store.write_records(source_id, tasks):
        report.written.append(ctx.store.table_key(Task.table, source_id))


def _record_skips(
    ctx: RunContext, source_id: str, framings: list[PreparedSource], report: StageReport
) -> None:
    """Every family that poses no task on any of the source's framings, with why (outcome `skipped`, labelled
    `source/family`): a small table's prediction families say it is too small for them."""
    for family in families():
        candidates = framings if family.per_framing else framings[:1]
        reasons = [skip_reason(family, prepared, ctx.config) for prepared in candidates]
        if all(reasons):
            report.add("skipped", f"{source_id}/{family.name}", "; ".join(dict.fromkeys(reasons)))


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


def build_tasks(builds: Sequence[Build]) -> list[Task]:
    """The tasks of every build whose family applies to its framing, in order."""
    tasks: list[Task] = []
    for build in builds:
        if build.family.applies(build.prepared):
            tasks += [t for t in build.family.build(build) if t is not None]
    return tasks
