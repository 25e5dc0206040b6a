"""People's reviews of tasks: the one home of what a review is worth and when it still applies.

A review is a `Review` record, written as a partition of its own (`tables/reviews/<review id>.parquet`): two
reviewers writing at once never rewrite each other's file, and a writer killed mid-write leaves only a temp
file the store ignores (`Store.write_bytes` renames a finished file into place). A task's standing review is its
latest one (by time, then id). It applies only while the task still has the content the reviewer saw
(`task_fingerprint`); once the task changes the review is *stale*: reported, never applied.

A rejection or a needs-fix keeps the task out (a task that needs a fix is not releasable as it stands; the fix
changes its fingerprint, so the fixed task is judged afresh). An acceptance adds nothing: a review never lets a
task past a failing check (the gate decides the checks first and only adds the review's reason).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from dareforge.errors import DareforgeError
from dareforge.hashing import content_fingerprint, fingerprint
from dareforge.schema import Review, ReviewDecision, Task
from dareforge.store import Store

CHECK = "review"
"""The name review reasons carry in `Verdict.reasons` ("review: ..."), counted like a check's."""
DECISIONS: tuple[ReviewDecision, ...] = ("accepted", "rejected", "needs-fix")
KEEPS_OUT: frozenset[str] = frozenset({"rejected", "needs-fix"})


class ReviewError(DareforgeError):
    """A review that cannot be recorded: an unknown task or decision, a missing reviewer or reason."""


def task_fingerprint(task: Task) -> str:
    """What a reviewer judged: everything the agent and the grader see (instruction, limits, metric, bar,
    questions, spec, and every public and private file by checksum). A regenerated task or a changed file
    changes it, which makes older reviews stale."""
    return content_fingerprint(
        {
            "id": task.id,
            "instruction": task.instruction,
            "limits": task.limits.model_dump(),
            "metric": task.metric.model_dump(),
            "pass_bar": task.pass_bar,
            "spec": task.spec,
            "subtasks": [s.model_dump() for s in task.subtasks],
            "public": sorted((f.name, f.sha256) for f in task.public_files),
            "private": sorted((f.name, f.sha256) for f in task.private_files),
        }
    )[:16]


def load_task(store: Store, task_id: str) -> Task:
    """A task's full record from its manifest; ReviewError naming the id when the store has no such task."""
    manifest = store.read_manifest(f"tasks/{task_id}") if task_id.isalnum() else None
    if manifest is None:
        raise ReviewError(f"no task {task_id!r} in the store at {store.url}; list tasks with dareforge sql")
    return Task.model_validate(manifest["task"])


def new_review(
    task: Task,
    reviewer: str,
    decision: str,
    note: str = "",
    *,
    release: str | None = None,
    at: datetime | None = None,
) -> Review:
    """A review of `task` as it is now; raises ReviewError on input a reviewer must fix."""
    reviewer, note = reviewer.strip(), note.strip()
    if not reviewer:
        raise ReviewError(
            "a review needs a reviewer: pass --reviewer NAME (or fill the form's reviewer field)"
        )
    if decision not in DECISIONS:
        raise ReviewError(f"review decision {decision!r} is not one of {', '.join(DECISIONS)}")
    if decision in KEEPS_OUT and not note:
        raise ReviewError(f"a {decision} review needs a note saying why: pass --note TEXT")
    at = (at or datetime.now(UTC)).astimezone(UTC)
    return Review(
        id=fingerprint(task.id, reviewer, at.isoformat(), decision, note),
        task_id=task.id,
        release=release,
        task_fingerprint=task_fingerprint(task),
        reviewer=reviewer,
        decision=decision,  # type: ignore[arg-type]  (checked above)
        note=note,
        at=at,
    )


def record(store: Store, review: Review) -> bool:
    """Store one review in its own partition (atomic; concurrent reviewers never share a file)."""
    return store.write_records(review.id, [review])


def latest(reviews: Iterable[Review]) -> dict[str, Review]:
    """Each task's standing review: its latest (ties broken by id, so the choice is deterministic)."""
    standing: dict[str, Review] = {}
    for review in sorted(reviews, key=lambda r: (r.at, r.id)):
        standing[review.task_id] = review
    return standing


@dataclass(frozen=True)
class Standing:
    """A task's latest review and whether it still applies to the task as it is."""

    review: Review
    current: str
    """The task's fingerprint now."""

    @property
    def stale(self) -> bool:
        return self.review.task_fingerprint != self.current

    @property
    def keeps_out(self) -> bool:
        return not self.stale and self.review.decision in KEEPS_OUT

    def reason(self) -> str | None:
        """The `Verdict.reasons` entry of a review that keeps its task out, or None."""
        if not self.keeps_out:
            return None
        r = self.review
        return f"{CHECK}: {r.decision} by {r.reviewer} on {r.at:%Y-%m-%d}: {r.note}"

    def stale_note(self) -> str:
        r = self.review
        return (
            f"{r.decision} review by {r.reviewer} on {r.at:%Y-%m-%d} is stale: the task changed since "
            f"(fingerprint {r.task_fingerprint} -> {self.current}); review it again"
        )


def standing_of(tasks: Iterable[Task], reviews: Iterable[Review]) -> dict[str, Standing]:
    """task id -> its standing review, for the tasks that have one."""
    by_task = latest(reviews)
    return {t.id: Standing(by_task[t.id], task_fingerprint(t)) for t in tasks if t.id in by_task}
