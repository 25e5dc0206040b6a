"""A model's proposal of framings, when `understand.endpoint` names one: the description and the column
profiles (names, types, a few values; never any answer) go in, ranked framings come out as JSON. A reply that
does not parse, or that names columns the table lacks, is recorded and ignored; a proposal never overrides a
failed data check."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from dareforge.context import RunContext
from dareforge.errors import ConfigError
from dareforge.schema import Source, TaskType
from dareforge.understand.columns import Sample

DESCRIPTION_CHARS = 3000
MAX_COLUMNS = 60
SYSTEM = (
    "You read the documentation and column profiles of a data table and say which prediction tasks it holds. "
    'Answer with JSON only: {"framings": [{"target": COLUMN, "task_type": "classification" | "regression" | '
    '"time-series", "time_column": COLUMN or null, "entity_column": COLUMN or null, "confidence": 0..1, '
    '"why": SHORT REASON}]}, best first, at most 3. Use only column names listed.'
)


@dataclass
class ModelProposal:
    hints: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What happened: the model used, and any reply or entry that was malformed or impossible."""


def messages(source: Source, sample: Sample) -> list[dict[str, str]]:
    columns = "\n".join(f"- {c.describe()}" for c in sample.columns[:MAX_COLUMNS])
    more = (
        f"\n(and {len(sample.columns) - MAX_COLUMNS} more columns)"
        if len(sample.columns) > MAX_COLUMNS
        else ""
    )
    user = (
        f"Title: {source.title}\nTags: {', '.join(source.tags) or 'none'}\n"
        f"Description:\n{(source.description or '')[:DESCRIPTION_CHARS]}\n\n"
        f"Table {sample.file}: {sample.total_rows} rows. Columns:\n{columns}{more}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse(text: str, sample: Sample) -> tuple[list[dict], list[str]]:
    """(hints, problems) from a reply: each hint a dict with target, task_type, confidence and why."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match is None:
        return [], [f"reply holds no JSON object: {text[:120]!r}"]
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        return [], [f"reply is not valid JSON ({exc.msg} at {exc.pos}): {text[:120]!r}"]
    entries = data.get("framings") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return [], ["reply has no 'framings' list"]
    hints, problems = [], []
    for i, entry in enumerate(entries[:3], start=1):
        if not isinstance(entry, dict):
            problems.append(f"framing {i} is not an object")
            continue
        target, kind = entry.get("target"), entry.get("task_type")
        if not isinstance(target, str) or sample.column(target) is None:
            problems.append(f"framing {i} names {target!r}, which is not a column: ignored")
            continue
        try:
            task_type = TaskType(kind)
        except ValueError:
            problems.append(f"framing {i} has task_type {kind!r}: ignored")
            continue
        try:
            confidence = min(1.0, max(0.0, float(entry.get("confidence", 0.5))))
        except (TypeError, ValueError):
            confidence = 0.5
        why = str(entry.get("why") or "no reason given")[:160]
        hints.append({"target": target, "task_type": task_type, "confidence": confidence, "why": why})
    return hints, problems


def propose_with_model(ctx: RunContext, source: Source, sample: Sample) -> ModelProposal:
    """Ask `understand.endpoint` (through the one LLM client and its cache); never raises on a bad reply."""
    name = ctx.config.understand.endpoint
    if not name:
        return ModelProposal()
    from dareforge.llm.client import LLMClient

    endpoint = next((e for e in ctx.config.llm.endpoints if e.name == name), None)
    if endpoint is None:
        known = ", ".join(e.name for e in ctx.config.llm.endpoints) or "none"
        raise ConfigError(
            f"understand.endpoint names {name!r}, which is not in llm.endpoints (known: {known})"
        )
    client = LLMClient(endpoint, ctx.store, cache=ctx.config.llm.cache)
    result = client.complete(
        messages(source, sample), temperature=0.0, max_tokens=ctx.config.understand.max_tokens
    )
    proposal = ModelProposal(notes=[f"model {endpoint.name} ({endpoint.model}) asked"])
    if not result.ok:
        proposal.notes.append(f"model {endpoint.name}: request failed ({result.error}); ignored")
        return proposal
    proposal.hints, problems = parse(result.text, sample)
    proposal.notes += [f"model {endpoint.name}: {p}" for p in problems]
    return proposal
