"""The prepare engine: one DuckDB connection per run (memory limit and threads from `prepare.*`) that loads a
raw table, profiles it, infers its ids and task, and splits it; no table is ever loaded into Python. Its jobs
live in their own modules (`rawtable`, `profile`, `infer`, `split`), mixed into `Engine` here."""

from __future__ import annotations

import codecs
import logging
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from dareforge.context import RunContext
from dareforge.describe import UNDECODABLE
from dareforge.generators.infer import InferMixin
from dareforge.generators.profile import (
    ProfileMixin,
)
from dareforge.generators.rawtable import (
    DUCKDB_ENCODINGS,
    NULL_CELLS,
    TABLE_SUFFIXES,
    PrepareError,
    RawTable,
    check_row_lengths,
    file_preamble,
    read_failure,
)
from dareforge.generators.sql import (
    UTC_OFFSET,
    Column,
    sql_ident,
    sql_text,
    timed,
)
from dareforge.generators.table_split import SplitMixin
from dareforge.schema import (
    Framing,
    PreparedSource,
    Source,
    TimeAxis,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class Engine(ProfileMixin, InferMixin, SplitMixin):
    """One DuckDB connection for the run: an in-memory database that spills to a scratch folder."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.cfg = ctx.config.prepare
        self.memory_limit, self.threads = self.cfg.duckdb_memory_limit, self.cfg.duckdb_threads
        self._con: duckdb.DuckDBPyConnection | None = None
        self._dir: Path | None = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._con is not None:
            with suppress(duckdb.Error):
                self._con.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def recover(self) -> None:
        """After an error, drop the connection if DuckDB invalidated it; the next source opens a new one."""
        if self._con is None:
            return
        try:
            self._con.execute("SELECT 1").fetchall()
        except duckdb.Error:
            self.__exit__()
            self._con = self._dir = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            # An in-memory database that spills to a scratch folder: tables larger than memory_limit move to
            # disk, and nothing outlives the run.
            self._dir = self.ctx.scratch_dir("duckdb")
            self._con = duckdb.connect(
                ":memory:",
                config={
                    "memory_limit": self.memory_limit,
                    "threads": self.threads,
                    "temp_directory": str(self._dir),
                    "preserve_insertion_order": True,
                },
            )
            self._con.execute("SET enable_progress_bar = false")
        return self._con

    def _scalar(self, sql: str) -> Any:
        rows = self.con.execute(sql).fetchall()  # fetch to the end: DuckDB then closes the result
        return rows[0][0] if rows else None

    @contextmanager
    def _local_file(self, table: RawTable, scratch: Path) -> Iterator[tuple[Path, str | None]]:
        """A local path DuckDB can read, and the encoding to tell it (transcoding what it cannot read)."""
        store = self.ctx.store
        suffix = Path(table.file.name).suffix.lower()
        path = store.local_path(table.key) if store.is_local else None
        if path is None:
            path = scratch / f"raw{suffix}"
            with store.open(table.key) as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        if suffix == ".parquet":
            yield path, None
            return
        encoding = table.encoding or "utf-8"
        if encoding.startswith(UNDECODABLE):
            raise PrepareError(
                f"{table.source_id}: {table.file.name} is not UTF-8 ({encoding}); set "
                f"sources.{table.source_id}.encoding to its encoding (e.g. latin-1)"
            )
        try:
            codec = codecs.lookup(encoding).name
        except LookupError as exc:
            raise PrepareError(
                f"{table.source_id}: unknown encoding {encoding!r}; fix sources.{table.source_id}.encoding"
            ) from exc
        if codec in DUCKDB_ENCODINGS:
            yield path, DUCKDB_ENCODINGS[codec]
            return
        # DuckDB reads UTF-8, UTF-16 and Latin-1 itself; anything else is streamed into UTF-8 first.
        utf8 = scratch / f"utf8{suffix}"
        with (
            open(path, encoding=codec, newline="") as src,
            open(utf8, "w", encoding="utf-8", newline="") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
        yield utf8, "utf-8"

    def _load(self, table: RawTable, scratch: Path) -> list[Column]:
        """Copy the table into the scratch database as `src` (text for CSV); returns its columns."""
        suffix = Path(table.file.name).suffix.lower()
        with self._local_file(table, scratch) as (path, encoding):
            if suffix == ".parquet":
                reader = f"read_parquet({sql_text(str(path))})"
                self.con.execute(f"CREATE OR REPLACE TABLE src AS SELECT * FROM {reader}")
                described = self.con.execute("DESCRIBE src").fetchall()
                return [Column(name, dtype, dtype) for name, dtype, *_ in described]
            delimiter, encoding = TABLE_SUFFIXES[suffix] or ",", encoding or "utf-8"
            options = csv_options(path, delimiter, encoding)
            reader = f"read_csv({sql_text(str(path))}, {options}"
            try:
                sniffed = self.con.execute(f"DESCRIBE SELECT * FROM {reader})").fetchall()
                check_row_lengths(table, path, encoding, delimiter, len(sniffed))
                self.con.execute(f"CREATE OR REPLACE TABLE src AS SELECT * FROM {reader}, all_varchar=true)")
            except duckdb.InvalidInputException:  # how a ragged row past the sniffer's sample fails the read
                check_row_lengths(table, path, encoding, delimiter, None)
                raise
        stored = self.con.execute("DESCRIBE src").fetchall()
        types = {name: dtype for name, dtype, *_ in sniffed}
        return [Column(name, "VARCHAR", types.get(name, "VARCHAR")) for name, _dtype, *_ in stored]

    def sample_text(self, table: RawTable, scratch: Path, rows: int) -> tuple[pa.Table, int]:
        """Every column of a raw table as text: a systematic sample of at most `rows` rows in file order, and
        the table's row count. Streaming keeps memory to one batch, whatever the file size."""
        self._check_width(table)
        return self._with_memory(lambda: self._sample_text(table, scratch, rows))

    def _sample_text(self, table: RawTable, scratch: Path, rows: int) -> tuple[pa.Table, int]:
        suffix = Path(table.file.name).suffix.lower()
        with self._local_file(table, scratch) as (path, encoding):
            if suffix == ".parquet":
                relation = f"SELECT COLUMNS(*)::VARCHAR FROM read_parquet({sql_text(str(path))})"
            else:
                delimiter, encoding = TABLE_SUFFIXES[suffix] or ",", encoding or "utf-8"
                options = csv_options(path, delimiter, encoding) + ", all_varchar=true"
                relation = f"SELECT * FROM read_csv({sql_text(str(path))}, {options})"
            try:
                reader = self.con.sql(relation).to_arrow_reader(65_536)  # sniffs the CSV once
                if suffix != ".parquet":
                    check_row_lengths(table, path, encoding, delimiter, len(reader.schema))
                return systematic_sample(reader, rows)
            except (duckdb.Error, UnicodeError, OSError, pa.ArrowException) as exc:
                if suffix != ".parquet":
                    check_row_lengths(table, path, encoding, delimiter, None)
                raise PrepareError(read_failure(table, exc)) from exc

    def prepare_table(
        self, source: Source, override: Any, table: RawTable, version: str, scratch: Path, framing: Framing
    ) -> PreparedSource:
        self._check_width(table)
        return self._with_memory(
            lambda: self._prepare_table(source, override, table, version, scratch, framing)
        )

    def _check_width(self, table: RawTable) -> None:
        width, most = len(table.columns or []), self.cfg.max_columns
        if width > most:
            sid = table.source_id
            raise PrepareError(
                f"{sid}: {table.file.name} has {width:,} columns, more than prepare.max_columns={most:,}: DuckDB "
                "holds a buffer per column, so a table this wide needs gigabytes to read however few its rows; "
                f"raise prepare.max_columns and prepare.duckdb_max_memory_limit to take it, or name a narrower "
                f"table under sources.{sid}.table"
            )

    def _with_memory(self, work: Callable[[], T]) -> T:
        """`work`, again at twice the memory limit on one thread (up to prepare.duckdb_max_memory_limit) when
        DuckDB runs out of memory; the run's own limit is back for the next table."""
        try:
            while True:
                try:
                    return work()
                except (duckdb.OutOfMemoryException, PrepareError) as exc:
                    if not _out_of_memory(exc) or not self._grow():
                        raise
        finally:
            if self.memory_limit != self.cfg.duckdb_memory_limit:
                self.__exit__()
                self._con, self._dir = None, None
                self.memory_limit, self.threads = self.cfg.duckdb_memory_limit, self.cfg.duckdb_threads

    def _grow(self) -> bool:
        now, most = size_bytes(self.memory_limit), size_bytes(self.cfg.duckdb_max_memory_limit)
        if now >= most:
            return False
        self.__exit__()
        self._con, self._dir = None, None
        self.memory_limit, self.threads = f"{min(2 * now, most) // 2**20}MB", 1
        log.info("DuckDB ran out of memory; trying again at %s on one thread", self.memory_limit)
        return True

    def _prepare_table(
        self, source: Source, override: Any, table: RawTable, version: str, scratch: Path, framing: Framing
    ) -> PreparedSource:
        try:
            try:
                with timed(source.id, "load"):
                    columns = self._load(table, scratch)
            except (duckdb.Error, UnicodeError) as exc:
                raise PrepareError(read_failure(table, exc)) from exc
            if framing.time_axis is not None and framing.time_column:
                columns = self._derive_time(columns, framing.time_axis, framing.time_column)
            dropped = {c for c in framing.dropped_columns if c not in framing.target_columns}
            if dropped:
                # Out of the public files too: an agent (or the leakage check) would find the answer there.
                kept = ", ".join(sql_ident(c.name) for c in columns if c.name not in dropped)
                self.con.execute(f"CREATE OR REPLACE TABLE src AS SELECT {kept} FROM src")
                columns = [c for c in columns if c.name not in dropped]
            return self._prepare_loaded(source, override, table, version, scratch, columns, framing)
        finally:
            for statement in ("VIEW lab", "VIEW lab_all", "TABLE held_out", "TABLE src"):
                with suppress(duckdb.Error):
                    self.con.execute(f"DROP {statement} IF EXISTS")

    def _derive_time(self, columns: list[Column], axis: TimeAxis, name: str) -> list[Column]:
        """Rebuild the framing's time axis in `src` as ISO text (which profiling reads as timestamps): parsed
        text, quarters, epochs and decimal years in place; year + month (or quarter) parts as a new column."""
        expression = time_sql(axis)
        source = axis.columns[0]
        if len(axis.columns) == 1 and source != name and name not in {c.name for c in columns}:
            # A column of dates without a name (`Unnamed: 0`), named by the understand stage: renamed in place.
            made = f"{expression or sql_ident(source)} AS {sql_ident(name)}"
            kept = ", ".join(made if c.name == source else sql_ident(c.name) for c in columns)
            self.con.execute(f"CREATE OR REPLACE TABLE src AS SELECT {kept} FROM src")
            named = Column(name, "VARCHAR", "VARCHAR")
            return [
                (named if expression else replace(c, name=name)) if c.name == source else c for c in columns
            ]
        if expression is None:
            return columns
        if name in {c.name for c in columns}:
            self.con.execute(
                f"CREATE OR REPLACE TABLE src AS SELECT * REPLACE ({expression} AS {sql_ident(name)}) FROM src"
            )
            return [Column(c.name, "VARCHAR", "VARCHAR") if c.name == name else c for c in columns]
        self.con.execute(
            f"CREATE OR REPLACE TABLE src AS SELECT *, {expression} AS {sql_ident(name)} FROM src"
        )
        return [*columns, Column(name, "VARCHAR", "VARCHAR")]


def csv_options(path: Path, delimiter: str, encoding: str) -> str:
    """DuckDB's read_csv options for a text table: its delimiter and encoding, pandas' missing cells, and the
    lines above its header to skip (a title and notes, see `describe.preamble_lines`)."""
    options = f"delim={sql_text(delimiter)}, header=true, encoding={sql_text(encoding)}, {NULL_CELLS}"
    skip = file_preamble(path, encoding, delimiter)
    return options + (f", skip={skip}" if skip else "")


def size_bytes(text: str) -> int:
    """`512MB`, `2GB`, `1.5GiB` as bytes (DuckDB's memory-limit spellings; decimal and binary units alike)."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)(i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"{text!r} is not a size such as 512MB or 2GB")
    return int(float(match.group(1)) * 1024 ** "BKMGT".index((match.group(2) or "B").upper()))


def _out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.OutOfMemoryException) or isinstance(
        exc.__cause__, duckdb.OutOfMemoryException
    )


def systematic_sample(reader: pa.RecordBatchReader, rows: int) -> tuple[pa.Table, int]:
    """(every `step`-th row, rows read) in one pass: when more than `rows` are kept, the step doubles and every
    other kept row goes, so the sample stays systematic and in file order."""
    kept, position, step = [], 0, 1
    for batch in reader:
        first = (-position) % step
        kept.append(batch.take(pa.array(range(first, batch.num_rows, step), type=pa.int64())))
        position += batch.num_rows
        while rows > 0 and sum(b.num_rows for b in kept) > rows:
            so_far = pa.Table.from_batches(kept, schema=reader.schema)
            kept = so_far.take(pa.array(range(0, so_far.num_rows, 2), type=pa.int64())).to_batches()
            step *= 2
    return pa.Table.from_batches(kept, schema=reader.schema), position


def time_sql(axis: TimeAxis) -> str | None:
    """SQL for an axis as ISO text, or None when the column is used as it is (native dates, years, row order)."""

    def text(column: str) -> str:
        return f"CAST({sql_ident(column)} AS VARCHAR)"

    def number(column: str) -> str:
        return f"TRY_CAST({sql_ident(column)} AS DOUBLE)"

    # Daily and coarser axes as dates, even when written with a clock time (a stock table's midnight stamps).
    coarse = axis.frequency in ("daily", "weekly", "monthly", "quarterly", "yearly")
    sub_daily = axis.frequency in ("hourly", "minutely") or (not coarse and "%H" in (axis.format or ""))
    iso = sql_text("%Y-%m-%d %H:%M:%S" if sub_daily else "%Y-%m-%d")
    first = axis.columns[0]
    if axis.kind == "text" and (axis.format or "").endswith("%z"):
        # The wall-clock time the text shows, its UTC offset dropped (as the understand stage reads it).
        local = f"regexp_replace(trim({text(first)}), {sql_text(UTC_OFFSET)}, '')"
        return f"strftime(try_strptime({local}, {sql_text(axis.format.removesuffix('%z'))}), {iso})"
    if axis.kind == "text":
        return f"strftime(try_strptime({text(first)}, {sql_text(axis.format or '')}), {iso})"
    if axis.kind == "quarter":
        year = f"CAST(regexp_extract({text(first)}, '(\\d{{4}})', 1) AS INTEGER)"
        quarter = f"CAST(regexp_extract({text(first)}, '[Qq]\\s*([1-4])', 1) AS INTEGER)"
        return f"strftime(make_date({year}, ({quarter} - 1) * 3 + 1, 1), {iso})"
    if axis.kind == "epoch":
        scale = 1000.0 if axis.format == "ms" else 1.0
        return f"strftime(to_timestamp({number(first)} / {scale}), {iso})"
    if axis.kind == "decimal-year":
        year = f"floor({number(first)})"
        month = f"CAST(round(({number(first)} - {year}) * 12) AS INTEGER) + 1"
        return (
            f"strftime(make_date(CAST({year} AS INTEGER) + CAST({month} > 12 AS INTEGER), "
            f"CASE WHEN {month} > 12 THEN 1 ELSE {month} END, 1), {iso})"
        )
    if axis.kind == "parts":
        year = f"CAST({number(first)} AS INTEGER)"
        second = axis.columns[1]
        names = "['jan','feb','mar','apr','may','jun','jul','aug','sep','oct','nov','dec']"
        by_name = f"list_position({names}, lower(left({text(second)}, 3)))"
        month = f"coalesce(CAST({number(second)} AS INTEGER), {by_name})"
        if len(axis.columns) == 2 and re.search(r"(?i)^(quarter|qtr|q)$", second):
            month = f"(CAST({number(second)} AS INTEGER) - 1) * 3 + 1"
        day = f"CAST({number(axis.columns[2])} AS INTEGER)" if len(axis.columns) > 2 else "1"
        return f"strftime(make_date({year}, {month}, {day}), {iso})"
    return None
