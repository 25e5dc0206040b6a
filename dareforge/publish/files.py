"""File helpers of releases and exports: safe Parquet reads, verified copies, file entries for manifests, and a
local folder written whole."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from dareforge.errors import StoreError
from dareforge.hashing import sha256_bytes
from dareforge.schema import Record
from dareforge.store import Store

R = TypeVar("R", bound=Record)


def read_rows(store: Store, key: str) -> list[dict[str, Any]]:
    """Rows of a Parquet file in the store (read safely; see `Store.read_rows`)."""
    return store.read_rows(key)


def parquet_bytes(rows: list[dict[str, Any]], schema: pa.Schema) -> bytes:
    """`rows` as a Parquet file of `schema`. A JSON column (`pa.json_()`, also inside lists and structs) takes
    each value as its JSON text: `datasets` loads it as its `Json` feature, each value decoded on its own, so
    objects of differing keys keep exactly their own keys (a struct would give every one all keys, the missing
    ones None)."""
    buffer = io.BytesIO()
    storage = pa.schema([f.with_type(_storage(f.type)) for f in schema], metadata=schema.metadata)
    table = pa.Table.from_pylist(rows, schema=storage)
    pq.write_table(table if storage == schema else table.cast(schema), buffer, compression="zstd")
    return buffer.getvalue()


def _storage(kind: pa.DataType) -> pa.DataType:
    """`kind` with every extension type (JSON) replaced by its storage type (text), which `from_pylist` fills."""
    if isinstance(kind, pa.BaseExtensionType):
        return kind.storage_type
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_storage(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_storage(f.type)) for f in kind])
    return kind


def sha256_key(store: Store, key: str) -> str:
    with store.open(key) as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def entry(name: str, data: bytes) -> dict[str, Any]:
    return {"name": name, "size": len(data), "sha256": sha256_bytes(data)}


def write(store: Store, key: str, name: str, data: bytes) -> dict[str, Any]:
    """Write `data` to `key` (skipped when equal) and return its manifest entry under `name`."""
    store.write_bytes(key, data)
    return entry(name, data)


def copy(store: Store, src: str, dst: str, name: str, sha256: str, size: int) -> dict[str, Any]:
    """Copy `src` to `dst` inside the store (a hard link where it can: `Store.link_or_copy`), checking the bytes
    against the checksum the record promises.

    A destination that already holds those bytes is left alone, so completing a half-written release
    copies only what is missing.
    """
    if not (
        store.exists(dst) and store.fs.size(store.path(dst)) == size and sha256_key(store, dst) == sha256
    ):
        store.link_or_copy(src, dst)
        digest = sha256_key(store, dst)
        if digest != sha256:
            raise StoreError(
                f"{src}: sha256 {digest} differs from its task record ({sha256}); the store is damaged or the "
                "task was rewritten. Regenerate the task (`dareforge generate`) before releasing it."
            )
    return {"name": name, "size": size, "sha256": sha256}


@contextmanager
def staged_folder(dest: Path, *, replace: bool) -> Iterator[Path]:
    """A new folder beside `dest` to fill; when the block ends without an error it becomes `dest` in one rename,
    so no reader ever sees half of it (atomic on one filesystem), and it is removed when the block fails.
    `replace` removes an existing `dest` just before the rename; without it the rename onto a non-empty `dest`
    raises OSError."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".tmp-{uuid.uuid4().hex}-{dest.name}"
    tmp.mkdir()
    try:
        yield tmp
        if replace and dest.exists():
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
