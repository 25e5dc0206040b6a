"""Describe downloaded files (size, sha256, encoding, header) and identify the target of a source."""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import re
from pathlib import Path

import pyarrow.parquet as pq

from dareforge.schema import Source, SourceFile

CHUNK = 1 << 20
TEXT_TABLES = {".csv": ",", ".tsv": "\t"}
UNDECODABLE = "undecodable"
SAMPLE_SUBMISSION = re.compile(r"sample_?submission|submission_?(format|sample|example)", re.IGNORECASE)


def describe_file(path: Path, name: str) -> SourceFile:
    """Hash the file and, for text tables, check that it decodes and read its header, in one pass."""
    digest = hashlib.sha256()
    suffix = path.suffix.lower()
    is_text_table = suffix in TEXT_TABLES
    decoder = codecs.getincrementaldecoder("utf-8")() if is_text_table else None
    head = bytearray()
    encoding: str | None = None
    size = 0
    newlines = 0
    last = b""
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
            size += len(block)
            newlines += block.count(b"\n")
            last = block[-1:]
            if len(head) < 65536:
                head += block[: 65536 - len(head)]
            if decoder is not None:
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as exc:
                    encoding = f"{UNDECODABLE}: byte 0x{block[exc.start]:02x} at offset {size - len(block) + exc.start}"
                    decoder = None
    columns = rows = None
    if is_text_table:
        lines = newlines + (1 if last not in (b"", b"\n") else 0)
        rows = max(lines - 1, 0)
        if encoding is None:
            encoding = "utf-8-sig" if head.startswith(codecs.BOM_UTF8) else "utf-8"
            columns = _header(bytes(head), encoding, TEXT_TABLES[suffix])
    elif suffix == ".parquet":
        metadata = pq.read_metadata(path)
        columns, rows = metadata.schema.to_arrow_schema().names, metadata.num_rows
    return SourceFile(
        name=name, size=size, sha256=digest.hexdigest(), encoding=encoding, columns=columns, rows=rows
    )


def _header(head: bytes, encoding: str, delimiter: str) -> list[str]:
    text = head.decode(encoding, errors="ignore")
    first = next(csv.reader(io.StringIO(text), delimiter=delimiter), [])
    return [c.strip() for c in first]


def identify_target(
    source: Source, files: list[SourceFile], override: list[str] | None
) -> tuple[list[str], str | None]:
    """(target columns, id column) from explicit facts only: the config, the crawler's own record, a
    competition's sample submission. Everything else (names, descriptions, the data) is the understand
    stage's job; empty targets leave it to that stage."""
    if override:
        return override, source.id_column
    if source.target_columns:
        return source.target_columns, source.id_column
    tables = [f for f in files if f.columns]
    samples = [f for f in tables if SAMPLE_SUBMISSION.search(Path(f.name).stem)]
    if samples:
        # A competition's sample submission names the id column first and the targets after it.
        header = samples[0].columns or []
        train_columns = {c for f in tables if f not in samples for c in f.columns or []}
        targets = [c for c in header[1:] if c in train_columns] or header[1:]
        return targets, header[0] if header else None
    return [], source.id_column
