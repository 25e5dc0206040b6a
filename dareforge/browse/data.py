"""What the workbench reads: one DuckDB connection over the store's views per server, kept while the store is
unchanged, and the queries its pages run.

A new connection makes a view per table, and each view reads its files' schemas and checks its compacted copy
(`dareforge.table_views`): at catalog size that is most of a page's time (bench/browse.py). So the server keeps
one connection and makes it again only when the store changed: a local store's table and release folders are
stat'ed per request (a write renames a file into its folder, which changes the folder's mtime), which costs
microseconds. A remote store has no such cheap signal: it gets a new connection per request, as before.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from dareforge.publish.release import RELEASES, Release
from dareforge.publish.versions import PRIVATE_SUFFIX, version_dirs, version_key
from dareforge.run_record import RUNS
from dareforge.store import TABLES, Store

PAGE_SIZE = 50
MEMORY_LIMIT = "256MB"
"""DuckDB's buffers for the server's connection (past it DuckDB spills or fails a query, never the server)."""
FILTERS = ("release", "split", "family", "difficulty", "verdict", "check", "source", "q")
"""The task list's query-string filters, in the order the form shows them."""
NO_TIER = "none"
"""The difficulty filter's value for tasks without a tier (prediction tasks: their ladder places them)."""
RELEASE_TASKS = pa.schema([("release", pa.string()), ("id", pa.string()), ("split", pa.string())])

VERDICT = "case when v.task_id is null then 'unjudged' when v.accepted then 'accepted' else 'rejected' end"
TASK_LIST_SQL = f"""
select t.id, t.family, t.source_id, t.difficulty, left(t.instruction, 160) as opening,
       {VERDICT} as verdict, coalesce(array_to_string(v.reasons, ' | '), '') as reasons,
       count(*) over () as total
from (select distinct on (id) id, family, source_id, difficulty, instruction
      from tasks where status = 'candidate' and variant_of is null) t
left join (select distinct on (task_id) task_id, accepted, reasons from verdicts) v on v.task_id = t.id
{{release_join}}
where (? is null or t.family = ?)
  and (? is null or t.source_id = ?)
  and (? is null or {VERDICT} = ?)
  and (? is null or len(list_filter(coalesce(v.reasons, []), lambda r: starts_with(r, ? || ':'))) > 0)
  and (? is null or contains(lower(t.instruction), lower(?)) or contains(t.id, ?))
  and (? is null or coalesce(t.difficulty, '{NO_TIER}') = ?)
order by t.family, t.id
limit ? offset ?
"""
"""One query per list page: the filters, the page (LIMIT/OFFSET) and the total (a window count) together."""


Signature = tuple[tuple[str, int, int], ...] | None


def _signature(store: Store, top: str) -> Signature:
    """The (mtime, inode) of folder `top` of a local store and of its subfolders (None: a remote store, which
    has no cheap signal)."""
    if not store.is_local:
        return None
    base = store.local_path(top)
    folders = [str(base)]
    if base.is_dir():
        with os.scandir(base) as entries:
            folders += [e.path for e in entries if e.is_dir() and not e.name.startswith(".")]
    found = []
    for folder in folders:
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            continue
        found.append((folder, st.st_mtime_ns, st.st_ino))
    return tuple(sorted(found))


