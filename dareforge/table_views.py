"""The store's tables as DuckDB views, fast with thousands of partitions.

A table is one Parquet file per partition (`tables/<table>/<partition>.parquet`, one per source for most
tables): writes stay small, atomic and independent, which is what concurrent workers need. Reading thousands of
small files per query is not (measured by bench/store_scale.py: seconds per query at a few thousand sources).
So a local store keeps, per table, a compacted copy for reading: `.cache/tables/<table>-<digest>.parquet`, all
partitions' rows with a `_partition` column, and beside it the signature (size, mtime, inode) of every
partition file it holds. The partition files stay the only truth; the copy is derived and disposable:

- the view reads the copy minus the partitions changed or removed since it was made, plus those changed files
  themselves, so a view is always current;
- when the changed files pass `REBUILD_SHARE` of the table (or the table first reaches `COMPACT_FROM`
  partitions) the copy is rebuilt from the old copy and the changed files, written to a temporary name and
  renamed, under a lock nobody waits for (a reader that finds it taken uses the delta view instead);
- the copy's name carries the digest of what it holds, so a half-made copy never has a name a reader looks for;
  older copies are removed once a newer one exists (the newest two stay, for readers that opened one just
  before).

A remote store (fsspec URL) reads its partition files directly.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from dareforge.hashing import sha256_bytes
from dareforge.locking import StoreBusyError

COMPACT_FROM = 200
"""Partitions from which a table gets a compacted copy (below it, reading the files directly is fast)."""
REBUILD_SHARE = 0.05
"""Share of a table's partitions changed since its copy was made that triggers a rebuild."""
PARTITION = "_partition"
ROW_GROUP_ROWS = 1024
"""A compacted copy's row group. A query that picks a few rows (the workbench's task page: `where task_id = ?`)
reads the filter column of every group but the other columns only of the groups with a match: in one group
holding the whole table, it decompresses every column it selects. Measured on 8,848 trajectories (99 MB of
steps, bench/browse.py): 37-67 ms a task's rows in one group, 9-23 ms in groups of 1,024."""
CACHE = ".cache/tables"
KEEP = 2


Signature = tuple[int, int, int]


class LocalStore(Protocol):
    """What a view needs of a local `Store`: its root folder, and its locks to rebuild a copy under (the store
    makes its views, so this module names only what it uses of it)."""

    root: str

    def lock(self, name: str, *, wait: bool = True) -> AbstractContextManager[None]: ...


def partition_files(folder: Path) -> dict[str, tuple[str, Signature]]:
    """partition -> (path, (size, mtime_ns, inode)) of a table's partition files. Every write renames a new
    file into place, so a rewrite changes the inode even when size and the clock's granularity do not tell."""
    found: dict[str, tuple[str, Signature]] = {}
    if not folder.is_dir():
        return found
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(".parquet") and not entry.name.startswith(".tmp-"):
                stat = entry.stat()
                found[entry.name[: -len(".parquet")]] = (
                    entry.path,
                    (stat.st_size, stat.st_mtime_ns, stat.st_ino),
                )
    return found


def create_view(con: duckdb.DuckDBPyConnection, store: LocalStore, name: str) -> bool:
    """Create view `name` over the partition files of table `name` in the local `store` (see the module doc);
    False when the table has no partition yet (and no view was made)."""
    root = Path(store.root)
    files = partition_files(root / "tables" / name)
    if not files:
        return False
    cache_dir = root / CACHE
    copy, held = _newest_copy(cache_dir, name)
    changed = sorted(p for p, (_, sig) in files.items() if held.get(p) != list(sig))
    gone = sorted(p for p in held if p not in files)
    if len(files) >= COMPACT_FROM and (copy is None or len(changed) + len(gone) > REBUILD_SHARE * len(files)):
        # Busy: another process rebuilds. IOException: a partition was removed while this one read it. Either
        # way the delta view below is current.
        with (
            contextlib.suppress(StoreBusyError, duckdb.IOException),
            store.lock(f"table-copy/{name}", wait=False),
        ):
            copy, held = _rebuild(con, cache_dir, name, files, copy, changed, gone)
            changed, gone = [], []
    if copy is None:
        con.execute(f"create view {name} as select * from {_read([files[p][0] for p in sorted(files)])}")
        return True
    con.register(f"_{name}_stale", _names(changed, gone))
    current = (
        f"select * exclude ({PARTITION}) from read_parquet({_sql(str(copy))}) "
        f"where {PARTITION} not in (select p from _{name}_stale)"
    )
    if changed:
        current += f" union all by name select * from {_read([files[p][0] for p in changed])}"
    con.execute(f"create view {name} as {current}")
    return True


def _names(*groups: list[str]) -> pa.Table:
    return pa.table({"p": pa.array(sorted({p for group in groups for p in group}), pa.string())})


