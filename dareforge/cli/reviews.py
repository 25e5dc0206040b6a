"""`dareforge review add | list | export`: people's decisions about tasks, which the next `dareforge gate` honours
(see `dareforge.reviews`)."""

from __future__ import annotations

import getpass
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from dareforge.cli.app import command, context, out, review_app
from dareforge.errors import DareforgeError

PANEL = "Releases and reports"


@command("add", panel=PANEL, group=review_app)
def review_add(
    task_id: Annotated[str, typer.Argument(help="The task's id.")],
    decision: Annotated[str, typer.Option(help="accepted, rejected or needs-fix.")],
    note: Annotated[str, typer.Option(help="Why (required for rejected and needs-fix).")] = "",
    reviewer: Annotated[str | None, typer.Option(help="Who reviews (default: the login name).")] = None,
    release: Annotated[str | None, typer.Option(help="NAME@VERSION the task was reviewed in.")] = None,
) -> None:
    """Record a review of a task as it is now; the next `dareforge gate` keeps a rejected task out."""
    from dareforge import reviews

    ctx = context()
    task = reviews.load_task(ctx.store, task_id)
    review = reviews.new_review(task, reviewer or getpass.getuser(), decision, note, release=release)
    reviews.record(ctx.store, review)
    out.print(f"review {review.id}: {review.decision} {task_id} by {review.reviewer}")


@command("list", panel=PANEL, group=review_app)
def review_list(
    task_id: Annotated[str | None, typer.Option("--task", help="Only this task's reviews.")] = None,
) -> None:
    """Every review, newest first, with whether it stands (latest for its task), is superseded, or is stale
    (the task changed since)."""
    for review, state in _reviews(task_id):
        out.print(
            f"{review.at:%Y-%m-%d %H:%M:%S} {review.task_id} {review.decision} by {review.reviewer} "
            f"[{state}]: {review.note}",
            markup=False,
            highlight=False,
            soft_wrap=True,  # one review a line, whatever the terminal's width: people grep it
        )


@command("export", panel=PANEL, group=review_app)
def review_export(
    to: Annotated[
        Path | None, typer.Option("--to", help="JSON Lines file (default: standard output).")
    ] = None,
) -> None:
    """Every review as JSON Lines (oldest first), each with its `state`: standing, superseded or stale."""
    lines = [
        json.dumps({**r.model_dump(mode="json"), "state": state}, sort_keys=True)
        for r, state in reversed(_reviews(None))
    ]
    text = "".join(f"{line}\n" for line in lines)
    if to is None:
        sys.stdout.write(text)
    else:
        to.write_text(text, encoding="utf-8")
        out.print(f"{len(lines)} reviews written to {to}")


def _reviews(task_id: str | None):
    from dareforge.reviews import latest, standing_of
    from dareforge.schema import Review, Task

    store = context().store
    found = [r for r in store.iter_records(Review) if task_id is None or r.task_id == task_id]
    if task_id is not None and not found:
        raise DareforgeError(f"no review of task {task_id!r}; add one with dareforge review add")
    ids = {r.task_id for r in found}
    standing = standing_of((t for t in store.iter_records(Task) if t.id in ids), found)
    newest = latest(found)
    rows = []
    for review in sorted(found, key=lambda r: (r.at, r.id), reverse=True):
        if newest[review.task_id].id != review.id:
            state = "superseded"
        elif review.task_id not in standing:
            state = "task missing"
        else:
            state = "stale" if standing[review.task_id].stale else "standing"
        rows.append((review, state))
    return rows


def agreement_table() -> Table:
    """`dareforge audit`'s agreement table: the gate's precision and recall against reviewers."""
    from dareforge.schema import Review, Task, Validation, Verdict
    from dareforge.validators.agreement import agreement

    store = context().store
    result = agreement(
        store.iter_records(Task),
        store.iter_records(Verdict),
        store.iter_records(Review),
        store.iter_records(Validation),
    )
    table = Table(
        title=f"gate vs reviewers: {result.reviewed} reviewed tasks ({result.stale} stale reviews, "
        f"{result.unjudged} without a verdict, left out)"
    )
    for name in (
        "check / family",
        "reviewed",
        "both out",
        "gate only",
        "reviewer only",
        "precision",
        "recall",
    ):
        # A check's name is what a person reads the row by: never wrapped or cut, however narrow the terminal.
        first = name == "check / family"
        # A header wraps between its words, never inside one: the table fits 80 columns whole.
        widest = max(len(word) for word in name.split())
        table.add_column(name, justify="left" if first else "right", no_wrap=first, min_width=widest)
    for i, row in enumerate([*result.by_check, *result.by_family]):
        table.add_row(
            row.scope if i < len(result.by_check) else f"family {row.scope}",
            str(row.reviewed),
            str(row.both),
            str(row.gate_only),
            str(row.reviewer_only),
            "-" if row.precision is None else f"{row.precision:.2f}",
            "-" if row.recall is None else f"{row.recall:.2f}",
        )
    return table
