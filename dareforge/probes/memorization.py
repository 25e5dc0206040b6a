"""Memorization probe: does a model score on a task because it recalls the public dataset?

Each probed model attempts every original task that has an obscured variant (`dareforge.probes.obscure`) and
the variant, with their data, `probe.samples` times each (attempt kinds "original" and "obscured"). A correct
pipeline scores about the same on both; recall of column names, rows or answers works only on the original. Per
model the report gives the mean score on each side, the drop, and the memorization suspects: tasks solved on
the original but not on its variant.

Stored: trajectories in partition `probe-memorization--<endpoint>`, one `ProbeResult` per attempt (probe
"original" or "obscured") in `probes` partition `memorization--<endpoint>`. Played attempts are reused.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from dareforge.agents.attempts import attempts_for, store_task_files
from dareforge.context import RunContext
from dareforge.generators.taskio import originals
from dareforge.probes.obscure import variants_of
from dareforge.probes.shortcut import ProbeRun, probe_endpoints, run_probe, score_of
from dareforge.schema import ProbeResult, Task

log = logging.getLogger(__name__)

ORIGINAL, OBSCURED = "original", "obscured"
PARTITION = "memorization"


@dataclass(frozen=True)
class ModelMemorization:
    """One model's scores on originals and their variants; failures score 0, samples and tasks are averaged."""

    endpoint: str
    model: str
    pairs: int
    original: float
    obscured: float
    suspects: list[str]
    """Original task ids solved (any sample passed) on the original but on no sample of the variant."""

    @property
    def drop(self) -> float:
        return self.original - self.obscured


@dataclass
class MemorizationReport(ProbeRun):
    models: list[ModelMemorization] = field(default_factory=list)
    pairs: list[tuple[str, str]] = field(default_factory=list)
    """(original id, variant id) of every probed pair."""


def task_pairs(ctx: RunContext, task_ids: Iterable[str] | None = None) -> list[tuple[Task, Task]]:
    """(original, variant) for each candidate original (only `task_ids`) with a candidate variant."""
    variants = variants_of(ctx)
    return [(t, variants[t.id]) for t in originals(ctx, task_ids) if t.id in variants]


def probe_memorization(
    ctx: RunContext,
    endpoints: Iterable[str] | None = None,
    task_ids: Iterable[str] | None = None,
    concurrency: int | None = None,
) -> MemorizationReport:
    """Play originals and their obscured variants with each endpoint; see the module doc."""
    chosen = probe_endpoints(ctx, endpoints)
    report = MemorizationReport()
    pairs = task_pairs(ctx, task_ids)
    if not pairs:
        log.warning("memorization probe: no task has an obscured variant; run `dareforge obscure` first")
        return report
    report.pairs = [(o.id, v.id) for o, v in pairs]
    samples = ctx.config.probe.samples
    files = partial(store_task_files, ctx.store)
    attempts = [
        *attempts_for([o for o, _ in pairs], samples, files, kind=ORIGINAL),
        *attempts_for([v for _, v in pairs], samples, files, kind=OBSCURED),
    ]
    run_probe(ctx, report, chosen, attempts, PARTITION, concurrency)
    report.models = [summarize(e.name, e.model, pairs, report.results[e.name]) for e in chosen]
    for row in report.models:
        log.info(
            "memorization %s: original %.3f, obscured %.3f, drop %.3f, %d suspects",
            row.endpoint,
            row.original,
            row.obscured,
            row.drop,
            len(row.suspects),
        )
    return report


def summarize(
    endpoint: str, model: str, pairs: Sequence[tuple[Task, Task]], results: Sequence[ProbeResult]
) -> ModelMemorization:
    by_task: dict[str, list[ProbeResult]] = defaultdict(list)
    for r in results:
        if r.outcome != "llm-error":  # the endpoint failed: no score for or against memorization
            by_task[r.task_id].append(r)

    def mean(task: Task) -> float:
        rows = by_task.get(task.id, [])
        return sum(score_of(r) for r in rows) / len(rows) if rows else 0.0

    def solved(task: Task) -> bool:
        return any(r.passed for r in by_task.get(task.id, []))

    n = len(pairs)
    return ModelMemorization(
        endpoint=endpoint,
        model=model,
        pairs=n,
        original=sum(mean(o) for o, _ in pairs) / n if n else 0.0,
        obscured=sum(mean(v) for _, v in pairs) / n if n else 0.0,
        suspects=sorted(o.id for o, v in pairs if solved(o) and not solved(v)),
    )
