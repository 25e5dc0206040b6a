"""Reading a file an agent wrote, for grading: only a regular file, never followed, never more than a bound.

Every harness that pays a reward (the agent loop behind `evaluate` and the inspect scorer, the RL reward, the
grader a Harbor task bundles) reads an attempt's output through `open_regular_file` (`read_regular_file`,
`copy_regular_file`, `read_csv_columns`), so a symbolic link (to
the answers, say, or to a path that exists only when the verifier runs), a hard-to-read FIFO or device, a
folder named like the output, or a huge or sparse file is refused before a byte of it is parsed. The file is
opened once with O_NOFOLLOW and checked on its descriptor, so it cannot be swapped between the check and the
read. A CSV is streamed, never read whole: memory follows the rows and columns kept, not the file's size.

Standard library only: the module is copied byte for byte into every exported Harbor task's grader.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

MAX_PREDICTIONS_BYTES = 1 << 30
"""A predictions CSV larger than this is refused unread (a test file of millions of rows stays under it)."""
MAX_ANSWER_BYTES = 1 << 20
"""An `answer.json` larger than this is refused unread (the longest list answer is a few KB)."""


MAX_CSV_COLUMNS = 1_000
"""A CSV row (the header too) with more fields than this is refused: a submission needs a few columns."""
MAX_CELL_CHARS = 10_000
"""A CSV cell longer than this is refused: a prediction is a number, a label or an id."""
MAX_ROW_CHARS = MAX_CSV_COLUMNS * 64
"""Characters one CSV record may span (its lines together), past which it is refused before it is split."""
ROW_MARGIN = 1_000
"""Rows a submission may have past the test file's before reading stops: a few extra rows are still read (and
named as unknown keys), millions are not."""
COPY_CHUNK = 1 << 20


class UnreadableSubmission(OSError):
    """The output exists but is not a regular file of a readable size; the message says what it is instead."""


class CsvRefused(ValueError):
    """A CSV past one of the bounds above, or empty; the message names the bound and the fix."""


@contextlib.contextmanager
def open_regular_file(path: Path | str, max_bytes: int) -> Iterator[BinaryIO]:
    """`path` open for reading if it is a regular file (not a symbolic link, FIFO, socket, device or folder) of
    at most `max_bytes`. FileNotFoundError when nothing is there; UnreadableSubmission naming what is there
    otherwise. A reader must still stop past `max_bytes`: the file may grow while it is read."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnreadableSubmission(f"{path.name} is a symbolic link, not a file") from None
        if exc.errno == errno.EISDIR:
            raise UnreadableSubmission(f"{path.name} is a folder, not a file") from None
        if exc.errno in (errno.ENXIO, errno.EACCES, errno.EPERM):
            raise UnreadableSubmission(f"{path.name} cannot be opened for reading ({exc.strerror})") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise UnreadableSubmission(f"{path.name} is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableSubmission(f"{path.name} is not a regular file (a FIFO, socket or device)")
        if info.st_size > max_bytes:
            raise UnreadableSubmission(
                f"{path.name} has {info.st_size} bytes, more than the {max_bytes} allowed"
            )
        yield fh


def read_regular_file(path: Path | str, max_bytes: int) -> bytes:
    """The bytes of `path` if it is a regular file of at most `max_bytes` (`open_regular_file`)."""
    with open_regular_file(path, max_bytes) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while it was read
        raise UnreadableSubmission(f"{Path(path).name} has more than the {max_bytes} bytes allowed")
    return data


def copy_regular_file(path: Path | str, target: Path, max_bytes: int) -> None:
    """Copy `path` (`open_regular_file`'s checks) to `target`, a megabyte at a time: never the whole file in
    memory."""
    copied = 0
    with open_regular_file(path, max_bytes) as fh, open(target, "wb") as out:
        while chunk := fh.read(COPY_CHUNK):
            copied += len(chunk)
            if copied > max_bytes:  # grew while it was read
                raise UnreadableSubmission(f"{Path(path).name} has more than the {max_bytes} bytes allowed")
            out.write(chunk)


def read_csv_columns(
    path: Path | str, columns: Sequence[str], max_rows: int | None = None
) -> tuple[list[str], list[list[str]]]:
    """The header of the UTF-8 CSV at `path` (names stripped) and, per name of `columns` the header has, its
    cells stripped, in bounded memory: the file is streamed (`open_regular_file`, `MAX_PREDICTIONS_BYTES`),
    only those columns are kept, and it is refused (`CsvRefused`) past `max_rows` rows, `MAX_CSV_COLUMNS`
    fields, a record of `MAX_ROW_CHARS` or a kept cell of `MAX_CELL_CHARS`. When the header lacks one of
    `columns` no row is read (the file is refused for that). A repeated header name keeps its first column;
    blank lines are skipped; a short row's missing cells are ""."""
    name = Path(path).name
    with open_regular_file(path, MAX_PREDICTIONS_BYTES) as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8-sig", newline="")
        spanned = [0]

        def lines() -> Iterator[str]:
            read = 0
            while line := text.readline(MAX_ROW_CHARS + 1):
                read += len(line)
                spanned[0] += len(line)
                if spanned[0] > MAX_ROW_CHARS:
                    raise CsvRefused(
                        f"{name} has a record of more than {MAX_ROW_CHARS} characters; write one short line "
                        "per row"
                    )
                if read > MAX_PREDICTIONS_BYTES:  # characters never outnumber bytes: it grew while read
                    raise UnreadableSubmission(
                        f"{name} has more than the {MAX_PREDICTIONS_BYTES} bytes allowed"
                    )
                yield line

        records = csv.reader(lines())
        header: list[str] | None = None
        where: list[int] = []
        kept: list[list[str]] = [[] for _ in columns]
        rows = 0
        for record in records:
            spanned[0] = 0
            if not record:
                continue
            if len(record) > MAX_CSV_COLUMNS:
                raise CsvRefused(
                    f"{name} line {records.line_num} has {len(record)} fields, more than the {MAX_CSV_COLUMNS} "
                    "allowed; write only the columns the task asks for"
                )
            if header is None:
                header = [cell.strip() for cell in record]
                if any(c not in header for c in columns):
                    return header, []
                where = [header.index(c) for c in columns]
                continue
            if len(record) > len(header):  # pandas' words, which graders' callers know
                raise ValueError(
                    f"Expected {len(header)} fields in line {records.line_num}, saw {len(record)}"
                )
            rows += 1
            if max_rows is not None and rows > max_rows:
                raise CsvRefused(
                    f"{name} has more than {max_rows} rows (the test file's rows and a margin of {ROW_MARGIN}); "
                    "write one row per test row"
                )
            for cells, i in zip(kept, where, strict=True):
                cell = record[i].strip() if i < len(record) else ""
                if len(cell) > MAX_CELL_CHARS:
                    raise CsvRefused(
                        f"{name} line {records.line_num} has a cell of {len(cell)} characters in column "
                        f"{header[i]!r}, more than the {MAX_CELL_CHARS} allowed"
                    )
                cells.append(cell)
    if header is None:
        raise CsvRefused(f"{name} is empty; write a CSV with a header line and one row per test row")
    return header, kept
