"""Which raw file of a crawled source is its table, and how DuckDB reads it: the delimiter, the encoding, the
header, rows of the wrong length (refused, naming the line), and the errors that say so."""

from __future__ import annotations

import codecs
import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from dareforge.context import RunContext
from dareforge.crawlers.inspect import is_sample_submission
from dareforge.describe import HEAD_BYTES, UNDECODABLE, head_preamble, is_binary
from dareforge.describe import read_header as header_of
from dareforge.errors import DareforgeError
from dareforge.schema import (
    Source,
    SourceFile,
)

TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t", ".parquet": None}


DUCKDB_ENCODINGS = {"utf-8": "utf-8", "utf-8-sig": "utf-8", "utf-16": "utf-16", "iso8859-1": "latin-1"}


PANDAS_NA = (
    "",
    "#N/A",
    "#N/A N/A",
    "#NA",
    "-1.#IND",
    "-1.#QNAN",
    "-NaN",
    "-nan",
    "1.#IND",
    "1.#QNAN",
    "<NA>",
    "N/A",
    "NA",
    "NULL",
    "NaN",
    "None",
    "n/a",
    "nan",
    "null",
)
"""The cells pandas' `read_csv` reads as missing by default. Task files are read that way (every prompt says
so), so prepare reads them as missing too: a numeric column with `NA` cells is numeric on both sides, and a
target cell `N/A` is an unlabelled row, not a class named "N/A" that pandas would hand a model as NaN."""
MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "null", "none", "?", "-", "--", ".", "unknown"})
"""Cells that mean "no value" whatever their case and surrounding spaces (`is_missing_marker`), pandas' defaults
or not: the one list understanding reads columns by and question tasks treat as missing (a question says so
wherever a column it reads holds one, since pandas reads `Unknown`, `-` or `?` as text)."""


def is_missing_marker(values: pd.Series) -> pd.Series:
    """Which present cells of `values` are a `MISSING_MARKERS` entry (trimmed, case-insensitive)."""
    text = values.astype(str).str.strip().str.lower()
    return text.isin(MISSING_MARKERS) & values.notna()


NULL_CELLS = "nullstr=[" + ", ".join("'" + v.replace("'", "''") + "'" for v in PANDAS_NA) + "]"
"""The `read_csv` option that reads those cells as NULL."""


class PrepareError(DareforgeError):
    """One source cannot be prepared; the stage records the reason (which names the fix) and goes on."""


@dataclass(frozen=True)
class RawTable:
    source_id: str
    file: SourceFile
    key: str
    columns: list[str] | None
    encoding: str | None


def raw_table(source: Source, file: SourceFile, encoding: str | None) -> RawTable:
    """A raw table of a crawled source as prepare's engine reads it."""
    return RawTable(
        source.id, file, f"raw/{source.id}/{source.raw_version}/files/{file.name}", file.columns, encoding
    )


def choose_table(ctx: RunContext, source: Source, override: Any) -> RawTable:
    """The labelled table: the override's, else the largest table whose header holds every target."""
    sid = source.id
    targets = (override.target if override and override.target else None) or source.target_columns
    encoding = override.encoding if override and override.encoding else None
    undecodable = [f.name for f in source.files if (f.encoding or "").startswith(UNDECODABLE)]
    # Binary files under a table's name are no candidates: no encoding reads them (crawlers/inspect.py).
    binary = {f.name: f.encoding for f in source.files if is_binary(f)}
    hints = [f"{name} is not a text table ({why})" for name, why in binary.items()]
    if undecodable and not encoding:
        hints.append(
            f"{', '.join(undecodable)} could not be decoded: set sources.{sid}.encoding (e.g. latin-1)"
        )
    hint = "".join(f"; {h}" for h in hints)
    if not targets:
        raise PrepareError(
            f"{sid}: no target column is known; name it under sources.{sid}.target in dareforge.yaml{hint}"
        )
    prefix = f"raw/{sid}/{source.raw_version}/files"
    candidates = []
    for f in source.files:
        suffix = Path(f.name).suffix.lower()
        if suffix not in TABLE_SUFFIXES or f.name in binary:
            continue
        columns = f.columns
        if columns is None and encoding and suffix != ".parquet":
            columns = read_header(ctx, f"{prefix}/{f.name}", encoding, TABLE_SUFFIXES[suffix] or ",")
        candidates.append(RawTable(sid, f, f"{prefix}/{f.name}", columns, encoding or f.encoding))
    if override and override.table:
        chosen = [t for t in candidates if t.file.name == override.table]
        if not chosen:
            names = ", ".join(t.file.name for t in candidates) or "none"
            raise PrepareError(
                f"{sid}: sources.{sid}.table names {override.table!r}, which is not a table of the source "
                f"(tables: {names}){hint}"
            )
        return chosen[0]
    labelled = [
        t
        for t in candidates
        if not is_sample_submission(source, t.file) and t.columns and has_columns(t.columns, targets)
    ]
    if not labelled:
        raise PrepareError(
            f"{sid}: no table has the target column(s) {targets} (sample submissions do not count); name the "
            f"file under sources.{sid}.table or the target under sources.{sid}.target{hint}"
        )
    return max(labelled, key=lambda t: (t.file.size, t.file.name))


