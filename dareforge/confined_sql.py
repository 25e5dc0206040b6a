"""A person's own SQL over the store (`dareforge sql`), read-only, confined to the store and within limits.

Two layers, both DuckDB's own, because neither is enough alone:

- the connection: with `private`, DuckDB may read any file of the store (its tables are views over their
  Parquet files); without, no file at all: the query reads copies of the tables' public columns
  (`PRIVATE_COLUMNS`), made by a second connection that may read only the tables' folders. Either way it
  resolves symbolic links before it checks, may not install or load extensions, reach the network, or change
  its settings again (`lock_configuration`), and its temp directory is a fresh folder of this process.
- the limits (`Limits`, `sql.*` in the config): the query runs in a child process (`_in_child`), killed at
  its wall-clock time limit or once its resident memory has grown by `sql.memory_mb`; inside it DuckDB's
  memory_limit (half of that: larger intermediate results spill), threads and spill disk. Each is reported in
  one line.
- the statement: DuckDB's parser must find only queries (SELECT, FROM, WITH, VALUES, DESCRIBE, SHOW,
  SUMMARIZE). A folder DuckDB may read it may also write: `COPY ... TO` a table's own file (or `EXPLAIN
  ANALYZE` of one) would overwrite a partition, so a statement that is not a query never runs.

The connection is in-memory and its process ends with the query, so nothing a query does outlives it.

Copies, not a lazy scan: registering a `pyarrow.dataset` of each table's public columns in the no-file
connection would read only what a query uses (at 3000 sources, `select family, count(*) from tasks group by
1` took 0.013 s and 21 MB that way, against 0.12 s and 96 MB to copy the public columns of `tasks` first;
`select count(*) from validations`, 255,000 rows: 0.06 s and 50 MB against 0.13 s and 128 MB). It would also
spell the view's rules a second time (a compacted copy minus changed partitions plus their files,
`dareforge.table_views`; a remote store's file system; DuckDB's `union_by_name` types) and leave a raw object
behind each redacted column that the query could name. At this scale the copy costs a tenth of a second and
counts against the query's memory limit (DuckDB spills it past its half); a store ten times larger makes the
lazy scan worth those costs.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from dareforge.config import SqlConfig
from dareforge.config_limits import SQL_MAX_TIMEOUT_S
from dareforge.errors import DareforgeError
from dareforge.schema import RECORDS
from dareforge.store import TABLES, Store
from dareforge.table_views import CACHE

QUERY_KINDS = "SELECT, FROM, WITH, VALUES, DESCRIBE, SHOW, SUMMARIZE"

WHY_REFUSED = {
    "COPY": "COPY reads or writes files",
    "COPY_DATABASE": "COPY FROM DATABASE writes a database",
    "EXPORT": "EXPORT DATABASE writes files",
    "ATTACH": "ATTACH opens or creates a database file",
    "DETACH": "DETACH closes a database",
    "LOAD": "INSTALL and LOAD fetch and run extensions",
    "SET": "SET, RESET and PRAGMA name = value change settings, file access among them",
    "PRAGMA": "PRAGMA changes settings, and IMPORT DATABASE reads files",
    "EXPLAIN": "EXPLAIN ANALYZE runs the statement it explains",
    "CALL": "CALL runs procedures such as CHECKPOINT",
}
"""Why a kind of statement is refused, where "it is not a query" does not say enough."""


PRIVATE_COLUMNS: dict[str, dict[str, str]] = {
    "tasks": {
        "spec": "a question task's reference program (the code that computes its answer), an IF task's "
        "machine-readable workflow",
        "private_files": "names, sizes and checksums of answers and reference outputs (a small answer's checksum "
        "can be brute-forced)",
        "scores": "the reference models' scores on the private answers",
    },
    "validations": {
        "details": "what each check measured against the answers and reference outputs (the trivial check's "
        "score for every guess narrows a numeric answer down)"
    },
    "trajectories": {
        "steps": "every message, code cell and output: a gold trajectory runs the reference program, and a "
        "passing one states the answer",
        "files": "checksums of the answer files an agent wrote",
        "detail": "how the grader compared the answer with the certified one",
    },
    "reviews": {
        "note": "a reviewer's words about a task they may have seen with --private, which may quote its "
        "reference or answer (a rejection's note reaches the verdict, but that task is never released)"
    },
    "judgements": {
        "rationale": "the judge's words about a trajectory, which may quote its answer",
        "detail": "the judge's malformed reply, which may quote the trajectory",
    },
}
"""Columns a query without --private never sees, and why; every other column is public (the release keeps the
same parts of a task private: `dareforge.publish.release`). A new column is public until listed here, so
tests/test_sql_public.py names every public column: adding one fails that test until someone decides."""

REDACTED_COLUMNS: dict[str, dict[str, str]] = {
    # The prepared answers' file (generators.table_split.FILES) is private; its checksum would be too.
    "prepared": {"files": "list_filter(files, lambda f: f.name <> 'answers.csv')"},
}
"""Columns a query without --private sees only in part: the expression that keeps the public part."""


@dataclass(frozen=True)
class Limits:
    """What one query may use: wall-clock seconds, growth of its process's memory, threads, spill disk."""

    timeout_s: float
    memory_mb: int
    threads: int
    spill_bytes: int

    @classmethod
    def from_config(cls, config: SqlConfig, timeout_s: float | None = None) -> Limits:
        """The config's limits, with `--timeout` when given (it has the config's bound)."""
        if timeout_s is not None and not 0 < timeout_s <= SQL_MAX_TIMEOUT_S:
            raise DareforgeError(
                f"--timeout {timeout_s:g}: give more than 0 and at most {SQL_MAX_TIMEOUT_S} seconds (set in the "
                "command line; the default is sql.timeout_s)"
            )
        return cls(timeout_s or config.timeout_s, config.memory_mb, config.threads, config.spill_bytes)


