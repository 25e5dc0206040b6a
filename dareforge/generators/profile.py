"""Profiling a loaded table with one aggregate query per batch of columns: counts, distinct values, ranges,
the top values, and from them each column's kind and `ColumnProfile`."""

from __future__ import annotations

from dataclasses import dataclass, field

from dareforge.generators.sql import (
    Column,
    finite,
    is_datetime,
    is_numeric,
    sql_ident,
    widen,
)
from dareforge.schema import (
    ColumnKind,
    ColumnProfile,
)

EXACT_DISTINCT_ROWS = 1_000_000
"""Up to this many rows distinct counts are exact; above, DuckDB's HyperLogLog estimate (still deterministic)."""


COLUMN_BATCH = 32
"""Columns per profile query. Each exact distinct count holds its own hash table per thread: on DuckDB 2.0 a
3 MB table of 178 columns measured in one query ran out of the default 512 MB, in batches of 50 it used far
less; 32 keeps a wide table (10,000 columns) within the limit at a few more queries."""


TOP_VALUES = 10


TEXT_MIN_LENGTH = 20


TEXT_MIN_DISTINCT = 10


TEXT_DISTINCT_SHARE = 0.5


@dataclass
class Stats:
    nonnull: int = 0
    distinct: int = 0
    min: str | None = None
    max: str | None = None
    mean: float | None = None
    std: float | None = None
    avg_length: float | None = None
    integral: bool = False
    top: list[str] = field(default_factory=list)


def column_kind(col: Column, s: Stats) -> ColumnKind:
    if is_numeric(col.dtype):
        return ColumnKind.NUMERIC
    if is_datetime(col.dtype):
        return ColumnKind.DATETIME
    if (
        col.dtype == "VARCHAR"
        and (s.avg_length or 0) >= TEXT_MIN_LENGTH
        and s.distinct >= TEXT_MIN_DISTINCT
        and s.distinct >= TEXT_DISTINCT_SHARE * s.nonnull
    ):
        return ColumnKind.TEXT
    return ColumnKind.CATEGORICAL


def column_profile(col: Column, s: Stats, n: int) -> ColumnProfile:
    kind = column_kind(col, s)
    return ColumnProfile(
        name=col.name,
        dtype=col.dtype,
        kind=kind,
        missing_rate=round(1 - s.nonnull / n, 6) if n else 0.0,
        distinct=s.distinct,
        min=s.min,
        max=s.max,
        mean=s.mean if kind == ColumnKind.NUMERIC else None,
        std=s.std if kind == ColumnKind.NUMERIC else None,
        top_values=s.top if kind == ColumnKind.CATEGORICAL else [],
    )


class ProfileMixin:
    """Profiling a loaded table: one aggregate query per batch of columns, then the top values. Mixed into `Engine`, whose connection (`self.con`) it uses."""

    def _profile(self, relation: str, columns: list[Column], n: int, targets: set[str]) -> dict[str, Stats]:
        """Per-column statistics in one aggregate query per batch; a column whose sniffed type fails on some
        row is widened and measured again."""
        stats: dict[str, Stats] = {}
        pending = list(columns)
        while pending:
            retry: list[Column] = []
            for start in range(0, len(pending), COLUMN_BATCH):
                batch = pending[start : start + COLUMN_BATCH]
                retry += self._profile_batch(relation, batch, n, targets, stats)
            pending = retry
        self._top_values(
            relation, [c for c in columns if column_kind(c, stats[c.name]) == ColumnKind.CATEGORICAL], stats
        )
        return stats

    def _profile_batch(
        self, relation: str, batch: list[Column], n: int, targets: set[str], stats: dict[str, Stats]
    ) -> list[Column]:
        exact = n <= EXACT_DISTINCT_ROWS
        parts: list[str] = []
        for i, col in enumerate(batch):
            raw, typed = sql_ident(col.name), col.typed
            parts.append(f"count({raw}) AS c{i}_nonnull")
            parts.append(f"count({typed}) AS c{i}_ok")
            distinct = f"count(DISTINCT {typed})" if exact else f"approx_count_distinct({typed})"
            parts.append(f"{distinct} AS c{i}_distinct")
            parts.append(f"CAST(min({typed}) AS VARCHAR) AS c{i}_min")
            parts.append(f"CAST(max({typed}) AS VARCHAR) AS c{i}_max")
            if is_numeric(col.dtype):
                parts.append(f"avg({typed})::DOUBLE AS c{i}_mean")
                parts.append(f"stddev_samp({typed})::DOUBLE AS c{i}_std")
                if col.name in targets:
                    parts.append(f"count(*) FILTER (WHERE {typed} <> round({typed})) AS c{i}_fractional")
            if col.dtype == "VARCHAR":
                parts.append(f"avg(length({col.text}))::DOUBLE AS c{i}_length")
                if col.stored == "VARCHAR" and not col.tried_timestamp:
                    parts.append(f"count(TRY_CAST({raw} AS TIMESTAMP)) AS c{i}_timestamps")
        cursor = self.con.execute(f"SELECT {', '.join(parts)} FROM {relation}")
        names = [d[0] for d in cursor.description]
        row = dict(zip(names, cursor.fetchone() or (), strict=True))
        retry = []
        for i, col in enumerate(batch):
            nonnull = row[f"c{i}_nonnull"]
            if row[f"c{i}_ok"] < nonnull:  # the sniffed type fails on some row: widen and measure again
                col.dtype = widen(col.dtype)
                retry.append(col)
                continue
            if col.dtype == "VARCHAR" and 0 < nonnull == row.get(f"c{i}_timestamps"):
                col.dtype, col.tried_timestamp = "TIMESTAMP", True  # text DuckDB reads as timestamps
                retry.append(col)
                continue
            stats[col.name] = Stats(
                nonnull=nonnull,
                distinct=int(row[f"c{i}_distinct"] or 0),
                min=row[f"c{i}_min"],
                max=row[f"c{i}_max"],
                mean=finite(row.get(f"c{i}_mean")),
                std=finite(row.get(f"c{i}_std")),
                avg_length=row.get(f"c{i}_length"),
                integral=row.get(f"c{i}_fractional") == 0,
            )
        return retry

    def _top_values(self, relation: str, columns: list[Column], stats: dict[str, Stats]) -> None:
        for start in range(0, len(columns), COLUMN_BATCH):
            batch = columns[start : start + COLUMN_BATCH]
            selects = [
                f"(SELECT {i} AS __i, {c.text} AS __v, count(*) AS __n FROM {relation} "
                f"WHERE {sql_ident(c.name)} IS NOT NULL GROUP BY 2 ORDER BY 3 DESC, 2 LIMIT {TOP_VALUES})"
                for i, c in enumerate(batch)
            ]
            rows = self.con.execute(" UNION ALL ".join(selects) + " ORDER BY 1, 3 DESC, 2").fetchall()
            for i, value, _count in rows:
                stats[batch[i].name].top.append(value)