def has_columns(columns: list[str], wanted: list[str]) -> bool:
    names = set(columns) | {c.strip() for c in columns}
    return all(w in names for w in wanted)


def read_header(ctx: RunContext, key: str, encoding: str, delimiter: str) -> list[str] | None:
    """The header of a stored text table in `encoding` (below any title lines, as `describe` reads it)."""
    with ctx.store.open(key) as fh:
        head = fh.read(HEAD_BYTES)
    try:
        return header_of(head.removeprefix(codecs.BOM_UTF8), encoding, delimiter)
    except LookupError:
        return None


def first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def failure_reason(ctx: RunContext, source_id: str, exc: Exception) -> str:
    if isinstance(exc, duckdb.OutOfMemoryException):
        return (
            f"{source_id}: DuckDB ran out of memory ({first_line(exc)}); raise prepare.duckdb_memory_limit "
            f"(now {ctx.config.prepare.duckdb_memory_limit}) or free disk under {ctx.work_dir}"
        )
    return (
        f"{source_id}: prepare failed ({first_line(exc)}); see the log, or exclude it with rules.excluded_ids"
    )


def read_failure(table: RawTable, exc: Exception) -> str:
    sid = table.source_id
    if isinstance(exc, duckdb.OutOfMemoryException):
        width = f" ({len(table.columns):,} columns)" if table.columns else ""
        return (
            f"{sid}: reading {table.file.name}{width} ran DuckDB out of memory ({first_line(exc)}); raise "
            f"prepare.duckdb_max_memory_limit, or name a smaller table under sources.{sid}.table"
        )
    return (
        f"{sid}: cannot read {table.file.name} ({first_line(exc)}); if the file is not UTF-8 set "
        f"sources.{sid}.encoding (e.g. latin-1), or pick another file with sources.{sid}.table"
    )


def file_preamble(path: Path, encoding: str, delimiter: str) -> int:
    """Lines above a CSV file's header (see `describe.preamble_lines`)."""
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
    codec = "utf-8-sig" if encoding == "utf-8" else encoding
    return head_preamble(head, codec, delimiter)


def check_row_lengths(
    table: RawTable, path: Path, encoding: str, delimiter: str, sniffed: int | None
) -> None:
    """Raise a `PrepareError` naming the first row whose field count differs from the header line's.

    DuckDB's sniffer, given rows wider or narrower than the header, takes a data row for the header (columns
    named "3", "4", ...) or gives up, and a ragged row past its sample fails the read; either way the real
    problem is the ragged row. Called with the column count DuckDB found (None after a failed read), it scans
    the file only when that count disagrees with the header line, so well-formed files cost one line. A
    one-field first line is a title DuckDB skips on its own (a labelled table has at least two columns), not
    a header to hold rows to.
    """
    with open(
        path, encoding="utf-8-sig" if encoding == "utf-8" else encoding, errors="replace", newline=""
    ) as fh:
        rows = csv.reader(fh, delimiter=delimiter)
        skip = file_preamble(path, encoding, delimiter)
        try:
            for _ in range(skip):
                next(rows, None)
            header = next(rows, None)
            if header is None or len(header) < 2 or sniffed == len(header):
                return
            ragged = next(
                ((rows.line_num, len(row)) for row in rows if row and len(row) != len(header)), None
            )
        except csv.Error:  # Python's parser fails too (e.g. a field over its size limit): no verdict here
            return
    if ragged is None:
        return
    sid, (line, fields) = table.source_id, ragged
    names = ", ".join(header[:10]) + (", ..." if len(header) > 10 else "")
    raise PrepareError(
        f"{sid}: {table.file.name} line {line} has {fields} fields but its header (line {skip + 1}) has {len(header)} "
        f"({names}); every row needs one field per header column: repair or remove the ragged rows (quote "
        f"values that contain {delimiter!r}), or name another file with sources.{sid}.table"
    )
