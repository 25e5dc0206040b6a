"""Views over many partitions read a compacted copy and stay exactly as current as the partition files."""

from __future__ import annotations

import os
import subprocess
import sys

import duckdb
import pyarrow.parquet as pq
import pytest

from dareforge import table_views
from dareforge.schema import FilterDecision
from dareforge.store import Store
from tests.stores import write_decisions

PARTITIONS = 12
HOLD = """
import sys
from dareforge.store import Store
with Store(sys.argv[1]).lock("table-copy/filter_decisions"):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def store(tmp_path, monkeypatch) -> Store:
    monkeypatch.setattr(table_views, "COMPACT_FROM", 10)
    monkeypatch.setattr(table_views, "REBUILD_SHARE", 0.25)  # more than 3 of 12 changed: rebuild
    store = Store(str(tmp_path / "store"))
    for n in range(PARTITIONS):
        write(store, n)
    return store


def write(store: Store, n: int, kept: bool = True, rules: int = 2) -> None:
    write_decisions(store, f"kaggle.owner-{n:02d}", kept=kept, rules=rules)


def rows(store: Store) -> list[tuple]:
    query = "select source_id, rule, kept from filter_decisions order by all"
    return store.connect().sql(query).fetchall()


def truth(store: Store) -> list[tuple]:
    """The same rows read from the partition files one by one, without DuckDB's views."""
    return sorted((r.source_id, r.rule, r.kept) for r in store.read_records(FilterDecision))


def copies(store: Store) -> list[str]:
    folder = os.path.join(store.root, table_views.CACHE)
    return sorted(
        n for n in os.listdir(folder) if n.startswith("filter_decisions-") and n.endswith(".parquet")
    )


def test_a_large_table_gets_one_compacted_copy_that_reads_like_its_files(store):
    assert rows(store) == truth(store) and len(truth(store)) == 2 * PARTITIONS
    assert len(copies(store)) == 1
    assert rows(store) == truth(store)  # the second connection reuses the copy
    assert len(copies(store)) == 1


def test_rewritten_added_and_removed_partitions_show_at_once_without_a_rebuild(store):
    rows(store)
    (first,) = copies(store)
    write(store, 3, kept=False, rules=3)  # rewritten with different rows
    write(store, PARTITIONS)  # new
    store.remove_prefix(store.table_key("filter_decisions", "kaggle.owner-07"))  # removed
    assert rows(store) == truth(store)
    assert ("kaggle.owner-03", "rule-2", False) in rows(store)
    assert not any(source == "kaggle.owner-07" for source, _, _ in rows(store))
    assert copies(store) == [first]  # 3 of 13 changed: below the rebuild share, read as a delta


def test_past_the_rebuild_share_the_copy_is_rebuilt_and_old_ones_pruned(store):
    rows(store)
    for round_ in range(3):
        for n in range(5):
            write(store, n, kept=bool(round_ % 2), rules=2 + round_)
        assert rows(store) == truth(store)
    # The newest two stay, for readers that opened the older one.
    assert len(copies(store)) == table_views.KEEP


def test_while_another_process_rebuilds_a_reader_uses_the_delta_view(store):
    rows(store)
    (first,) = copies(store)
    for n in range(6):
        write(store, n, kept=False)
    holder = subprocess.Popen(  # another process holds the rebuild lock, as if rebuilding
        [sys.executable, "-c", HOLD, store.root],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert rows(store) == truth(store)
        assert copies(store) == [first]
    finally:
        holder.communicate("")
    assert rows(store) == truth(store)
    assert len(copies(store)) == 2  # the lock is free again: this reader rebuilt it


def test_a_half_made_copy_is_never_read(store):
    rows(store)
    folder = os.path.join(store.root, table_views.CACHE)
    with open(os.path.join(folder, "filter_decisions-ffffffffffffffff.parquet"), "wb") as fh:
        fh.write(b"not parquet: a copy whose index was never written")
    with open(os.path.join(folder, ".tmp-1-filter_decisions-0000.parquet"), "wb") as fh:
        fh.write(b"a rebuild that died")
    write(store, 1, kept=False)
    assert rows(store) == truth(store)


def test_small_tables_read_their_files_directly(tmp_path):
    store = Store(str(tmp_path / "small"))
    for n in range(3):
        write(store, n)
    assert rows(store) == truth(store)
    assert not os.path.exists(os.path.join(store.root, table_views.CACHE))


def test_the_copy_holds_full_row_groups_across_partitions_and_leaves_the_callers_threads(store, monkeypatch):
    """A task page reads one task's rows: groups fill across partitions (not one group per partition file, nor
    one for the whole table), so a lookup skips the groups without a match; the copy is written on a connection
    of its own on one thread (what keeps the groups full), so the caller's settings are untouched (a locked
    connection compacts too: tests/test_sql_confined.py)."""
    monkeypatch.setattr(table_views, "ROW_GROUP_ROWS", 5)
    con = store.connect()
    threads = "select current_setting('threads')"
    assert con.execute(threads).fetchall() == duckdb.connect().execute(threads).fetchall()
    (copy,) = copies(store)
    groups = pq.ParquetFile(os.path.join(store.root, table_views.CACHE, copy)).metadata
    sizes = [groups.row_group(i).num_rows for i in range(groups.num_row_groups)]
    # 24 rows from 12 partitions of 2: a group ends at the first partition past ROW_GROUP_ROWS.
    assert sum(sizes) == 2 * PARTITIONS and 1 < len(sizes) < PARTITIONS
    assert all(size >= 5 for size in sizes[:-1])
    assert rows(store) == truth(store)


def test_partitions_of_older_schemas_compact_by_column_name(store):
    """Files of one schema are read by position (DuckDB's union by name costs hundreds of MB at thousands of
    files); a table whose files differ (one written before `measured` came, one with its columns in another
    order) is still unified by name."""
    folder = os.path.join(store.root, "tables", "filter_decisions")
    older, shuffled = (os.path.join(folder, f"kaggle.owner-{n:02d}.parquet") for n in (0, 1))
    pq.write_table(pq.read_table(older).drop_columns(["measured"]), older)
    table = pq.read_table(shuffled)
    pq.write_table(table.select(list(reversed(table.column_names))), shuffled)
    assert rows(store) == truth(store)
    assert len(copies(store)) == 1
    query = "select source_id, count(*) from filter_decisions where measured is null group by 1 order by 1"
    nulls = store.connect().sql(query).fetchall()
    assert ("kaggle.owner-00", 2) in nulls
