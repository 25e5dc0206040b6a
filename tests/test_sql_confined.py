"""`dareforge sql` is read-only and confined to the store: every hostile statement is refused in one line,
and nothing on disk changes, inside the store or outside it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from dareforge import table_views
from dareforge.cli import app
from dareforge.config import SqlConfig
from dareforge.confined_sql import Limits, QueryStopped, locked_connection, run_query
from dareforge.store import Store
from tests.stores import write_decisions

ANSWERS = "tasks/t1/private/answers.csv"
PARTITION = "tables/filter_decisions/kaggle.owner-0.parquet"


def decisions(store: Store, n: int, reason: str = "ok") -> None:
    write_decisions(store, f"kaggle.owner-{n}", reason=reason)


@pytest.fixture
def store(tmp_path) -> Store:
    """A store with a table, a task's public and private files, and a host file and database beside it."""
    store = Store(str(tmp_path / "store"))
    for n in range(3):
        decisions(store, n)
    store.write_bytes(ANSWERS, b"id,y\n1,42\n")
    store.write_bytes("tasks/t1/public/train.csv", b"id,x\n1,7\n")
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret.txt").write_text("host secret\n")
    with duckdb.connect(str(tmp_path / "host" / "existing.duckdb")) as existing:
        existing.execute("create table t as select 1 as x")
    return store