@dataclass
class Result:
    """A query's columns and rows, read whole within the limits (so printing them needs no limit)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


def run_query(store: Store, query: str, *, private: bool, limits: Limits, scratch: Path) -> Result:
    """Run a person's `query` over the store, read-only, confined, within `limits`; the last statement's
    result. What goes wrong is a one-line DareforgeError (a refused file, a limit reached, DuckDB's own error).

    `scratch` is a fresh folder of this process (never the working directory): DuckDB's temp directory, which
    it adds to the folders a query may read, so a `.tmp` link in the working directory leads nowhere."""
    statements = read_only_statements(query)
    return _in_child(limits, lambda: _answer(store, statements, private, limits, scratch))


def _answer(
    store: Store, statements: list[duckdb.Statement], private: bool, limits: Limits, scratch: Path
) -> Result:
    """The query's result, in the child process `_in_child` watches."""
    try:
        con = _query_connection(store, private, limits, scratch, statements)
        relations = [con.sql(statement) for statement in statements]
        if not relations:
            return Result([], [])
        last = relations[-1]
        return Result(list(last.columns), last.fetchall())  # a refused file can surface here too
    except duckdb.PermissionException as exc:
        raise refused_read(exc, private=private) from exc
    except (duckdb.OutOfMemoryException, MemoryError) as exc:  # DuckDB's buffers full, and no spill left
        raise _stopped(limits, "memory", first_line(exc)) from exc
    except duckdb.Error as exc:
        raise DareforgeError(first_line(exc)) from exc


def _query_connection(
    store: Store, private: bool, limits: Limits, scratch: Path, statements: list[duckdb.Statement]
) -> duckdb.DuckDBPyConnection:
    """With `private`, the store's views on a connection that may read any file of the store. Without, a
    connection that may read no file at all, holding copies of the public columns of the tables the query
    names: a view over a table's files would let `read_parquet` read the same files whole, private columns
    included."""
    if private:
        return store.connect(locked_connection([store.duckdb_url("")], limits, scratch / "query"))
    readable = [store.duckdb_url(TABLES)]
    if store.is_local:
        readable.append(store.duckdb_url(CACHE))  # the compacted copies the views of large tables read
    # Views last: making one reads its files' schemas, so a partition linking out of the store is refused
    # here too, not read. A large table's compacted copy is still written, in a folder the views may read.
    con = locked_connection([], limits, scratch / "query")
    named = _tables_named(con, statements)
    loader = store.connect(locked_connection(readable, limits, scratch / "load"), tables=named)
    for name in named:
        public = _public_select(name, loader.sql(f"select * from {name} limit 0").columns)
        con.register("_public", loader.sql(public).to_arrow_reader())  # streamed: one batch at a time
        con.execute(f"create table {name} as select * from _public")
        con.unregister("_public")
    loader.close()
    return con


def _tables_named(con: duckdb.DuckDBPyConnection, statements: list[duckdb.Statement]) -> list[str]:
    """The store's tables the statements name; all of them for one that names none (SHOW TABLES)."""
    named: set[str] = set()
    for statement in statements:
        try:
            found = {n.lower() for n in con.get_table_names(statement.query)}
        except duckdb.Error:
            found = set()
        if not found & RECORDS.keys():
            return sorted(RECORDS)
        named |= found & RECORDS.keys()
    return sorted(named)


def _public_select(name: str, columns: list[str]) -> str:
    private = [c for c in PRIVATE_COLUMNS.get(name, {}) if c in columns]
    redacted = {c: e for c, e in REDACTED_COLUMNS.get(name, {}).items() if c in columns}
    select = "select *"
    if private:
        select += f" exclude ({', '.join(private)})"
    if redacted:
        select += f" replace ({', '.join(f'{e} as {c}' for c, e in redacted.items())})"
    return f"{select} from {name}"


def locked_connection(readable: list[str], limits: Limits, temp: Path) -> duckdb.DuckDBPyConnection:
    """A connection that may read only `readable` (and its own temp folder), within `limits`."""
    con = duckdb.connect()  # a remote store's file system is registered by `Store.connect`, if it reads files
    temp.mkdir(mode=0o700)
    for setting, value in (
        # First: DuckDB adds its temp directory to the readable folders (default: .tmp in the working
        # directory, which anyone may have made a link to /etc).
        ("temp_directory", str(temp)),
        ("max_temp_directory_size", f"{limits.spill_bytes}B"),
        ("memory_limit", f"{limits.memory_mb // 2}MB"),  # half: the result read into Python needs the rest
        ("threads", limits.threads),
        ("enable_progress_bar", False),  # it would print into the result
        ("allowed_directories", readable),
    ):
        con.execute(f"set {setting} = ?", [value])
    for setting in (
        "autoinstall_known_extensions = false",
        "autoload_known_extensions = false",
        "python_enable_replacements = false",  # a query reads the store, never the Python process's objects
        "enable_external_access = false",
        "lock_configuration = true",  # last: from here on no statement can undo the settings above
    ):
        con.execute(f"set {setting}")
    return con


WATCH_EVERY_S = 0.005
"""How often the query's process is checked against its limits: past its memory limit it grows by at most what
it allocates in this time before it is killed (tens of MB at the speed memory can be written)."""


class QueryStopped(DareforgeError):
    """A query stopped at one of its limits: `limit` is "time" or "memory"; `grown_mb` how much the query's
    process had grown at its peak (its own count, the kernel's: exact whatever the checks saw)."""

    def __init__(self, message: str, limit: str, grown_mb: float | None = None):
        super().__init__(message)
        self.limit = limit
        self.grown_mb = grown_mb


def _stopped(limits: Limits, limit: str, detail: str = "", grown_mb: float | None = None) -> QueryStopped:
    if limit == "time":
        return QueryStopped(
            f"dareforge sql stopped the query at its time limit of {limits.timeout_s:g} s (sql.timeout_s, or "
            "--timeout up to an hour); narrow the query, or give it more time",
            limit,
            grown_mb,
        )
    duckdb_says = f": {detail}" if detail else ""
    return QueryStopped(
        f"dareforge sql stopped the query at its memory limit of {limits.memory_mb} MB (sql.memory_mb; spill "
        f"disk sql.spill_bytes){duckdb_says}; narrow the query, or raise the limit",
        limit,
        grown_mb,
    )


def _in_child(limits: Limits, work: Callable[[], Result]) -> Result:
    """`work()` run in a child process of this one, which is killed at the time limit or once its resident
    memory has grown by `limits.memory_mb` since it was forked; `work`'s result, or its DareforgeError.

    A kill, because nothing inside the process can stop every query: DuckDB's interrupt is seen only between
    two chunks of work, and one `repeat('x', 2e9)` is a single call that writes a 2 GB string (interrupted at
    256 MB of growth it still finished, at 3.9 GB); its memory_limit counts its buffers, not such a string;
    and RLIMIT_DATA counts address space DuckDB's allocator reserves and never touches (at 3000 sources
    `select family, count(*) from tasks group by 1` passed 2 GB of it at 0.5 GB resident). Forked, not
    started afresh: the child has the store (a remote one's file system lives in this process), at the cost
    of a few milliseconds."""
    read_end, write_end = os.pipe()
    start = _resident_bytes(os.getpid())  # the child starts with this process's pages, shared
    pid = os.fork()
    if pid == 0:  # the child never returns to the caller
        code = 1
        try:
            os.close(read_end)
            with os.fdopen(write_end, "wb") as replies:
                try:
                    reply: tuple[str, Any] = ("result", work())
                except DareforgeError as exc:
                    reply = ("error", str(exc))
                pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)  # streamed, in frames
            code = 0
        except BaseException:
            traceback.print_exc()  # a defect of this module, not of the query: the parent says the child failed
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    watch = _Watch(pid, limits, start)
    watcher = threading.Thread(target=watch.run, name="sql-watch", daemon=True)
    watcher.start()
    reply = None
    try:
        with os.fdopen(read_end, "rb") as replies, contextlib.suppress(EOFError, pickle.UnpicklingError):
            reply = pickle.load(replies)  # EOF or a cut pickle: the child was killed, or failed
    finally:
        watch.ended.set()
        watcher.join()
        # Done already, or this process was interrupted (Ctrl-C): either way no query outlives the call.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
    grown_mb = max(0, usage.ru_maxrss * 1024 - start) / 1024**2
    if watch.reached:
        raise _stopped(limits, watch.reached, grown_mb=grown_mb)
    if reply is None:
        code = os.waitstatus_to_exitcode(status)
        raise DareforgeError(
            f"dareforge sql: the query's process ended without an answer (exit status {code}); its error, if any, "
            "is printed above"
        )
    kind, value = reply
    if kind == "error":
        raise DareforgeError(value)
    return value


