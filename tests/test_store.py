from __future__ import annotations

import hashlib
import os
import tracemalloc

import pytest

from dareforge.errors import StoreError
from dareforge.hashing import canonical_json, content_fingerprint
from dareforge.schema import FilterDecision, Origin, Source, SourceFile
from dareforge.store import Store


def _source(**kw) -> Source:
    base = dict(id="builtin.x", origin=Origin.BUILTIN, kind="dataset", ref="pkg:x", title="X", version="v1")
    return Source(**{**base, **kw})


def test_records_round_trip_with_nested_files_and_timestamps(tmp_path):
    store = Store(str(tmp_path))
    src = _source(
        files=[SourceFile(name="a.csv", size=3, sha256="ab", encoding="utf-8", columns=["a", "b"], rows=1)],
        deadline="2024-05-01T12:00:00",
        tags=["x", "y"],
    )
    assert store.write_records(src.id, [src])
    (back,) = store.read_records(Source)
    assert back == src
    assert back.deadline.tzinfo is not None


def test_identical_rewrite_touches_nothing_and_a_change_replaces_atomically(tmp_path):
    store = Store(str(tmp_path))
    src = _source()
    store.write_records(src.id, [src])
    key = store.table_key("sources", src.id)
    before = os.stat(store.path(key)).st_mtime_ns
    assert store.write_records(src.id, [src]) is False
    assert os.stat(store.path(key)).st_mtime_ns == before
    assert store.write_records(src.id, [src.model_copy(update={"title": "Y"})]) is True
    assert store.read_records(Source)[0].title == "Y"
    assert not [p for p in (tmp_path / "tables/sources").iterdir() if p.name.startswith(".tmp-")]


def test_a_tables_state_changes_with_every_write_of_its_tables_and_only_theirs(tmp_path):
    """generate reads the whole store's framings once per state of the tables they come from."""
    store = Store(str(tmp_path))
    empty = store.tables_state("sources")
    store.write_records("builtin.x", [_source()])
    written = store.tables_state("sources")
    assert written != empty
    assert store.tables_state("sources") == written  # nothing written since
    store.write_records("builtin.x", [_source(title="Y")])
    assert store.tables_state("sources") != written
    unrelated = store.tables_state("filter_decisions")
    store.write_records("builtin.y", [_source(id="builtin.y")])
    assert store.tables_state("filter_decisions") == unrelated
    assert Store("memory://tables-state").tables_state("sources") is None  # remote: no cheap listing


def test_duckdb_views_exist_even_for_empty_tables(tmp_path):
    store = Store(str(tmp_path))
    con = store.connect()
    assert con.sql("select count(*) from sources").fetchall() == [(0,)]
    assert "reason" in con.sql("select * from filter_decisions").columns
    store.write_records("builtin.x", [_source()])
    assert store.connect().sql("select id from sources").fetchall() == [("builtin.x",)]


def test_manifest_verification_reports_a_changed_file(tmp_path):
    store = Store(str(tmp_path))
    store.write_bytes("raw/s/v1/files/a.csv", b"a\n1\n")
    from dareforge.hashing import sha256_bytes

    store.write_manifest("raw/s/v1", {"files": [{"name": "a.csv", "sha256": sha256_bytes(b"a\n1\n")}]})
    assert store.verify("raw/s/v1") == []
    (tmp_path / "raw/s/v1/files/a.csv").write_bytes(b"a\n2\n")
    (problem,) = store.verify("raw/s/v1")
    assert "raw/s/v1/files/a.csv: sha256" in problem and "!= manifest" in problem


def test_keys_cannot_escape_the_store(tmp_path):
    store = Store(str(tmp_path))
    with pytest.raises(StoreError, match="inside the store"):
        store.write_bytes("../outside.txt", b"x")
    with pytest.raises(StoreError, match="not in the store"):
        store.read_bytes("missing.json")


def test_a_copy_inside_a_local_store_shares_the_file_until_either_name_is_rewritten(tmp_path):
    """Releases hold every task file a second time; a hard link keeps that from doubling the disk a catalog
    uses per release version, and the store's rename-over writes keep each name's bytes its own."""
    store = Store(str(tmp_path))
    store.write_bytes("tasks/t/public/train.csv", b"a,b\n1,2\n")
    store.link_or_copy("tasks/t/public/train.csv", "releases/r/v1/files/t/train.csv")
    src, dst = (store.local_path(k) for k in ("tasks/t/public/train.csv", "releases/r/v1/files/t/train.csv"))
    assert os.stat(src).st_ino == os.stat(dst).st_ino
    store.write_bytes("tasks/t/public/train.csv", b"a,b\n3,4\n")
    assert dst.read_bytes() == b"a,b\n1,2\n" and src.read_bytes() == b"a,b\n3,4\n"
    assert not [p for p in dst.parent.iterdir() if p.name.startswith(".tmp-")]
    remote = Store("memory://dareforge-link-test")
    remote.write_bytes("a.txt", b"x")
    remote.link_or_copy("a.txt", "b/a.txt")
    assert remote.read_bytes("b/a.txt") == b"x"


def test_fsspec_memory_store_round_trips(tmp_path):
    # Any fsspec URL works as the root; memory:// stands in for object storage here.
    store = Store("memory://dareforge-test")
    decision = FilterDecision(
        source_id="s",
        source_version="v",
        rule="r",
        kept=False,
        reason="why",
        measured="1",
        rules_fingerprint="f",
    )
    store.write_records("s", [decision])
    assert store.read_records(FilterDecision) == [decision]
    assert store.connect().sql("select reason from filter_decisions").fetchall() == [("why",)]


def test_a_content_fingerprint_hashes_the_canonical_json_without_holding_it():
    """An SFT export of 16,000 trajectories built its whole canonical JSON (hundreds of MB) to hash it."""
    rows = {
        "rows": [
            {"text": f"é {i} " + "x" * 1000, "n": i, "at": None, "nested": {"b": 1, "a": [i]}}
            for i in range(20_000)
        ]
    }
    text = canonical_json(rows)
    assert content_fingerprint(rows) == hashlib.sha256(text).hexdigest()
    del text
    tracemalloc.start()
    try:
        content_fingerprint(rows)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # the JSON is over 20 MB
