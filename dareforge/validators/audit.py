"""Audit a published release: re-run every check on its tasks and report what changed since.

Every task in a release was accepted when the release was cut, so a change is a task the gate now rejects
(a new near-duplicate source, a reference that no longer certifies, a threshold raised) or a check whose score
moved. The comparison is against the findings stored before this audit ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dareforge.context import RunContext
from dareforge.errors import DareforgeError
from dareforge.report import StageReport
from dareforge.schema import Validation
from dareforge.validators.validate import validate, write_report

SCORE_TOLERANCE = 1e-9


@dataclass
class AuditReport:
    release: str
    version: str
    tasks: int = 0
    now_rejected: dict[str, str] = field(default_factory=dict)
    """Task -> the gate's reasons, joined with "; "."""
    missing: list[str] = field(default_factory=list)
    moved: list[tuple[str, str, float | None, float | None]] = field(default_factory=list)
    report_key: str | None = None
    validation: StageReport | None = None


def parse_release(spec: str) -> tuple[str, str | None]:
    name, _, version = spec.partition("@")
    if not name:
        raise DareforgeError(f"release {spec!r} must be NAME or NAME@VERSION")
    return name, version or None


def audit(ctx: RunContext, release: str) -> AuditReport:
    from dareforge.publish.release import load_release

    name, version = parse_release(release)
    loaded = load_release(ctx, name, version)
    report = AuditReport(release=name, version=loaded.version, tasks=len(loaded.task_ids))
    known = {t for t in loaded.task_ids if ctx.store.exists(f"tasks/{t}/_MANIFEST.json")}
    report.missing = sorted(set(loaded.task_ids) - known)
    before = _scores(ctx, known)
    report.validation = validate(ctx, sorted(known), force=True)
    after = _scores(ctx, known)
    report.moved = sorted(
        (task, check, before.get((task, check)), score)
        for (task, check), score in after.items()
        if not _same(before.get((task, check)), score)
    )
    rejected = report.validation.outcomes.get("rejected", {})
    report.now_rejected = {task: reasons for task, reasons in rejected.items() if task in known}
    notes = [
        f"Audit of release {name}@{loaded.version}: {report.tasks} tasks, {len(report.now_rejected)} now rejected, "
        f"{len(report.missing)} missing from the store, {len(report.moved)} check scores moved."
    ]
    notes += [f"moved: {t} {c}: {b} -> {a}" for t, c, b, a in report.moved[:50]]
    report.report_key = write_report(
        ctx,
        f"dareforge audit {name}@{loaded.version}",
        notes,
        prefix=f"reports/audit/{name}/{loaded.version}",
        task_ids=known,
    )
    return report


def _scores(ctx: RunContext, task_ids: set[str]) -> dict[tuple[str, str], float | None]:
    return {
        (f.task_id, f.check): f.score for f in ctx.store.iter_records(Validation) if f.task_id in task_ids
    }


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= SCORE_TOLERANCE