class StoreViews:
    """The server's DuckDB connection with the store's views and a `release_tasks` table (release, task id,
    split) of every finished release version; the connection is made again when a table folder changed, the
    release table read again when a release folder changed (see the module doc)."""

    def __init__(self, store: Store):
        self.store = store
        self._con: duckdb.DuckDBPyConnection | None = None
        self._tables: Signature = None
        self._releases: Signature = None
        self._release_tasks: pa.Table | None = None
        self._summaries: list[ReleaseSummary] = []
        self._lock = threading.Lock()

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The current connection. Not a DuckDB cursor: objects registered on a connection (the store's empty
        tables, `release_tasks`) are not seen by its cursors. The pages' handlers run on the server's one
        event loop and fetch each result before the next query, so requests never interleave on it."""
        tables, releases = _signature(self.store, TABLES), _signature(self.store, RELEASES)
        with self._lock:
            if self._release_tasks is None or releases is None or releases != self._releases:
                self._summaries, self._release_tasks = read_releases(self.store)
                self._releases, self._con = releases, None
            if self._con is None or tables is None or tables != self._tables:
                # DuckDB's default keeps up to 80% of the machine's memory in its buffers; a page reads little.
                # The cap is set before the views are made: on a store whose compacted copies are stale, making
                # them (the first request) is what reads the most.
                con = self.store.connect(duckdb.connect(config={"memory_limit": MEMORY_LIMIT}))
                con.register("release_tasks", self._release_tasks)
                # The old connection is left to the collector: a request may still be reading from it.
                self._con, self._tables = con, tables
            return self._con

    def releases(self) -> list[ReleaseSummary]:
        """Every finished release version (see `read_releases`), as of the last look at the store."""
        self.connection()  # refreshes when a release folder changed
        return self._summaries

    def newest(self) -> str | None:
        """`name@version` of the newest finished version of any release (what the split filter reads alone)."""
        newest = max(self.releases(), key=lambda r: (version_key(r.version), r.name), default=None)
        return None if newest is None else newest.label

    def release(self, name: str, version: str | None) -> ReleaseSummary | None:
        """One version of a release (None: its newest), or None when there is no such finished version."""
        found = [r for r in self.releases() if r.name == name and version in (None, r.version)]
        return found[0] if found else None


def release_names(store: Store) -> list[str]:
    """Release names in the store (their private halves are not releases of their own)."""
    return sorted(n for n in version_dirs(store, RELEASES) if not n.endswith(PRIVATE_SUFFIX))


@dataclass(frozen=True)
class ReleaseSummary:
    """What the release pages show of a version, kept instead of its manifest (whose task entries, at catalog
    size, weigh tens of megabytes in Python)."""

    name: str
    version: str
    tasks: int
    counts: dict[tuple[str, str], int]
    """(family, split) -> tasks."""
    sources: list[dict[str, Any]]
    """The manifest's `sources` entries (id, split, tasks, ...)."""

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


def read_releases(store: Store) -> tuple[list[ReleaseSummary], pa.Table]:
    """Every finished version of every release (newest first within a name) and their `release_tasks` rows."""
    summaries: list[ReleaseSummary] = []
    rows: dict[str, list[str]] = {"release": [], "id": [], "split": []}
    for name in release_names(store):
        for version in reversed(Release.versions(store, name)):
            manifest = Release.load(store, name, version).manifest
            entries = manifest["tasks"]
            summary = ReleaseSummary(
                name,
                version,
                len(entries),
                dict(Counter((e["family"], e["split"]) for e in entries)),
                list(manifest.get("sources", [])),
            )
            summaries.append(summary)
            rows["release"] += [summary.label] * len(entries)
            rows["id"] += [e["id"] for e in entries]
            rows["split"] += [e["split"] for e in entries]
    return summaries, pa.table(rows, schema=RELEASE_TASKS)


@dataclass
class TaskPage:
    rows: list[dict[str, Any]]
    total: int


def task_list(con: duckdb.DuckDBPyConnection, chosen: dict[str, str | None], page: int) -> TaskPage:
    """One page of the task list under the `chosen` filters (`FILTERS`; None: not filtered)."""
    f = chosen
    release_join = ""
    params: list[Any] = []
    if f["release"] or f["split"]:
        release_join = "join release_tasks r on r.id = t.id and r.release = ? and (? is null or r.split = ?)"
        params += [f["release"], f["split"], f["split"]]
    params += [
        *(f["family"], f["family"]),
        *(f["source"], f["source"]),
        *(f["verdict"], f["verdict"]),
        *(f["check"], f["check"]),
        *(f["q"], f["q"], f["q"]),
        *(f["difficulty"], f["difficulty"]),
        PAGE_SIZE,
        (page - 1) * PAGE_SIZE,
    ]
    cursor = con.execute(TASK_LIST_SQL.format(release_join=release_join), params)
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    total = rows[0]["total"] if rows else _count(con, chosen, page)
    return TaskPage(rows, total)


def _count(con: duckdb.DuckDBPyConnection, chosen: dict[str, str | None], page: int) -> int:
    """The total when the page asked for lies past the end (the window count came back with no row)."""
    if page == 1:
        return 0
    return task_list(con, chosen, 1).total


def runs(store: Store) -> list[dict[str, Any]]:
    """The run log (`dareforge.run_record`), newest first."""
    return [store.read_json(k) for k in reversed(store.list(RUNS)) if k.endswith(".json")]
