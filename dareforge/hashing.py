"""Checksums and fingerprints, one definition each (every id, version and content fingerprint in the store comes
from here, so changing one changes ids: bump the format version that feeds it instead).

- `fingerprint(*parts)`: a short (16 hex) id of JSON-able parts: source, prepared, task and variant ids and
  versions;
- `content_fingerprint(obj)`: the sha256 of an object's canonical JSON: what a release or export version holds;
- `canonical_json(obj)`: sorted keys, two-space indent, UTF-8, a final newline: every manifest's bytes;
- `sha256_bytes`, `sha256_file`: checksums of files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, BinaryIO

SHORT = 16
"""Hex digits of a short fingerprint: 64 bits, ample for ids within one store."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    with open(path, "rb") as fh:
        return sha256_stream(fh, chunk)


def sha256_stream(fh: BinaryIO, chunk: int = 1 << 20) -> str:
    """The sha256 of what is left to read in a binary file object, read a chunk at a time."""
    digest = hashlib.sha256()
    while block := fh.read(chunk):
        digest.update(block)
    return digest.hexdigest()


def short_hash(text: str) -> str:
    return sha256_bytes(text.encode())[:SHORT]


def fingerprint(*parts: Any) -> str:
    """A short id of `parts` (compact JSON, sorted keys; anything else by its `str`)."""
    return short_hash(json.dumps(parts, sort_keys=True, default=str))


_CANONICAL = json.JSONEncoder(sort_keys=True, indent=2, ensure_ascii=False, default=str)
_HASH_CHUNK = 1 << 20


def canonical_json(obj: Any) -> bytes:
    return (_CANONICAL.encode(obj) + "\n").encode()


def content_fingerprint(obj: Any) -> str:
    """The sha256 of `obj`'s canonical JSON: equal for equal content, whatever order it was built in.

    The JSON is hashed as it is encoded, never held whole: a corpus of 16,000 trajectories is hundreds of MB
    of it. The bytes hashed are `canonical_json(obj)`'s (with an indent, `json` encodes in Python, piece by
    piece, either way)."""
    digest = hashlib.sha256()
    pending: list[str] = []
    size = 0
    for piece in _CANONICAL.iterencode(obj):
        pending.append(piece)
        size += len(piece)
        if size >= _HASH_CHUNK:
            digest.update("".join(pending).encode())
            pending, size = [], 0
    pending.append("\n")
    digest.update("".join(pending).encode())
    return digest.hexdigest()
