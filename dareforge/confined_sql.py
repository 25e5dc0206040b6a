"""A person's own SQL over the store (`dareforge sql`), read-only and confined to the store.

Two layers, both DuckDB's own, because neither is enough alone:

- the connection: from before the views are made, DuckDB may read only the tables' folders (with `private`,
  any file of the store), resolving symbolic links before it checks; it may not install or load extensions,
  reach the network, or change its settings again (`lock_configuration`). Tables stay views over their
  Parquet files: nothing is copied into memory.
- the statement: DuckDB's parser must find only queries (SELECT, FROM, WITH, VALUES, DESCRIBE, SHOW,
  SUMMARIZE). A folder DuckDB may read it may also write: `COPY ... TO` a table's own file (or `EXPLAIN
  ANALYZE` of one) would overwrite a partition, so a statement that is not a query never runs.

The connection is in-memory and dropped after the query, so nothing a query does outlives it.
"""

from __future__ import annotations

import duckdb

from dareforge.errors import DareforgeError
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


def confined_connection(store: Store, *, private: bool) -> duckdb.DuckDBPyConnection:
    """The store's views on a connection that may read only the tables (with `private`, any store file)."""
    con = duckdb.connect()
    readable = [store.duckdb_url(TABLES)]
    if store.is_local:
        readable.append(store.duckdb_url(CACHE))  # the compacted copies the views of large tables read
    if private:
        readable.append(store.duckdb_url(""))
    con.execute("set allowed_directories = ?", [readable])
    for setting in (
        "autoinstall_known_extensions = false",
        "autoload_known_extensions = false",
        "python_enable_replacements = false",  # a query reads the store, never the Python process's objects
        "enable_external_access = false",
        "lock_configuration = true",  # last: from here on no statement can undo the settings above
    ):
        con.execute(f"set {setting}")
    # Views last: making one reads its files' schemas, so a partition linking out of the store is refused
    # here too, not read. A large table's compacted copy is still written, in a folder the views may read.
    return store.connect(con)


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
