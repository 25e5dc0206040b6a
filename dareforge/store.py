"""The artifact store: every stage output lives under one root URL (a local folder or any fsspec URL).

Writes are atomic (temp name, then rename) so a reader never sees half a file, and a write whose bytes equal
what is stored is skipped, so re-running a finished stage touches nothing. Tables are Parquet files, one per
partition, under `tables/<table>/`; DuckDB reads them through views and is never a shared mutable database.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from dareforge import locking
from dareforge.errors import StoreError
from dareforge.hashing import canonical_json, sha256_bytes
from dareforge.schema import RECORDS, Record
from dareforge.table_views import create_view, partition_files

MANIFEST = "_MANIFEST.json"
LOCKS = ".locks"
TABLES = "tables"
RECORDS_DIGEST = "dareforge.records.sha256"
R = TypeVar("R", bound=Record)


def link_or_copy_file(src: str | Path, dst: str | Path) -> None:
    """Hard-link `src` at the new path `dst` (no second copy on disk), or copy it where the filesystem cannot
    (another filesystem, or one without hard links)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


class Store:
    def __init__(self, root: str, lock_dir: str | Path | None = None):
        """`lock_dir`: where a remote store's locks live (default: under the system temp folder); a local
        store keeps them under its root, `.locks/`, so every process using the store sees the same ones."""
        self.url = root
        self.fs, self.root = fsspec.core.url_to_fs(root)
        self.is_local = "file" in (
            self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        )
        self.fs.makedirs(self.root, exist_ok=True)
        if self.is_local:
            self.lock_dir = Path(self.root) / LOCKS
        elif lock_dir is not None:
            self.lock_dir = Path(lock_dir)
        else:
            self.lock_dir = Path(tempfile.gettempdir()) / "dareforge-locks" / sha256_bytes(root.encode())[:16]

    # -- locks ----------------------------------------------------------------------------------------------
    def lock(self, name: str, *, wait: bool = True) -> AbstractContextManager[None]:
        """Hold the store lock `name` (e.g. `source/<source_id>`) for a block; see `dareforge.locking`.

        Stages take one around each thing two processes could both write or delete (a source's raw or prepared
        versions, a source's tasks, a release's versions, a table partition they read, merge and rewrite), so
        parallel workers on different sources never wait for each other and two on the same one take turns:
        the second then finds the first one's outputs and reuses them. Busy and not `wait`: StoreBusyError
        naming the holder. For a remote store the lock is machine-local: it orders the processes of one machine.
        """
        return locking.hold(
            self.lock_dir / f"{self._lock_file(name)}.lock", f"store lock {name!r}", wait=wait
        )

    def partition_lock(self, cls: type[Record], partition: str) -> AbstractContextManager[None]:
        """The lock of one table partition, for writers that read it, merge their rows in and rewrite it."""
        return self.lock(f"{TABLES}/{cls.table}/{partition}")

    @staticmethod
    def _lock_file(name: str) -> str:
        """The lock file's path under `lock_dir`: each part of `name` made a plain file name (names that differ
        only in other characters share a lock, which costs some waiting, never safety)."""
        parts = [re.sub(r"[^A-Za-z0-9_.@+-]", "_", p).lstrip(".") or "_" for p in name.split("/")]
        return "/".join(parts)

    # -- keys and plain files -------------------------------------------------------------------------------
    def path(self, key: str) -> str:
        if key.startswith("/") or ".." in key.split("/"):
            raise StoreError(f"store key {key!r} must be relative and stay inside the store")
        return f"{self.root.rstrip('/')}/{key}"

    def exists(self, key: str) -> bool:
        return self.fs.exists(self.path(key))

    def read_bytes(self, key: str) -> bytes:
        try:
            return self.fs.cat_file(self.path(key))
        except FileNotFoundError as exc:
            raise StoreError(f"{key} is not in the store at {self.url}") from exc

    def read_json(self, key: str) -> Any:
        return json.loads(self.read_bytes(key))

    def list(self, prefix: str) -> list[str]:
        """Keys of files under a prefix, sorted, relative to the store root."""
        base = self.path(prefix)
        if not self.fs.exists(base):
            return []
        root = self.root.rstrip("/") + "/"
        return sorted(
            p[len(root) :] for p in self.fs.find(base) if not p.rsplit("/", 1)[-1].startswith(".tmp-")
        )

    def _tmp(self, key: str) -> str:
        parent, _, name = self.path(key).rpartition("/")
        self.fs.makedirs(parent, exist_ok=True)
        return f"{parent}/.tmp-{uuid.uuid4().hex}-{name}"

    def write_bytes(self, key: str, data: bytes) -> bool:
        """Atomically write `data` to `key`; returns False (and writes nothing) if the stored bytes are equal."""
        if self.exists(key) and self.fs.size(self.path(key)) == len(data) and self.read_bytes(key) == data:
            return False
        tmp = self._tmp(key)
        try:
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, self.path(key))
        finally:
            if self.fs.exists(tmp):
                self.fs.rm(tmp)
        return True

    def write_json(self, key: str, obj: Any) -> bool:
        return self.write_bytes(key, canonical_json(obj))

    def put_file(self, local: str | Path, key: str) -> None:
        tmp = self._tmp(key)
        try:
            self.fs.put_file(str(local), tmp)
            self.fs.mv(tmp, self.path(key))
        finally:
            if self.fs.exists(tmp):
                self.fs.rm(tmp)

    def link_or_copy(self, src: str, dst: str) -> None:
        """Make `dst` hold `src`'s bytes: a local store hard-links the file (no second copy on disk) where the
        filesystem allows it, else copies it. Sharing an inode is safe because the store never writes a file
        in place: every write goes to a temporary name renamed over the key, which leaves the other name with
        the old bytes."""
        if not self.is_local:
            self.write_bytes(dst, self.read_bytes(src))
            return
        tmp = self._tmp(dst)
        try:
            link_or_copy_file(self.path(src), tmp)
            os.replace(tmp, self.path(dst))
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)

    def open(self, key: str, mode: str = "rb"):
        return self.fs.open(self.path(key), mode)

    def local_path(self, key: str) -> Path:
        """A local filesystem path for a key (only for a local store; remote stores stream via `open`)."""
        if not self.is_local:
            raise StoreError(f"{self.url} is not a local store; open {key} with Store.open instead")
        return Path(self.path(key))

    def remove_prefix(self, prefix: str) -> None:
        if self.fs.exists(self.path(prefix)):
            self.fs.rm(self.path(prefix), recursive=True)

    # -- manifests ------------------------------------------------------------------------------------------
    def read_manifest(self, prefix: str) -> dict[str, Any] | None:
        key = f"{prefix}/{MANIFEST}"
        return self.read_json(key) if self.exists(key) else None

    def write_manifest(self, prefix: str, manifest: dict[str, Any]) -> bool:
        """Written last: its presence marks the prefix complete."""
        return self.write_json(f"{prefix}/{MANIFEST}", manifest)

    def verify(self, prefix: str) -> list[str]:
        """Re-hash every file listed in a manifest; returns one line per mismatch (empty when all match)."""
        manifest = self.read_manifest(prefix)
        if manifest is None:
            return [f"{prefix}: no manifest"]
        problems = []
        for entry in manifest.get("files", []):
            key = f"{prefix}/files/{entry['name']}"
            if not self.exists(key):
                problems.append(f"{key}: missing")
                continue
            with self.open(key) as fh:
                digest = hashlib.file_digest(fh, "sha256").hexdigest()
            if digest != entry["sha256"]:
                problems.append(f"{key}: sha256 {digest} != manifest {entry['sha256']}")
        return problems

    # -- tables ---------------------------------------------------------------------------------------------
    def table_key(self, table: str, partition: str) -> str:
        return f"{TABLES}/{table}/{partition}.parquet"

    def write_records(self, partition: str, records: Iterable[Record]) -> bool:
        """Write one partition of a record table; returns whether anything changed."""
        records = list(records)
        if not records:
            raise StoreError(f"refusing to write an empty partition {partition!r}")
        cls = type(records[0])
        key = self.table_key(cls.table, partition)
        # The records' own checksum rides in the Parquet footer, so "unchanged?" costs a footer read, not an
        # encode-and-compare; it also lets a reader verify what it got.
        digest = sha256_bytes(b"\n".join(r.model_dump_json().encode() for r in records))
        if self.exists(key) and self.records_digest(key) == digest:
            return False
        table = pa.Table.from_pylist([r.model_dump() for r in records], schema=cls.arrow_schema())
        table = table.replace_schema_metadata({RECORDS_DIGEST: digest})
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        return self.write_bytes(key, buffer.getvalue())

    def tables_state(self, *tables: str) -> str | None:
        """A digest that changes whenever a partition of `tables` is written or removed (local stores: every
        write renames a new file into place); None for a remote store, whose listing costs a query's worth."""
        if not self.is_local:
            return None
        files = {name: partition_files(Path(self.root) / TABLES / name) for name in tables}
        listing = {name: sorted((p, sig) for p, (_, sig) in found.items()) for name, found in files.items()}
        return sha256_bytes(json.dumps(listing).encode())

    def records_digest(self, key: str) -> str | None:
        metadata = pq.read_schema(pa.BufferReader(self._arrow_buffer(key))).metadata or {}
        value = metadata.get(RECORDS_DIGEST.encode())
        return value.decode() if value else None

    def read_records(self, cls: type[R]) -> list[R]:
        return list(self.iter_records(cls))

    def iter_records(self, cls: type[R]) -> Iterator[R]:
        for key in self.list(f"{TABLES}/{cls.table}"):
            if key.endswith(".parquet"):
                yield from self._records_at(cls, key)

    def read_partition(self, cls: type[R], partition: str) -> list[R]:
        """One partition of a record table; empty when it was never written."""
        key = self.table_key(cls.table, partition)
        return list(self._records_at(cls, key)) if self.exists(key) else []

    def _arrow_buffer(self, key: str) -> pa.Buffer:
        """The file's bytes copied into Arrow-owned memory.

        pyarrow reading a Python file object, or a buffer wrapping Python bytes, can release that object from a
        reader thread while the interpreter shuts down, which aborts the process ("terminate called without an
        active exception") after an otherwise clean run, in processes that also run DuckDB.
        """
        sink = pa.BufferOutputStream()
        sink.write(self.read_bytes(key))
        return sink.getvalue()

    def read_rows(self, key: str) -> list[dict[str, Any]]:
        """The rows of any Parquet file in the store, as dicts; JSON values decoded, as `datasets` loads them."""
        table = pq.read_table(pa.BufferReader(self._arrow_buffer(key)))
        rows = table.to_pylist()
        coded = [f for f in table.schema if _has_json(f.type)]
        for row in rows:
            for f in coded:
                row[f.name] = decode_json(row[f.name], f.type)
        return rows

    def _records_at(self, cls: type[R], key: str) -> Iterator[R]:
        for row in self.read_rows(key):
            yield cls.model_validate(row)

    def duckdb_url(self, key: str) -> str:
        """Where DuckDB finds `key`: its local path, or a URL of the remote filesystem `connect` registers."""
        if self.is_local:
            return self.path(key)
        protocol = self.fs.protocol[0] if isinstance(self.fs.protocol, tuple) else self.fs.protocol
        return f"{protocol}://{self.path(key)}"

    def connect(
        self, con: duckdb.DuckDBPyConnection | None = None, tables: list[str] | None = None
    ) -> duckdb.DuckDBPyConnection:
        """`con` (default: a new in-memory DuckDB connection) with one view per table (empty tables still have
        their columns), or per table of `tables`; a local store's large tables read a compacted copy
        (`dareforge.table_views`)."""
        if con is None:
            con = duckdb.connect()
        if not self.is_local:
            con.register_filesystem(self.fs)
        for name, cls in sorted(RECORDS.items()):
            if tables is not None and name not in tables:
                continue  # each view reads its files' schemas: at thousands of partitions, a tenth of a second
            if self.is_local:
                made = create_view(con, self, name)
            elif any(k.endswith(".parquet") for k in self.list(f"{TABLES}/{name}")):
                glob = f"{self.duckdb_url(f'{TABLES}/{name}')}/*.parquet"
                con.execute(f"create view {name} as select * from read_parquet('{glob}', union_by_name=true)")
                made = True
            else:
                made = False
            if not made:
                con.register(f"_{name}_empty", cls.arrow_schema().empty_table())
                con.execute(f"create view {name} as select * from _{name}_empty")
        return con


def _has_json(kind: pa.DataType) -> bool:
    if isinstance(kind, pa.JsonType):
        return True
    if pa.types.is_list(kind):
        return _has_json(kind.value_type)
    return pa.types.is_struct(kind) and any(_has_json(f.type) for f in kind)


def decode_json(value: Any, kind: pa.DataType) -> Any:
    """A value read from a column of type `kind` with its JSON texts decoded, as `datasets` loads them."""
    if value is None:
        return None
    if isinstance(kind, pa.JsonType):
        return json.loads(value)
    if pa.types.is_list(kind):
        return [decode_json(v, kind.value_type) for v in value]
    if pa.types.is_struct(kind):
        return {f.name: decode_json(value[f.name], f.type) for f in kind}
    return value
