"""A public file's profile on the task page: per column its kind, missing share, distinct values, min and max.

The kind and the record are prepare's own (`generators.profile.column_profile`, `schema.ColumnProfile`), so
the page says what the pipeline would say of the column; the statistics come from one aggregate query over at
most PROFILE_ROWS rows of the file. A file's bytes never change under its checksum, so a profile is kept per
checksum (a bounded cache) and a task page seen twice does not measure its files again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock

import duckdb

from dareforge.generators.profile import Stats, column_profile
from dareforge.generators.sql import Column, sql_ident, sql_text
from dareforge.schema import ColumnProfile, SourceFile
from dareforge.store import Store

PROFILE_ROWS = 100_000
"""Rows a profile reads at most (the page says when a file has more)."""
CACHED = 512
READERS = {".csv": "read_csv", ".tsv": "read_csv", ".parquet": "read_parquet"}


@dataclass(frozen=True)
class FileProfile:
    columns: list[ColumnProfile]
    rows: int
    """Rows profiled (at most PROFILE_ROWS)."""
    error: str | None = None


class Profiles:
    """Profiles of a store's files, cached per checksum, measured on one DuckDB connection (making one costs
    more than profiling a small file)."""

    def __init__(self, store: Store):
        self.store = store
        self._cache: OrderedDict[str, FileProfile] = OrderedDict()
        self._lock = Lock()
        self._con: duckdb.DuckDBPyConnection | None = None

    def of(self, key: str, file: SourceFile) -> FileProfile | None:
        """The profile of the stored file at `key`; None for a file that is not a table (or a remote store)."""
        suffix = "." + file.name.rsplit(".", 1)[-1].lower() if "." in file.name else ""
        if suffix not in READERS or not self.store.is_local or not self.store.exists(key):
            return None
        with self._lock:
            if file.sha256 in self._cache:
                self._cache.move_to_end(file.sha256)
                return self._cache[file.sha256]
            if self._con is None:
                self._con = duckdb.connect(config={"threads": 1, "memory_limit": "256MB"})
            profile = measure(self._con, str(self.store.local_path(key)), READERS[suffix])
            self._cache[file.sha256] = profile
            while len(self._cache) > CACHED:
                self._cache.popitem(last=False)
        return profile


def measure(con: duckdb.DuckDBPyConnection, path: str, reader: str) -> FileProfile:
    """One aggregate query over the file's first PROFILE_ROWS rows (a file DuckDB cannot read: the error)."""
    try:
        con.execute(
            # A table, not a view: DuckDB sniffs a CSV each time a query binds it (75 ms for a 40 KB file with
            # a date column), and the profile reads it twice (describe, then the aggregates).
            f"create or replace temp table f as select * from {reader}({sql_text(path)}) limit {PROFILE_ROWS}"
        )
        described = con.execute("describe f").fetchall()
        columns = [Column(name, dtype, dtype) for name, dtype, *_ in described]
        parts = ["count(*)"]
        for c in columns:
            q = sql_ident(c.name)
            length = f"avg(length({q}))" if c.dtype == "VARCHAR" else "null"
            parts += [
                f"count({q})",
                f"approx_count_distinct({q})",
                f"cast(min({q}) as varchar)",
                f"cast(max({q}) as varchar)",
                f"{length}::double",
            ]
        row = con.execute(f"select {', '.join(parts)} from f").fetchone() or ()
        con.execute("drop table f")
    except duckdb.Error as exc:
        return FileProfile([], 0, f"not profiled: {str(exc).splitlines()[0][:300]}")
    n = int(row[0])
    profiles = []
    for i, c in enumerate(columns):
        nonnull, distinct, low, high, length = row[1 + 5 * i : 6 + 5 * i]
        stats = Stats(nonnull=int(nonnull), distinct=int(distinct), min=low, max=high, avg_length=length)
        profiles.append(column_profile(c, stats, n))
    return FileProfile(profiles, n)