@pytest.fixture
def sql(store, tmp_path, monkeypatch):
    """`dareforge sql ARGS...` on the store; errors print on one line of a wide terminal."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")

    def invoke(*args: str, url: str = store.url):
        return CliRunner().invoke(app, ["-q", "--store", url, "sql", *args], catch_exceptions=False)

    return invoke


def tree(root: Path) -> dict[str, str]:
    """Every file, link and folder under `root` (links not followed) with what it holds."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def refused(result, *words: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: dareforge sql "), result.output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_queries_on_the_public_views_still_work(sql):
    result = sql(
        "select source_id, count(*) as n from filter_decisions group by all order by all", "-f", "csv"
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["source_id,n", *(f"kaggle.owner-{n},2" for n in range(3))]
    for query in (
        "from filter_decisions limit 1",
        "with d as (select * from filter_decisions) select count(*) from d",
        "describe filter_decisions",
        "show tables",
        "summarize filter_decisions",
        "values (1, 'a')",
        "select count(*) from sources",  # a table no stage wrote yet
        "select 1; select 2",
    ):
        assert sql(query).exit_code == 0, query


def test_views_over_a_compacted_table_still_read(sql, store, monkeypatch):
    monkeypatch.setattr(table_views, "COMPACT_FROM", 2)
    assert sql("select 1").exit_code == 0  # the first connection compacts the table
    assert os.listdir(Path(store.root) / table_views.CACHE)
    decisions(store, 0, reason="rewritten")  # now read from its file, the rest from the copy
    result = sql("select reason, count(*) as n from filter_decisions group by all order by all", "-f", "csv")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["reason,n", "ok,4", "rewritten,2"]


WRITES = {
    "copy-over-a-partition": ("copy (select 1 as x) to '{store}/{partition}' (format parquet)", "COPY"),
    "copy-over-a-partition-in-place": (
        "copy (select 1 as x) to '{store}/{partition}' (format parquet, use_tmp_file false)",
        "COPY",
    ),
    "explain-analyze-copy": (
        "explain analyze copy (select 1 as x) to '{store}/{partition}' (format parquet, use_tmp_file false)",
        "EXPLAIN",
    ),
    "query-then-copy": (
        "select 1; copy (select 1 as x) to '{store}/{partition}' (use_tmp_file false)",
        "COPY",
    ),
    "copy-outside": ("copy (select 1 as x) to '{tmp}/outside.csv'", "COPY"),
    "copy-from": ("copy filter_decisions from '{tmp}/host/secret.txt'", "COPY"),
    "export-database": ("export database '{tmp}/exported'", "EXPORT"),
    "attach-new": ("attach '{tmp}/new.duckdb' as n", "ATTACH"),
    "attach-existing": ("attach '{tmp}/host/existing.duckdb' as e", "ATTACH"),
    "detach": ("detach memory", "DETACH"),
    "install-httpfs": ("install httpfs", "INSTALL"),
    "load-httpfs": ("load httpfs", "LOAD"),
    "set-external-access": ("set enable_external_access = true", "SET"),
    "set-allowed-directories": ("set allowed_directories = ['/']", "SET"),
    "reset-external-access": ("reset enable_external_access", "SET"),
    "reset-lock": ("reset lock_configuration", "SET"),
    "pragma-profile-output": ("pragma profile_output = '{tmp}/profile.json'", "PRAGMA name = value"),
    "pragma-enable-profiling": ("pragma enable_profiling = 'json'", "PRAGMA"),
    "import-database": ("import database '{tmp}/host'", "PRAGMA"),
    "create-table": ("create table kept as select 1 as x", "CREATE"),
    "create-view": ("create view kept as select 1 as x", "CREATE"),
    "create-secret": ("create persistent secret (type s3, key_id 'k', secret 's')", "CREATE"),
    "insert": ("insert into filter_decisions select * from filter_decisions", "INSERT"),
    "checkpoint": ("checkpoint", "CALL"),
}


@pytest.mark.parametrize("statement, names", WRITES.values(), ids=WRITES.keys())
def test_a_statement_that_is_not_a_query_is_refused_and_changes_nothing(sql, tmp_path, statement, names):
    before = tree(tmp_path)
    query = statement.format(store=tmp_path / "store", partition=PARTITION, tmp=tmp_path)
    refused(sql(query), "read-only", names)
    refused(sql("--private", query), "read-only", names)
    assert tree(tmp_path) == before


def test_nothing_persists_between_invocations(sql):
    refused(sql("create temp table kept as select 1 as x; select * from kept"), "CREATE")
    again = sql("select * from kept")
    assert again.exit_code == 2 and "kept does not exist" in again.output


HOST_READS = {
    "read-csv-passwd": "select * from read_csv('/etc/passwd')",
    "read-text": "select * from read_text('{tmp}/host/secret.txt')",
    "read-blob": "select * from read_blob('{tmp}/host/secret.txt')",
    "replacement-scan": "select * from '{tmp}/host/secret.txt'",
    "glob": "select * from glob('{tmp}/host/*')",
    "attached-file-as-parquet": "select * from read_parquet('{tmp}/host/existing.duckdb')",
    "dot-dot-out-of-the-store": "select * from read_text('{tmp}/store/tables/../../host/secret.txt')",
    "network": "select * from read_csv('https://example.com/data.csv')",
    "symlink-out-of-the-store": "select * from read_text('{tmp}/store/raw/link.txt')",
    "symlinked-partition": "select * from filter_decisions",
    "symlinked-partition-schema": "describe filter_decisions",  # made before the lock, a view would tell
}


@pytest.mark.parametrize("private", [False, True], ids=["plain", "private"])
@pytest.mark.parametrize("query", HOST_READS.values(), ids=HOST_READS.keys())
def test_no_file_outside_the_store_is_read(sql, tmp_path, query, private):
    (tmp_path / "store" / "raw").mkdir()
    (tmp_path / "store" / "raw" / "link.txt").symlink_to(tmp_path / "host" / "secret.txt")
    outside = tmp_path / "host" / "elsewhere.parquet"
    duckdb.sql(f"copy (select 'host secret' as host_column) to '{outside}'")
    # A partition that is a link out of the store: the view itself must not read through it.
    (tmp_path / "store" / "tables" / "filter_decisions" / "linked.parquet").symlink_to(outside)
    result = sql(*["--private"] * private, query.format(tmp=tmp_path))
    line = refused(result, "reads only", "files inside the store" if private else "the store's tables")
    assert "host secret" not in line and "host_column" not in line


def test_private_answers_are_read_only_when_asked_for(sql, tmp_path):
    query = f"select y from read_csv('{tmp_path}/store/{ANSWERS}')"
    refused(sql(query), "reads only the store's tables (and with --private, its files)", "answers.csv")
    refused(sql(f"select y from read_csv('{tmp_path}/store/tables/../{ANSWERS}')"), "reads only")
    answered = sql("--private", query, "-f", "csv")
    assert answered.exit_code == 0, answered.output
    assert answered.output.splitlines() == ["y", "42"]


def test_a_remote_store_is_confined_the_same_way(sql, tmp_path):
    url = f"memory://dareforge-{tmp_path.name}"  # memory:// stands in for object storage
    remote = Store(url)
    decisions(remote, 0)
    remote.write_bytes(ANSWERS, b"id,y\n1,42\n")
    counted = sql("select count(*) as n from filter_decisions", "-f", "csv", url=url)
    assert counted.output.splitlines() == ["n", "2"]
    answers = f"select y from read_csv('{remote.duckdb_url(ANSWERS)}')"
    refused(sql(answers, url=url), "reads only the store's tables")
    assert sql("--private", answers, "-f", "csv", url=url).output.splitlines() == ["y", "42"]
    refused(sql("--private", "select * from read_csv('/etc/passwd')", url=url), "reads only")


def test_the_connection_alone_refuses_what_the_statement_check_lets_by(store, tmp_path):
    """The settings hold even for statements `dareforge sql` never lets through: a second, independent wall."""
    con = locked_connection([store.duckdb_url("")], Limits.from_config(SqlConfig()), tmp_path / "temp")
    for statement in (
        "set enable_external_access = true",
        "reset enable_external_access",
        "set lock_configuration = false",
        "set allowed_directories = ['/']",
        "set autoinstall_known_extensions = true",
    ):
        with pytest.raises(duckdb.InvalidInputException, match="locked"):
            con.execute(statement)
    for statement in (
        f"copy (select 1) to '{tmp_path}/outside.csv'",
        f"attach '{tmp_path}/new.duckdb'",
        "install httpfs",
        "load httpfs",
    ):
        with pytest.raises(duckdb.PermissionException):
            con.execute(statement)
    assert not (tmp_path / "outside.csv").exists() and not (tmp_path / "new.duckdb").exists()


def test_help_teaches_the_rule(sql):
    text = " ".join(CliRunner().invoke(app, ["sql", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "Read-only and confined to the store" in text
    assert "--private" in text and "private answers included" in text


@pytest.mark.parametrize("private", [False, True], ids=["plain", "private"])
def test_a_tmp_link_in_the_working_directory_leads_nowhere(sql, tmp_path, private):
    """DuckDB adds its temp directory (by default `.tmp` in the working directory) to the folders a query may
    read: a `.tmp` link to a host folder must not make that folder readable."""
    (tmp_path / ".tmp").symlink_to(tmp_path / "host")
    for query in ("select content from read_text('.tmp/secret.txt')", "select * from glob('.tmp/*')"):
        line = refused(sql(*["--private"] * private, query), "reads only")
        assert "host secret" not in line
    assert sorted(os.listdir(tmp_path / "host")) == ["existing.duckdb", "secret.txt"]


RUNAWAY = {
    "recursive-cte-to-1e12": (
        "with recursive r(i) as (select 1 union all select i + 1 from r where i < 1e12) select count(*) from r",
        "time",
    ),
    "cross-join-of-ranges": ("select count(*) from range(1000000) a, range(1000000) b", "time"),
    "a-2-gb-string": ("select length(repeat('x', 2000000000))", "memory"),
    "a-huge-result": ("select * from range(100000000)", "memory"),
}
"""Queries that cannot finish within the limit they reach, whatever the machine's speed: a trillion rows in a
second; 2 GB against 256 MB, given as long as it takes (a busy machine writes the string slowly)."""
RUNAWAY_LIMITS = {"time": ("1", "time limit of 1 s"), "memory": ("600", "memory limit of 256 MB")}
"""--timeout and the words of the line, per limit reached."""


@pytest.mark.parametrize("query, limit", RUNAWAY.values(), ids=RUNAWAY.keys())
def test_a_runaway_query_stops_at_its_limit_in_one_line(sql, monkeypatch, query, limit):
    """Each stops with the limit named, and the next query runs."""
    monkeypatch.setenv("DAREFORGE_SQL__MEMORY_MB", "256")
    timeout, words = RUNAWAY_LIMITS[limit]
    line = refused(sql("--timeout", timeout, query), "stopped the query at its", words)
    assert "Traceback" not in line
    assert sql("select count(*) from filter_decisions").exit_code == 0


@pytest.mark.parametrize("query, limit", RUNAWAY.values(), ids=RUNAWAY.keys())
def test_a_runaway_query_grows_its_process_by_at_most_about_its_memory_limit(store, tmp_path, query, limit):
    """The bound the README states, as the kernel counts it (the peak resident memory of the query's process):
    a 2 GB string or a 1e8-row result is stopped near 256 MB, not once it is whole. The slack is what a query
    could allocate between two checks of its memory, many times over."""
    timeout, _ = RUNAWAY_LIMITS[limit]
    limits = Limits(timeout_s=float(timeout), memory_mb=256, threads=2, spill_bytes=10**9)
    (tmp_path / "scratch").mkdir()
    with pytest.raises(QueryStopped) as stopped:
        run_query(store, query, private=False, limits=limits, scratch=tmp_path / "scratch")
    assert stopped.value.limit == limit
    assert stopped.value.grown_mb is not None and stopped.value.grown_mb <= 2 * limits.memory_mb


def test_a_query_over_many_partitions_runs_within_a_small_memory_limit(store, tmp_path, monkeypatch):
    """Memory counts what a query's process holds, not the address space DuckDB's allocator reserves: reading
    300 partition files needs a few MB, and a limit on the data segment (RLIMIT_DATA) stopped it at 64 MB (at
    3000 sources, the default 2 GB stopped `select family, count(*) from tasks group by 1`)."""
    monkeypatch.setattr(table_views, "COMPACT_FROM", 10**9)  # every file read, none compacted
    for n in range(3, 300):
        decisions(store, n)
    limits = Limits(timeout_s=600, memory_mb=64, threads=2, spill_bytes=10**9)
    for private in (False, True):
        (tmp_path / f"scratch-{private}").mkdir()
        result = run_query(
            store,
            "select count(*) from filter_decisions",
            private=private,
            limits=limits,
            scratch=tmp_path / f"scratch-{private}",
        )
        assert result.rows == [(600,)]


def test_a_timeout_past_an_hour_is_refused_naming_the_option(sql):
    result = sql("--timeout", "1e9", "select 1")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: --timeout 1e+09: give more than 0 and at most 3600 seconds (set in the command line; the "
        "default is sql.timeout_s)"
    )


@pytest.mark.parametrize("private", [False, True], ids=["plain", "private"])
def test_a_partition_linked_out_of_the_store_is_not_compacted_into_a_query(
    sql, tmp_path, monkeypatch, private
):
    """The compacted copy is written on a connection of its own (one thread); from a confined query it is
    confined the same way, so a partition linked out of the store is refused, not copied into what it reads."""
    monkeypatch.setattr(table_views, "COMPACT_FROM", 2)
    outside = tmp_path / "host" / "elsewhere.parquet"
    duckdb.sql(f"copy (select 'host secret' as host_column) to '{outside}'")
    (tmp_path / "store" / "tables" / "filter_decisions" / "linked.parquet").symlink_to(outside)
    result = sql(*["--private"] * private, "select * from filter_decisions")
    assert result.exit_code != 0
    assert "host secret" not in result.output and "host_column" not in result.output
    for copy in (tmp_path / "store" / table_views.CACHE).glob("*.parquet"):
        assert (
            "host_column" not in duckdb.sql(f"describe select * from '{copy}'").df()["column_name"].tolist()
        )
