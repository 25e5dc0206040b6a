"""The benchmark's own train/test split: grouped by source, the most recently updated sources in test.

Like DARE-bench, a source's tasks all land on one side, and the newest sources form the test side, so a
model trained on the train side has not seen the test sources and they are the least likely to be in its
pre-training data. A source's date is the later of its `last_updated` and `deadline`; sources without either
(packaged datasets) count as older than every dated one, and ties fall back to a seeded hash of the source id,
which is stable across runs and machines.

Assignments are sticky: a source keeps the side it had in the previous release version, and only sources new
to the release are placed, so a refresh never moves a test source into train (leaking it) or a train source
into test (contaminating it). New sources fill the test side up to the target share, most recent first.

Every task family should be on both sides: a test split of tabular sources alone says nothing about time
series. So, family by family in name order, a family that test lacks brings in its most recent new source from
train, and a family that train lacks sends its least recent new source from test to train, each move only
when the side it leaves still holds every family of the moved source. A move therefore never takes a family
away from either side; the test share bends by those moves, and a family with a single source (or whose
sources all sit where a previous version put them) stays on one side.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping
from datetime import datetime

from dareforge.schema import Source

TRAIN, TEST = "train", "test"
SPLITS = (TRAIN, TEST)
DEFAULT_TEST_SHARE = 0.2
DEFAULT_SEED = "dareforge-release-split/1"


def source_date(source: Source | None) -> datetime | None:
    """When a source last changed: the later of `last_updated` and `deadline`, or None when neither is known."""
    if source is None:
        return None
    dates = [d for d in (source.last_updated, source.deadline) if d is not None]
    return max(dates) if dates else None


def tiebreak(source_id: str, seed: str) -> str:
    return hashlib.sha256(f"{seed}\0{source_id}".encode()).hexdigest()


def count_test_sources(n_sources: int, test_share: float) -> int:
    """Sources in test: about `test_share` of them, and at least one on each side when there are two or more."""
    if n_sources <= 1:
        return n_sources  # a lone source is an evaluation set, not training data
    return min(n_sources - 1, max(1, math.floor(test_share * n_sources + 0.5)))


def recency_order(dates: Mapping[str, datetime | None], seed: str) -> list[str]:
    """Source ids, most recently updated first; undated sources after dated ones, in seeded-hash order."""
    return sorted(
        dates,
        key=lambda s: (dates[s] is not None, dates[s].timestamp() if dates[s] else 0.0, tiebreak(s, seed)),
        reverse=True,
    )


def assign_splits(
    dates: Mapping[str, datetime | None],
    *,
    test_share: float = DEFAULT_TEST_SHARE,
    seed: str = DEFAULT_SEED,
    previous: Mapping[str, str] | None = None,
    families: Mapping[str, Collection[str]] | None = None,
) -> dict[str, str]:
    """Map every source id in `dates` to `train` or `test`, keeping the sides given in `previous` and, where
    the sources allow, every family of `families` (source id -> the families of its tasks) on both sides."""
    if not 0.0 <= test_share <= 1.0:
        raise ValueError(f"test_share must be within [0, 1], got {test_share}")
    order = recency_order(dates, seed)
    kept = {s: side for s, side in (previous or {}).items() if s in dates and side in SPLITS}
    new = [s for s in order if s not in kept]
    wanted = count_test_sources(len(order), test_share)
    room = max(0, wanted - sum(side == TEST for side in kept.values()))
    splits = dict(kept)
    for i, source_id in enumerate(new):
        splits[source_id] = TEST if i < room else TRAIN
    if len(order) >= 2:
        # Degenerate histories (every earlier source on one side) still need both sides; move a new source
        # when there is one, so stickiness bends only when it must.
        if TEST not in splits.values():
            splits[next(iter(new), order[0])] = TEST
        if TRAIN not in splits.values():
            splits[next(iter(reversed(new)), order[-1])] = TRAIN
    if families:
        _spread_families(splits, new, families)
    return {s: splits[s] for s in order}


def _spread_families(
    splits: dict[str, str], movable: list[str], families: Mapping[str, Collection[str]]
) -> None:
    """Move sources of `movable` (most recent first) so each family is on both sides; see the module doc."""

    def held(side: str, without: str = "") -> set[str]:
        return {f for s, on in splits.items() if on == side and s != without for f in families.get(s, ())}

    for family in sorted({f for fs in families.values() for f in fs}):
        for side, other, candidates in ((TEST, TRAIN, movable), (TRAIN, TEST, movable[::-1])):
            if family in held(side):
                continue
            for source_id in candidates:
                mine = set(families.get(source_id, ()))
                if splits[source_id] == other and family in mine and mine <= held(other, without=source_id):
                    splits[source_id] = side
                    break
