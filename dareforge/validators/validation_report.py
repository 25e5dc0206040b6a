"""The HTML audit report: counts per check, verdicts per family, and the rejected tasks with their reasons (the
first `SHOWN_REJECTED` by id; the page names the query that lists them all)."""

from __future__ import annotations

import html
from collections import Counter

from dareforge.schema import Validation, Verdict

SHOWN_REJECTED = 500
"""Rejected tasks listed on the page: a whole-catalog store rejects thousands, which no one reads as rows."""
ALL_REJECTED = 'dareforge sql "select task_id, source_id, family, reasons from verdicts where not accepted"'

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0 2rem; }
th, td { border: 1px solid #ccc; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.bad { color: #a00; }
"""


def _table(headers: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render(title: str, validations: list[Validation], verdicts: list[Verdict], notes: list[str]) -> str:
    checks: dict[str, Counter] = {}
    for v in validations:
        counts = checks.setdefault(v.check, Counter())
        counts["findings"] += 1
        counts["flagged"] += v.flagged
    rejecting = Counter(reason.split(":", 1)[0] for verdict in verdicts for reason in verdict.reasons)
    families = Counter((v.family, v.accepted) for v in verdicts)
    family_rows = [
        [family, families[(family, True)], families[(family, False)]]
        for family in sorted({v.family for v in verdicts})
    ]
    check_rows = [
        [name, c["findings"], c["flagged"], rejecting.get(name, 0)] for name, c in sorted(checks.items())
    ]
    rejected = sorted(
        [v.task_id, v.source_id, v.family, "; ".join(v.reasons)] for v in verdicts if not v.accepted
    )
    accepted = sum(v.accepted for v in verdicts)
    more = (
        f"<p>The first {SHOWN_REJECTED} of {len(rejected)} by id; all of them: <code>{html.escape(ALL_REJECTED)}"
        "</code></p>"
        if len(rejected) > SHOWN_REJECTED
        else ""
    )
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
        f"<p>{accepted} of {len(verdicts)} tasks accepted; {len(verdicts) - accepted} rejected.</p>",
        *(f"<p>{html.escape(note)}</p>" for note in notes),
        "<h2>Per family</h2>",
        _table(["family", "accepted", "rejected"], family_rows),
        "<h2>Per check</h2>",
        _table(["check", "findings", "flagged", "tasks it rejects"], check_rows),
        "<h2 class='bad'>Rejected tasks</h2>",
        _table(["task", "source", "family", "reasons"], rejected[:SHOWN_REJECTED])
        if rejected
        else "<p>None.</p>",
        more,
        "</body></html>",
    ]
    return "\n".join(parts)
