"""The validate stage: run every check on every task, store the findings, then gate and report.

Findings go to the `validations` table (one partition per source), verdicts to `verdicts`, and an HTML
report (with great-expectations Data Docs) to `reports/validation/`. A source whose tasks were all checked
with the current checks version is not checked again; run-wide checks (duplicates) always re-run, since a
new source can make an old one a duplicate.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from dareforge.context import RunContext
from dareforge.errors import machine_at_fault
from dareforge.generators.prepare import load_prepared, prepared_of
from dareforge.kept import kept
from dareforge.queries import task_source_ids
from dareforge.report import SHOWN, StageReport
from dareforge.schema import PreparedSource, Task, Validation, Verdict
from dareforge.validators import discrimination, duplicates, leakage, sensitivity, solvability, trivial
from dareforge.validators import validation_report as html_report
from dareforge.validators.check import Check, Finding, RunCheck, TaskView
from dareforge.validators.gate import gate

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from dareforge.validators.expectations import TaskRecordExpectations

log = logging.getLogger(__name__)
REPORT_DIR = "reports/validation"
TASK_CHECKS: tuple[Check, ...] = (
    *leakage.TASK_CHECKS,
    *duplicates.TASK_CHECKS,
    *solvability.TASK_CHECKS,
    *trivial.TASK_CHECKS,
    *sensitivity.TASK_CHECKS,
)
RUN_CHECKS: tuple[RunCheck, ...] = (
    *leakage.RUN_CHECKS,
    *duplicates.RUN_CHECKS,
    *solvability.RUN_CHECKS,
    *trivial.RUN_CHECKS,
)


def task_checks(ctx: RunContext) -> tuple[Check, ...]:
    """The per-task checks this run makes: the solver ladder (`discrimination`) only with a CPU budget for it,
    `validate.ladder_cpu_seconds` (0 turns it off)."""
    ladder = discrimination.TASK_CHECKS if ctx.config.validate_.ladder_cpu_seconds > 0 else ()
    return (*TASK_CHECKS, *ladder)


def checks_version(task_check_names: list[str], run_checks: tuple[RunCheck, ...], suites: str) -> str:
    return f"{suites}|" + ",".join(sorted([*task_check_names, *(c.name for c in run_checks)]))


def task_view(
    ctx: RunContext, task: Task, prepared: list[PreparedSource] | None = None, shared: dict | None = None
) -> TaskView:
    """What the checks see of a task; `prepared`: its source's prepared records when the caller read them;
    `shared`: what checks derived from the files of the source's other tasks (`TaskView.shared`)."""
    prepared = prepared_of(ctx, task, prepared)
    shared = {} if shared is None else shared
    if ctx.store.is_local:
        return TaskView(task, prepared, ctx.store.local_path(f"tasks/{task.id}"), shared)
    # A cache shared by the processes on this machine (task files never change under a task id): each file is
    # written under a unique temp name and renamed, so a reader never sees a half-written one.
    folder = ctx.work_dir / "validate" / task.id
    for side, files in (("public", task.public_files), ("private", task.private_files)):
        for f in files:
            target = folder / side / f.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f".tmp-{uuid.uuid4().hex}-{target.name}")
                tmp.write_bytes(ctx.store.read_bytes(f"tasks/{task.id}/{side}/{f.name}"))
                tmp.replace(target)
    return TaskView(task, prepared, folder, shared)


def validate(ctx: RunContext, task_ids: list[str] | None = None, force: bool = False) -> StageReport:
    """Check the tasks (all by default) and gate them; `force` re-runs checks whose findings are stored.

    The report is the gate's (outcomes `accepted` and `rejected` with the reasons, rejections per check) with
    the checking added: outcome `checked` (tasks checked now), reused (tasks whose stored findings held), the
    findings, verdicts and HTML report written, `seconds_in["gx context"]` (creating the great-expectations
    context), and its own wall seconds."""
    # Run-wide checks, the verdicts and the report cover every task: one validation at a time per store (a
    # second one waits, then reuses the stored findings).
    with ctx.store.lock("validate"):
        return _validate(ctx, task_ids, force)