def _read(paths: list[str], filename: bool = False, by_name: bool = True) -> str:
    extra = (", filename=true" if filename else "") + (", union_by_name=true" if by_name else "")
    return f"read_parquet([{', '.join(_sql(p) for p in paths)}]{extra})"


def _one_schema(paths: list[str]) -> bool:
    """Whether every file has the same schema (footers only). DuckDB's union_by_name holds every file's reader
    state at once: on 1,895 task partitions it took 320 MB even to count them, against about 50 MB read by
    position, so a rebuild unifies by name only when a table's files differ (written before a column came)."""
    first = pq.read_schema(paths[0])
    return all(pq.read_schema(p).equals(first) for p in paths[1:])


def _copier(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A one-thread connection with `con`'s memory cap, temp folder and (if `con` has external access off) the
    same readable folders."""
    memory, temp, external, readable = con.execute(
        "select current_setting('memory_limit'), current_setting('temp_directory'), "
        "current_setting('enable_external_access'), current_setting('allowed_directories')"
    ).fetchall()[0]
    copier = duckdb.connect(config={"threads": 1, "memory_limit": memory})
    if not external:
        copier.execute("set temp_directory = ?", [temp])  # first: DuckDB adds it to the readable folders
        copier.execute("set allowed_directories = ?", [list(readable)])
        copier.execute("set enable_external_access = false")
    return copier


def _sql(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _newest_copy(cache_dir: Path, name: str) -> tuple[Path | None, dict[str, list[int]]]:
    """The newest complete copy of table `name` and what it holds (partition -> its signature)."""
    if not cache_dir.is_dir():
        return None, {}
    copies = sorted(cache_dir.glob(f"{name}-*.parquet"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for copy in copies:
        index = copy.with_suffix(".json")
        try:
            return copy, json.loads(index.read_text())
        except (OSError, ValueError):
            continue  # a copy without its index is unusable: another one, or none
    return None, {}


def _rebuild(
    con: duckdb.DuckDBPyConnection,
    cache_dir: Path,
    name: str,
    files: Mapping[str, tuple[str, Signature]],
    copy: Path | None,
    changed: list[str],
    gone: list[str],
) -> tuple[Path, dict[str, list[int]]]:
    held = {p: list(sig) for p, (_, sig) in sorted(files.items())}
    digest = sha256_bytes(json.dumps(held, sort_keys=True).encode())[:16]
    target = cache_dir / f"{name}-{digest}.parquet"
    if target.exists() and target.with_suffix(".json").exists():
        return target, held
    cache_dir.mkdir(parents=True, exist_ok=True)
    fresh = changed if copy is not None else sorted(files)
    parts = []
    # The copy is written on a connection of its own, on one thread: on several, DuckDB ends a row group at
    # each input file (one per partition: thousands of groups of a few rows, 50x the size, every query slower);
    # on one it fills them to ROW_GROUP_ROWS, in the same order. Its own, since the caller's may have locked its
    # settings (`dareforge sql`); it takes the caller's memory cap and, from a confined caller, its confinement:
    # a partition linked out of the store is refused as the caller would refuse it.
    copier = _copier(con)
    if copy is not None:
        copier.register("_rebuild_stale", _names(changed, gone))
        parts.append(
            f"select * from read_parquet({_sql(str(copy))}) where {PARTITION} not in (select p from _rebuild_stale)"
        )
    if fresh:
        paths = [files[p][0] for p in fresh]
        parts.append(
            f"select * exclude (filename), regexp_extract(filename, '([^/]+)\\.parquet$', 1) as {PARTITION} "
            f"from {_read(paths, filename=True, by_name=not _one_schema(paths))}"
        )
    tmp = cache_dir / f".tmp-{os.getpid()}-{target.name}"
    query = " union all by name ".join(parts)
    try:
        copier.execute(
            f"copy ({query}) to {_sql(str(tmp))} (format parquet, compression zstd, row_group_size {ROW_GROUP_ROWS})"
        )
    finally:
        copier.close()
    index_tmp = cache_dir / f".tmp-{os.getpid()}-{target.stem}.json"
    index_tmp.write_text(json.dumps(held, sort_keys=True))
    os.replace(index_tmp, target.with_suffix(".json"))  # the index first: a copy is only found with its index
    os.replace(tmp, target)
    _prune(cache_dir, name, keep=target)
    return target, held


def _prune(cache_dir: Path, name: str, keep: Path) -> None:
    copies = sorted(cache_dir.glob(f"{name}-*.parquet"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in [c for c in copies if c != keep][KEEP - 1 :]:
        old.unlink(missing_ok=True)
        old.with_suffix(".json").unlink(missing_ok=True)
