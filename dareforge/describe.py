"""What a downloaded file is, read from its first bytes: size, sha256, encoding (or why no encoding reads it),
and a text table's header. Every stage that writes files describes them with `describe_file`."""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dareforge.errors import SourceError
from dareforge.schema import SourceFile

CHUNK = 1 << 20
HEAD_BYTES = 65536
PREAMBLE_SCAN = 20
"""Lines searched for a header below a title or notes."""
TEXT_TABLES = {".csv": ",", ".tsv": "\t"}
UNDECODABLE = "undecodable"  # text, but not UTF-8: an encoding set in dareforge.yaml reads it
BINARY = "binary"  # not text at all, whatever its name says: no encoding reads it
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_BE)
LONGEST_LINE = 2 * 1024**2
"""DuckDB's `read_csv` refuses a longer line (its max_line_size): a text table with no line break in its first
LONGEST_LINE bytes holds no row prepare could read (seen: a 300 MB CSV on one line, counted as 0 rows)."""
NOT_READ = "not read as a table"
"""How a file's note starts when the crawl found it holds no table it can read (see `crawlers.documents` too)."""


def describe_file(path: Path, name: str) -> SourceFile:
    """Hash the file and, for text tables, check that it is text, decodes, and read its header, in one pass.

    A text table whose head is binary (see `_binary_evidence`) gets the encoding `binary: <evidence>` and no
    header or row count: it is garbage or a sparse file under a table's name, and no encoding would read it. One
    whose first line runs past LONGEST_LINE gets no header or row count either, and a note saying so.
    """
    digest = hashlib.sha256()
    suffix = path.suffix.lower()
    is_text_table = suffix in TEXT_TABLES
    decoder = codecs.getincrementaldecoder("utf-8")() if is_text_table else None
    head = bytearray()
    encoding: str | None = None
    binary: str | None = None
    size = 0
    newlines = 0
    first_break: int | None = None
    last = b""
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            if size == 0 and is_text_table and (binary := _binary_evidence(block[:HEAD_BYTES])):
                decoder = None  # where UTF-8 decoding fails would only mislead
            digest.update(block)
            if first_break is None and (at := block.find(b"\n")) >= 0:
                first_break = size + at
            size += len(block)
            newlines += block.count(b"\n")
            last = block[-1:]
            if len(head) < HEAD_BYTES:
                head += block[: HEAD_BYTES - len(head)]
            if decoder is not None:
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as exc:
                    encoding = f"{UNDECODABLE}: byte 0x{block[exc.start]:02x} at offset {size - len(block) + exc.start}"
                    decoder = None
    columns = rows = note = None
    if binary:
        encoding = f"{BINARY}: {binary}"
    elif is_text_table and (size if first_break is None else first_break) > LONGEST_LINE:
        note = f"{NOT_READ}: no line break in its first {LONGEST_LINE:,} bytes"
    elif is_text_table:
        lines = newlines + (1 if last not in (b"", b"\n") else 0)
        rows = max(lines - 1, 0)
        if encoding is None:
            encoding = "utf-8-sig" if head.startswith(codecs.BOM_UTF8) else "utf-8"
            columns = read_header(bytes(head), encoding, TEXT_TABLES[suffix])
    elif suffix == ".parquet":
        try:
            metadata = pq.read_metadata(path)
        except (pa.ArrowException, OSError) as exc:
            raise SourceError(
                f"{name} is not a readable Parquet file ({exc}); replace it at the source with a valid one"
            ) from exc
        columns, rows = metadata.schema.to_arrow_schema().names, metadata.num_rows
    return SourceFile(
        name=name,
        size=size,
        sha256=digest.hexdigest(),
        encoding=encoding,
        columns=columns,
        rows=rows,
        note=note,
    )


def unread(file: SourceFile) -> bool:
    """Whether the crawl found the file holds no table it can read (its note says why)."""
    return (file.note or "").startswith(NOT_READ)


def unread_notes(files: list[SourceFile]) -> list[str]:
    """`name: note` of each file the crawl could not read as a table: the hint a reason about tables needs."""
    return [f"{f.name}: {f.note}" for f in files if unread(f)]


def is_binary(file: SourceFile) -> bool:
    """Whether `describe_file` found binary content under a text table's name."""
    return (file.encoding or "").startswith(BINARY)


def _binary_evidence(head: bytes) -> str | None:
    """Why the head of a would-be text table is binary, or None when it may be text.

    A NUL byte never occurs in UTF-8 or a single-byte encoding's text, so one in the head marks binary
    content (git decides the same way), e.g. random bytes or a sparse file of NULs. UTF-16 text holds NULs
    too and is text an encoding reads: it is recognised by its byte-order mark or, without one, by NULs that
    fall on odd offsets only or even ones only, as in mostly-ASCII UTF-16. Only the head is judged: a stray
    NUL deep in a large export is the table reader's to report, with the line it is on.
    """
    first = head.find(b"\0")
    if first < 0 or head.startswith(UTF16_BOMS):
        return None
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if min(even, odd) * 20 <= max(even, odd) and max(even, odd) * 8 >= len(head):
        return None
    return f"{even + odd:,} NUL bytes in its first {len(head):,} bytes, the first at offset {first}"


def read_header(head: bytes, encoding: str, delimiter: str) -> list[str]:
    rows = _head_rows(head, encoding, delimiter)
    header = rows[preamble_lines(rows)] if rows else []
    return [c.strip() for c in header]


def preamble_lines(rows: list[list[str]]) -> int:
    """Lines above the header: a title, notes, blanks or a row of group labels above the column names, as
    spreadsheets exported to CSV often start. The header is the first line that fills at least half as many
    fields as the fullest line near the top (a title `Beach report,,,,` or group labels `,,I Street,,Bathhouse,`
    fill fewer), and a later field than the first (a pandas index header `,value` is a header). 0 when none."""
    scanned = rows[:PREAMBLE_SCAN]
    filled = [sum(1 for cell in row if cell.strip()) for row in scanned]
    widest = max(filled, default=0)
    for position, row in enumerate(scanned):
        if 2 * filled[position] >= widest and any(cell.strip() for cell in row[1:]):
            return position
    return 0


def head_preamble(head: bytes, encoding: str, delimiter: str) -> int:
    """`preamble_lines` of a file's first bytes."""
    return preamble_lines(_head_rows(head, encoding, delimiter))


def _head_rows(head: bytes, encoding: str, delimiter: str) -> list[list[str]]:
    text = head.decode(encoding, errors="ignore")
    rows = []
    try:
        for row in csv.reader(io.StringIO(text), delimiter=delimiter):
            rows.append(row)
            if len(rows) > PREAMBLE_SCAN:
                break
    except csv.Error:
        pass
    return rows
