"""The store's answers to "which sources and framings are in play", one definition each, for every stage.

- accepted sources: every filter rule kept them, as the filter last judged them;
- chosen framings: what the understand stage chose for each source;
- framed sources: accepted sources with at least one chosen framing (what prepare and generate work on);
- the `trajectories` partition of an endpoint on a release.

A stage that never ran leaves its table empty; `kept_sources` and `chosen_framings` then say None ("no
decision yet"), which the release reads as "keep everything" rather than "keep nothing".
"""

from __future__ import annotations

import re

from dareforge.context import RunContext
from dareforge.schema import Framing

ACCEPTED_SOURCES_SQL = (
    "select source_id from filter_decisions group by source_id having bool_and(kept) order by source_id"
)


def accepted_source_ids(ctx: RunContext) -> list[str]:
    """Sources every rule kept, as the filter last judged them, sorted."""
    return [r[0] for r in ctx.store.connect().sql(ACCEPTED_SOURCES_SQL).fetchall()]


def kept_sources(ctx: RunContext) -> set[str] | None:
    """The accepted sources, or None when the filter has judged nothing yet."""
    con = ctx.store.connect()
    if not con.sql("select count(*) from filter_decisions").fetchall()[0][0]:
        return None
    return {r[0] for r in con.sql(ACCEPTED_SOURCES_SQL).fetchall()}


def chosen_framings(ctx: RunContext) -> set[tuple[str, str]] | None:
    """(source id, framing) of every chosen framing, or None when the understand stage has judged nothing."""
    con = ctx.store.connect()
    if not con.sql("select count(*) from framings").fetchall()[0][0]:
        return None
    rows = con.sql("select source_id, framing from framings where status = 'chosen'").fetchall()
    return {(r[0], r[1]) for r in rows}


def framed_source_ids(ctx: RunContext) -> list[str]:
    """Accepted sources that hold at least one chosen framing, sorted."""
    framed = {source_id for source_id, _ in chosen_framings(ctx) or set()}
    return [s for s in accepted_source_ids(ctx) if s in framed]


def task_source_ids(ctx: RunContext) -> list[str]:
    """Sources that hold at least one task, sorted."""
    return [
        r[0] for r in ctx.store.connect().sql("select distinct source_id from tasks order by 1").fetchall()
    ]


def why_none(framings: list[Framing]) -> str:
    """Why a source has no chosen framing: the first few candidates' reasons."""
    reasons = [f"{f.target_columns[0] if f.target_columns else 'source'}: {f.reason}" for f in framings]
    return "; ".join(reasons[:3]) or "no candidate"


def partition_name(endpoint: str, release: str) -> str:
    """The `trajectories` partition of one endpoint on one release (a safe file name)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{endpoint}--{release}")
