"""People's reviews: the gate honours a rejection with the reviewer's reason, never lets a task past a failing
check, reports a stale review instead of applying it; reviews survive concurrent writers; the changelog names
the tasks reviews kept out; `dareforge audit --agreement` prints the gate's precision and recall against them.

One small store (one builtin source, its prediction tasks) per module, with hand-written findings: one task
flagged by a check, the others passing. Tests that write reviews work on a copy.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dareforge import reviews
from dareforge.cli import app
from dareforge.context import RunContext
from dareforge.publish import build_release
from dareforge.schema import Review, Task, Validation, Verdict
from dareforge.store import Store
from dareforge.validators.agreement import GATE, agreement
from dareforge.validators.gate import gate
from tests.stores import generate_tasks, prediction_only, store_config

SOURCE = "sklearn-iris"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _context(root: Path) -> RunContext:
    return RunContext.from_config(prediction_only(store_config(root, [SOURCE])), show_progress=False)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> RunContext:
    ctx = generate_tasks(_context(tmp_path_factory.mktemp("reviews")))
    tasks = _tasks(ctx)
    if len(tasks) < 3:
        pytest.fail(f"{SOURCE} gave {len(tasks)} prediction tasks; these tests need 3")
    findings = [
        Validation(
            task_id=t.id,
            source_id=t.source_id,
            check="leakage-copy",
            score=None,
            flagged=i == 0,
            reason="a column copies the label" if i == 0 else "no copy",
            checks_version="test",
        )
        for i, t in enumerate(tasks)
    ]
    ctx.store.write_records("all", findings)
    return ctx


@pytest.fixture
def ctx(base, tmp_path) -> RunContext:
    shutil.copytree(base.config.store.root, tmp_path / "store")
    return _context(tmp_path)


def _tasks(ctx: RunContext) -> list[Task]:
    return sorted(
        (t for t in ctx.store.read_records(Task) if t.status == "candidate" and t.variant_of is None),
        key=lambda t: t.id,
    )


def _verdicts(ctx: RunContext) -> dict[str, Verdict]:
    return {v.task_id: v for v in ctx.store.read_records(Verdict)}


def _review(ctx: RunContext, task: Task, decision: str, note: str = "", minutes: int = 0, who: str = "ann"):
    review = reviews.new_review(task, who, decision, note, at=T0 + timedelta(minutes=minutes))
    reviews.record(ctx.store, review)
    return review


def test_gate_honours_a_rejection_with_the_reason_and_no_review_passes_a_failing_check(ctx):
    flagged, good, other = _tasks(ctx)[:3]
    before = _verdicts(ctx) if ctx.store.read_records(Verdict) else None
    assert before is None
    gate(ctx)
    assert not _verdicts(ctx)[flagged.id].accepted and _verdicts(ctx)[good.id].accepted
    _review(ctx, good, "rejected", "the instruction names the wrong target column")
    _review(ctx, flagged, "accepted", "looks fine to me")
    _review(ctx, other, "accepted")
    report = gate(ctx)
    verdicts = _verdicts(ctx)
    assert not verdicts[good.id].accepted
    assert verdicts[good.id].reasons == [
        "review: rejected by ann on 2026-03-01: the instruction names the wrong target column"
    ]
    assert not verdicts[flagged.id].accepted  # an acceptance never overrides a failing check
    assert verdicts[flagged.id].reasons == ["leakage-copy: a column copies the label"]
    assert verdicts[other.id].accepted
    assert report.counts["review"] == 1


def test_the_latest_review_stands_and_needs_fix_keeps_the_task_out(ctx):
    _, good, other = _tasks(ctx)[:3]
    _review(ctx, good, "rejected", "bad", minutes=0)
    _review(ctx, good, "accepted", minutes=5, who="bob")
    _review(ctx, other, "needs-fix", "the bar is unclear")
    gate(ctx)
    verdicts = _verdicts(ctx)
    assert verdicts[good.id].accepted
    assert not verdicts[other.id].accepted and "needs-fix by ann" in verdicts[other.id].reasons[0]


def test_a_review_of_other_content_is_reported_stale_and_not_applied(ctx):
    good = _tasks(ctx)[1]
    review = reviews.new_review(good, "ann", "rejected", "old complaint", at=T0)
    reviews.record(ctx.store, review.model_copy(update={"task_fingerprint": "0" * 16}))
    report = gate(ctx)
    assert _verdicts(ctx)[good.id].accepted
    assert good.id in report.labels("stale-review")
    assert "is stale" in report.outcomes["stale-review"][good.id]
    assert any("1 reviews are stale" in line for line in report.lines)


def test_a_changed_task_changes_its_fingerprint(ctx):
    task = _tasks(ctx)[1]
    fp = reviews.task_fingerprint(task)
    assert fp == reviews.task_fingerprint(task.model_copy())
    assert fp != reviews.task_fingerprint(task.model_copy(update={"instruction": task.instruction + " "}))
    changed = [task.public_files[0].model_copy(update={"sha256": "f" * 64}), *task.public_files[1:]]
    assert fp != reviews.task_fingerprint(task.model_copy(update={"public_files": changed}))


@pytest.mark.parametrize(
    ("who", "decision", "note", "says"),
    [
        ("", "rejected", "x", "needs a reviewer"),
        ("ann", "maybe", "x", "not one of accepted, rejected, needs-fix"),
        ("ann", "rejected", " ", "needs a note"),
    ],
)
def test_a_review_a_person_must_fix_says_how(base, who, decision, note, says):
    with pytest.raises(reviews.ReviewError, match=says):
        reviews.new_review(_tasks(base)[0], who, decision, note)


def _write_reviews(args: tuple[str, str, int]) -> None:
    root, task_json, worker = args
    task = Task.model_validate_json(task_json)
    store = Store(root)
    for i in range(5):
        reviews.record(store, reviews.new_review(task, f"r{worker}", "rejected", f"note {i}"))


def test_concurrent_reviewers_lose_no_review(ctx):
    task = _tasks(ctx)[1]
    jobs = [(ctx.config.store.root, task.model_dump_json(), w) for w in range(4)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_write_reviews, jobs)
    stored = ctx.store.read_records(Review)
    assert len(stored) == 20 and {r.reviewer for r in stored} == {"r0", "r1", "r2", "r3"}


def test_the_changelog_names_the_tasks_reviews_kept_out(ctx):
    good = _tasks(ctx)[1]
    gate(ctx)
    build_release(ctx, "bench", today=date(2026, 3, 1))
    _review(ctx, good, "rejected", "answers | leak through the row order")
    gate(ctx)
    result = build_release(ctx, "bench", today=date(2026, 3, 2))
    assert good.id not in result.release.task_ids
    assert result.excluded["kept out by a review"] == 1
    changes = ctx.store.read_bytes(f"{result.release.prefix}/CHANGELOG.md").decode()
    assert "## Kept out by reviews (1)" in changes
    assert f"| `{good.id}` | {good.family} | review: rejected by ann" in changes
    assert "answers \\| leak through the row order" in changes


def test_agreement_counts_each_check_and_family_against_reviewers(ctx):
    flagged, good, other = _tasks(ctx)[:3]
    _review(ctx, flagged, "rejected", "leaky")  # both keep it out
    _review(ctx, good, "rejected", "wrong target")  # only the reviewer
    _review(ctx, other, "accepted")  # neither
    gate(ctx)
    store = ctx.store
    table = agreement(
        store.read_records(Task),
        store.read_records(Verdict),
        store.read_records(Review),
        store.read_records(Validation),
    )
    rows = {r.scope: r for r in table.by_check}
    assert table.reviewed == 3 and table.stale == 0
    assert (rows[GATE].both, rows[GATE].reviewer_only, rows[GATE].neither) == (1, 1, 1)
    assert rows[GATE].precision == 1.0 and rows[GATE].recall == 0.5
    assert rows["leakage-copy"].precision == 1.0 and rows["leakage-copy"].recall == 0.5
    assert "review" not in rows
    assert sum(r.reviewed for r in table.by_family) == 3


def test_review_commands_and_the_audit_agreement_table(ctx, tmp_path):
    runner = CliRunner()
    root = ctx.config.store.root
    good = _tasks(ctx)[1]

    def run(*args: str):
        return runner.invoke(
            app, ["-q", "--store", root, *args], catch_exceptions=False, env={"COLUMNS": "200"}
        )

    added = run(
        "review", "add", good.id, "--decision", "rejected", "--note", "wrong target", "--reviewer", "ann"
    )
    assert added.exit_code == 0, added.output
    refused = run("review", "add", good.id, "--decision", "rejected", "--reviewer", "ann")
    assert refused.exit_code == 2 and "needs a note" in refused.output
    missing = run("review", "add", "nosuchtask", "--decision", "accepted", "--reviewer", "ann")
    assert missing.exit_code == 2 and "no task 'nosuchtask'" in missing.output
    listed = run("review", "list")
    assert f"{good.id} rejected by ann [standing]: wrong target" in listed.output
    run("review", "export", "--to", str(tmp_path / "reviews.jsonl"))
    exported = [json.loads(line) for line in (tmp_path / "reviews.jsonl").read_text().splitlines()]
    assert [(e["task_id"], e["decision"], e["state"]) for e in exported] == [
        (good.id, "rejected", "standing")
    ]
    gate(ctx)
    table = run("audit", "--agreement")
    assert table.exit_code == 0 and "gate vs reviewers: 1 reviewed tasks" in table.output
    assert "leakage-copy" in table.output and "precision" in table.output, table.output