class TaskChecker:
    """The per-task checks of this run (great-expectations suites, leakage, duplicates, solvability, the ladder)
    and the version their findings are stored under; the GX context is this process's (`kept`)."""

    def __init__(self, ctx: RunContext):
        from dareforge.validators import expectations

        self.ctx = ctx
        self.checks = task_checks(ctx)
        gx_names = [cls.name for cls in expectations.CHECK_CLASSES]
        self.names = {*gx_names, *(c.name for c in self.checks)}
        self.version = checks_version(sorted(self.names), RUN_CHECKS, expectations.SUITES_VERSION)
        self.gx: expectations.GXRun | None = None
        self.context_seconds = 0.0

    def check_all(self, views: Iterable[TaskView]) -> dict[str, dict[str, Finding]]:
        """The findings of the tasks checked together (a source's), by task id. The views are taken one at a
        time (from a generator, only one task's frames are held at once); a GX validation of byte-identical files
        is made once (`_FileCheck`), and the task-record suites run once for all the tasks
        (`TaskRecordExpectations`)."""
        from dareforge.validators import expectations

        if self.gx is None:
            # Callers call this only when some task needs checking: creating a GX context costs seconds.
            started = time.perf_counter()
            self.gx = kept(("gx", expectations.suites_key()), expectations.GXRun)
            self.context_seconds = time.perf_counter() - started
        checks = (*self.gx.file_checks(), *self.checks)
        found: dict[str, dict[str, Finding]] = {}
        tasks: list[Task] = []
        for view in views:
            found[view.task.id] = {check.name: _run_check(check, view, self.ctx) for check in checks}
            tasks.append(view.task)
        for task_id, finding in _run_batched(self.gx.records, tasks).items():
            found[task_id][self.gx.records.name] = finding
        return found

    def complete(self, stored: dict[str, Validation]) -> bool:
        """Whether a task's stored findings hold every per-task check of this run."""
        return self.names <= stored.keys()


def check(ctx: RunContext, source_ids: list[str] | None = None) -> StageReport:
    """The per-task checks of each source's tasks (default: every source with tasks), stored per source; the
    refresh maps it over sources before `validate`, which then only adds the run-wide checks, the verdicts and
    the report. The report's outcomes: `checked` (tasks checked now); reused: tasks whose findings held."""
    ids = source_ids if source_ids is not None else task_source_ids(ctx)
    report = StageReport("check")
    checker = TaskChecker(ctx)
    for source_id in ctx.each_source("check", ids):
        _check_source(ctx, checker, source_id, report)
    report.seconds_in["gx context"] = checker.context_seconds
    return finish_check_report(report)


def _check_source(ctx: RunContext, checker: TaskChecker, source_id: str, report: StageReport) -> None:
    tasks = sorted(
        (t for t in ctx.store.read_partition(Task, source_id) if t.variant_of is None), key=lambda t: t.id
    )
    findings: dict[str, dict[str, Finding | Validation]] = defaultdict(dict)
    for finding in ctx.store.read_partition(Validation, source_id):
        if finding.checks_version == checker.version:
            findings[finding.task_id][finding.check] = finding
    todo = [t for t in tasks if not checker.complete(findings[t.id])]
    report.reused += len(tasks) - len(todo)
    if not todo:
        return
    prepared = load_prepared(ctx, source_id)
    shared: dict = {}  # the source's tasks share what checks derive from byte-identical files
    found = checker.check_all(task_view(ctx, task, prepared, shared) for task in todo)
    for task in todo:
        findings[task.id].update(found[task.id])
        report.add("checked", task.id)
    report.written += _write_findings(ctx, tasks, findings, checker.version)


def finish_check_report(report: StageReport) -> StageReport:
    """The summary line (also for a report merged from several processes)."""
    report.lines = [f"check: {len(report.labels('checked'))} tasks checked, {report.reused} unchanged"]
    return report


def _validate(ctx: RunContext, task_ids: list[str] | None, force: bool) -> StageReport:
    started = time.perf_counter()
    checked: list[str] = []  # tasks checked now; the others' stored findings held
    reused = 0
    # Obscured variants exist only for the memorization probe: never released, so never validated.
    tasks = sorted(
        (
            t
            for t in ctx.store.iter_records(Task)
            if t.variant_of is None and (task_ids is None or t.id in task_ids)
        ),
        key=lambda t: t.id,
    )
    checker = TaskChecker(ctx)
    stored = {} if force else _stored_findings(ctx, checker.version)
    by_source: dict[str, list[PreparedSource]] = {}  # read once per source, not once per task
    shared: dict[str, dict] = defaultdict(dict)  # what checks derive, shared by a source's tasks
    views = [
        task_view(
            ctx,
            task,
            by_source.setdefault(task.source_id, load_prepared(ctx, task.source_id)),
            shared[task.source_id],
        )
        for task in tasks
    ]
    findings: dict[str, dict[str, Finding | Validation]] = defaultdict(dict)
    todo = []
    for view in views:
        held = stored.get(view.task.id, {})
        findings[view.task.id].update(held)
        if checker.complete(held):
            reused += 1
        else:
            todo.append(view)
            checked.append(view.task.id)
    if todo:
        with ctx.progress() as progress:
            bar = progress.add_task("validate", total=len(todo), item="")
            for task_id, found in checker.check_all(_advancing(todo, progress, bar)).items():
                findings[task_id].update(found)
    for run_check in RUN_CHECKS:
        for task_id, finding in run_check.run_all(views, ctx.config).items():
            findings[task_id][run_check.name] = finding
    findings_written = _write_findings(ctx, tasks, findings, checker.version)
    gated = gate(ctx)
    if checker.gx is not None and ctx.config.validate_.data_docs and ctx.store.is_local:
        checker.gx.build_data_docs(ctx.store.local_path(f"{REPORT_DIR}/data_docs"))
    html = write_report(ctx, "dareforge validation", [])
    report = StageReport(
        "validate",
        written=[*findings_written, *gated.written, html],
        reused=reused,
        outcomes={**gated.outcomes, "checked": dict.fromkeys(checked, "")},
        counts=gated.counts,
        seconds_in={"gx context": checker.context_seconds},
        seconds=time.perf_counter() - started,
    )
    report.lines = _summary(ctx, report, html)
    return report