class _Watch:
    """Kills the query's process at its time limit, or when its resident memory passes its limit."""

    def __init__(self, pid: int, limits: Limits, start: int):
        self.pid = pid
        self.deadline = time.monotonic() + limits.timeout_s
        self.ceiling = start + limits.memory_mb * 1024**2
        self.ended = threading.Event()
        self.reached: str | None = None

    def run(self) -> None:
        while not self.ended.wait(WATCH_EVERY_S):
            try:
                resident = _resident_bytes(self.pid)
            except OSError:
                return  # it exited
            if resident > self.ceiling:
                self.reached = "memory"
            elif time.monotonic() > self.deadline:
                self.reached = "time"
            else:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            return


def _resident_bytes(pid: int) -> int:
    """A process's resident memory now, from /proc/<pid>/statm (Linux)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except FileNotFoundError:
        if pid == os.getpid():
            raise DareforgeError("dareforge sql needs /proc (Linux) to bound a query's memory") from None
        raise


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def read_only_statements(query: str) -> list[duckdb.Statement]:
    """The statements of `query` as DuckDB parses them; a DareforgeError naming the first that is not a query."""
    statements = duckdb.extract_statements(query)
    for statement in statements:
        kind = statement.type.name
        if kind != "SELECT":
            why = WHY_REFUSED.get(kind, f"{kind} changes the database")
            raise DareforgeError(
                f"dareforge sql is read-only: {why}; it runs queries only ({QUERY_KINDS}); to write or export, "
                "use `dareforge export`, or duckdb yourself on a copy of the store"
            )
    return statements


def refused_read(exc: duckdb.PermissionException, *, private: bool) -> DareforgeError:
    """DuckDB's refusal to touch a file (or the network), with the rule that refused it."""
    may_read = "files inside the store" if private else "the store's tables (and with --private, its files)"
    return DareforgeError(f"dareforge sql reads only {may_read}: {str(exc).splitlines()[0]}")
