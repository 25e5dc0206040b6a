"""IF for every accepted framing (issue 44): a sampled workflow whose generation already shows it asks nothing
(hardly any stated step changes the predictions, or the reference predicts one constant) is kept for the gate
to reject, and another seed is drawn in its place, so a framing that supports IF tasks gets
`generate.if_variants` that measure something where `generate.if_redraws` further draws allow."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.families.generate import generate
from dareforge.families.registry import family_of
from dareforge.generators.prepare import prepare
from dareforge.schema import Task, Verdict
from dareforge.understand.understand_stage import understand
from dareforge.validators.validate import validate
from tests.stores import mirror_dataset, store_config


def _assay(rows: int, seed: int) -> bytes:
    """Two doses and whether an infection was found: a label two numbers decide, so a workflow has few steps
    (which columns, which model) that can change its predictions."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(5, 2, rows).round(2), rng.normal(3, 1, rows).round(2)
    infected = ((a + 2 * b + rng.normal(0, 1.5, rows)) > 11).astype(int)
    return pd.DataFrame({"dose_a_ml": a, "dose_b_ml": b, "infected": infected}).to_csv(index=False).encode()


def _run(root, min_sensitive: int | None) -> RunContext:
    mirror = root / "mirror"
    mirror_dataset(mirror, "assay", {"assay.csv": _assay(400, 1)})
    cfg = store_config(root, [])
    cfg.builtin.enabled = False
    cfg.mirror.paths = [str(mirror)]
    cfg.rules.recency_exempt_origins = ["mirror"]
    cfg.validate_.ladder_cpu_seconds = 0
    if min_sensitive is not None:
        cfg.validate_.min_sensitive_requirements = min_sensitive
    cfg.generate.if_variants, cfg.generate.if_redraws = 1, 1
    cfg.generate.qa_per_source = cfg.generate.lakes_per_source = 0
    ctx = RunContext.from_config(cfg, show_progress=False)
    for stage in (crawl, filter_sources, understand, prepare, generate, validate):
        stage(ctx)
    return ctx


def _if_tasks(ctx: RunContext) -> list[tuple[Task, Verdict]]:
    verdicts = {v.task_id: v for v in ctx.store.read_records(Verdict)}
    tasks = [t for t in ctx.store.read_records(Task) if t.variant_of is None and family_of(t).exact]
    return [(t, verdicts[t.id]) for t in sorted(tasks, key=lambda t: t.seed)]


def test_a_workflow_that_measures_is_not_drawn_again(tmp_path):
    drawn = _if_tasks(_run(tmp_path, None))
    assert [(t.seed, v.accepted) for t, v in drawn] == [(20260101, True)]


def test_a_workflow_that_asks_nothing_is_drawn_again_and_kept_for_the_gate(tmp_path):
    # A gate that wants more stated requirements to matter than this table's workflows have: every draw asks
    # too little, so the next seed is drawn (at most `if_redraws` more), and the gate rejects both.
    drawn = _if_tasks(_run(tmp_path, 50))
    assert [t.seed for t, _ in drawn] == [20260101, 20260102]
    for _, verdict in drawn:
        assert not verdict.accepted
        assert any(r.startswith("sensitivity:") for r in verdict.reasons), verdict.reasons