def _summary(ctx: RunContext, report: StageReport, html: str) -> list[str]:
    lines = [
        f"validate: {len(report.labels('accepted'))} accepted, {len(report.labels('rejected'))} rejected "
        f"({len(report.labels('checked'))} tasks checked, {report.reused} unchanged) in {report.seconds:.1f}s"
    ]
    if report.counts:
        top = ", ".join(f"{name} {n}" for name, n in report.counts.most_common(SHOWN))
        lines.append(f"  top reasons: {top}")
    lines.append(f"  report: {ctx.store.path(html)}")
    return lines


def _advancing(views: list[TaskView], progress: Progress, bar: TaskID) -> Iterator[TaskView]:
    for view in views:
        progress.update(bar, item=view.task.id)
        yield view
        progress.advance(bar)


def _run_batched(check: TaskRecordExpectations, tasks: list[Task]) -> dict[str, Finding]:
    """A check run on many tasks at once; if it crashes, task by task, so the crash is a finding about the task
    that causes it, as with a check run on one task."""
    try:
        return check.run_all(tasks)
    except Exception as exc:
        if machine_at_fault(exc):
            raise
        if len(tasks) > 1:
            return {task.id: _run_batched(check, [task])[task.id] for task in tasks}
        log.warning("%s: check %s crashed: %s", tasks[0].id, check.name, exc)
        return {tasks[0].id: Finding(f"the check crashed: {type(exc).__name__}: {exc}", flagged=True)}


def _run_check(check: Check, view: TaskView, ctx: RunContext) -> Finding:
    try:
        return check.run(view, ctx.config)
    except Exception as exc:  # a check that crashes is a finding about the task (or the check), not a stop
        if machine_at_fault(exc):
            raise
        log.warning("%s: check %s crashed: %s", view.task.id, check.name, exc)
        return Finding(f"the check crashed: {type(exc).__name__}: {exc}", flagged=True)


def _stored_findings(ctx: RunContext, version: str) -> dict[str, dict[str, Validation]]:
    stored: dict[str, dict[str, Validation]] = defaultdict(dict)
    for finding in ctx.store.iter_records(Validation):
        if finding.checks_version == version:
            stored[finding.task_id][finding.check] = finding
    return stored


def _write_findings(
    ctx: RunContext, tasks: list[Task], findings: dict[str, dict[str, Finding | Validation]], version: str
) -> list[str]:
    by_source: dict[str, list[Validation]] = defaultdict(list)
    for task in tasks:
        for name, finding in sorted(findings[task.id].items()):
            if isinstance(finding, Validation):
                by_source[task.source_id].append(finding)
                continue
            by_source[task.source_id].append(finding.record(task.id, task.source_id, name, version))
    written = []
    for source_id, rows in sorted(by_source.items()):
        if ctx.store.write_records(source_id, rows):
            written.append(ctx.store.table_key(Validation.table, source_id))
    return written


def write_report(
    ctx: RunContext, title: str, notes: list[str], prefix: str = REPORT_DIR, task_ids: set[str] | None = None
) -> str:
    validations = [v for v in ctx.store.iter_records(Validation) if task_ids is None or v.task_id in task_ids]
    verdicts = [v for v in ctx.store.iter_records(Verdict) if task_ids is None or v.task_id in task_ids]
    key = f"{prefix}/index.html"
    ctx.store.write_bytes(key, html_report.render(title, validations, verdicts, notes).encode())
    return key
