"""The prepare stage: profile a source's labelled table with DuckDB, pick its columns and task, split it.

Per source it writes `prepared/<source_id>/<version>/files/{train,test,answers}.csv`, then the version's
`_MANIFEST.json` (checksums and the record), then the `PreparedSource` record. `version` fingerprints everything
that defines the output, so a version whose manifest exists is finished and is only verified, never rebuilt.

No table is ever loaded into Python: one DuckDB connection per run (memory limit and threads from
`prepare.*`) reads the raw file into an in-memory table that spills to a folder under `store.work_dir` when
it outgrows the memory limit, profiles it with one aggregate query per batch of columns, splits it in SQL and
writes the CSVs with `COPY`. A CSV is read as text, so values reach train/test/answers exactly as the source wrote them;
column types are DuckDB's sniffed types, checked against every row.
"""

from __future__ import annotations

import codecs
import csv
import io
import logging
import math
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from dareforge.config import SourceOverride
from dareforge.context import RunContext
from dareforge.crawlers.inspect import SAMPLE_SUBMISSION, UNDECODABLE, is_binary
from dareforge.errors import DareforgeError, StoreError
from dareforge.hashing import fingerprint, sha256_file
from dareforge.queries import framed_source_ids, why_none
from dareforge.schema import (
    ColumnKind,
    ColumnProfile,
    Framing,
    PreparedSource,
    PrepareFailure,
    Source,
    SourceFile,
    Task,
    TaskType,
    TimeAxis,
)

log = logging.getLogger(__name__)

PREPARE_FORMAT = 3
"""Bump when the output of prepare changes for the same inputs, so every source is prepared again.
3: prepared per framing (understand stage), time axes rebuilt from their parts."""

FILES = ("train.csv", "test.csv", "answers.csv")
TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t", ".parquet": None}
ROW_ID = "row_id"
EXACT_DISTINCT_ROWS = 1_000_000
"""Up to this many rows distinct counts are exact; above, DuckDB's HyperLogLog estimate (still deterministic)."""
COLUMN_BATCH = 200
TOP_VALUES = 10
TEXT_MIN_LENGTH = 20
TEXT_MIN_DISTINCT = 10
TEXT_DISTINCT_SHARE = 0.5
ID_NAME = r"(?i)^id$|[ _.-]id$|(?-i:[a-z0-9](Id|ID))$"
DUCKDB_ENCODINGS = {"utf-8": "utf-8", "utf-8-sig": "utf-8", "utf-16": "utf-16", "iso8859-1": "latin-1"}

INTEGER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER"}
INTEGER_TYPES |= {"UBIGINT", "UHUGEINT"}
FLOAT_TYPES = {"FLOAT", "DOUBLE", "REAL"}
DATETIME_TYPES = {"DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_S", "TIMESTAMP_MS"}
DATETIME_TYPES |= {"TIMESTAMP_NS", "TIMESTAMP_TZ"}
FALLBACK = {"DATE": "TIMESTAMP"}
"""A sniffed type that fails on some row is widened: integers to DOUBLE, DATE to TIMESTAMP, else VARCHAR."""


class PrepareError(DareforgeError):
    """One source cannot be prepared; the stage records the reason (which names the fix) and goes on."""


class PreparedIntegrityError(StoreError):
    """Stored prepared files no longer match their manifest."""


@dataclass
class PrepareReport:
    prepared: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict, repr=False)
    """Why each failed source failed, with the fix."""
    written: list[str] = field(default_factory=list)


# -- public API -----------------------------------------------------------------------------------------------
def prepare(ctx: RunContext, source_ids: list[str] | None = None) -> PrepareReport:
    """Prepare each chosen framing of each source (default: every source the understand stage framed);
    returns what happened to each, labelled `source_id/framing`."""
    ids = source_ids if source_ids is not None else framed_source_ids(ctx)
    report = PrepareReport()
    with Engine(ctx) as engine, ctx.progress() as progress:
        bar = progress.add_task("prepare", total=len(ids), item="")
        for source_id in ids:
            progress.update(bar, item=source_id)
            with ctx.source_lock(source_id):
                _prepare_source(ctx, engine, source_id, report)
            progress.advance(bar)
    return report


def prepare_failure(ctx: RunContext, source_id: str) -> PrepareFailure | None:
    """Why the last prepare of a source failed, or None when it did not fail (or never ran)."""
    rows = ctx.store.read_partition(PrepareFailure, source_id)
    return rows[-1] if rows else None


def _record_failure(ctx: RunContext, source_id: str, reason: str, report: PrepareReport) -> None:
    """Store the reason where `generate` (another process, maybe another machine) can tell the user; an id
    that names no stored source is a typo, not a source to remember."""
    sources = ctx.store.read_partition(Source, source_id)
    if not sources:
        return
    failure = PrepareFailure(source_id=source_id, source_version=sources[-1].version, reason=reason)
    if ctx.store.write_records(source_id, [failure]):
        report.written.append(ctx.store.table_key(PrepareFailure.table, source_id))


def _prepare_source(ctx: RunContext, engine: Engine, source_id: str, report: PrepareReport) -> None:
    """Every chosen framing of one source; the caller holds the source's lock."""
    stored = ctx.store.read_partition(Framing, source_id)
    framings = [f for f in stored if f.status == "chosen"]
    if not framings:
        found = (
            f"the understand stage found no task in it ({why_none(stored)})" if stored else "not understood"
        )
        reason = (
            f"{source_id}: {found}; run `dareforge understand` (see `dareforge sources --why {source_id}`)"
        )
        report.failed.append(source_id)
        report.reasons[source_id] = reason
    records: list[PreparedSource] = []
    for framing in framings:
        label = f"{source_id}/{framing.framing}"
        try:
            records.append(_prepare_framing(ctx, engine, source_id, framing, report, label))
        except (PrepareError, duckdb.Error, OSError) as exc:
            reason = str(exc) if isinstance(exc, PrepareError) else _failure(ctx, source_id, exc)
            engine.recover()
            log.warning("prepare %s failed: %s", label, reason)
            report.failed.append(label)
            report.reasons[label] = reason
    failed = [label for label in report.failed if label.split("/")[0] == source_id]
    if failed:
        _record_failure(ctx, source_id, "; ".join(report.reasons[label] for label in failed), report)
    elif framings:
        ctx.store.remove_prefix(ctx.store.table_key(PrepareFailure.table, source_id))
    if records:
        _write_records(ctx, source_id, records, report)
    if any(label.startswith(f"{source_id}/") for label in report.prepared):
        _remove_unused(ctx, source_id, records)


def prepared_of(ctx: RunContext, task: Task) -> PreparedSource | None:
    """The prepared framing a task was built from (its current preparation when that one is gone)."""
    framings = load_prepared(ctx, task.source_id, task.framing)
    exact = [p for p in framings if p.version == task.prepared_version]
    return (exact or framings or [None])[0]


def load_prepared(ctx: RunContext, source_id: str, framing: str | None = None) -> list[PreparedSource]:
    """The prepared records of a source, one per framing (only `framing` when given); empty when none."""
    rows = ctx.store.read_partition(PreparedSource, source_id)
    return [r for r in rows if framing is None or r.framing == framing]


def prepared_file(ctx: RunContext, prepared: PreparedSource, name: str) -> Path:
    """Local path of `train`, `test` or `answers` (with or without `.csv`) of a prepared source."""
    name = name if name.endswith(".csv") else f"{name}.csv"
    if name not in FILES:
        raise DareforgeError(f"prepared sources have {', '.join(FILES)}, not {name!r}")
    key = f"{_prefix(prepared.source_id, prepared.version)}/files/{name}"
    if not ctx.store.exists(key):
        raise StoreError(
            f"{key} is missing from the store at {ctx.store.url}; run `dareforge prepare` for "
            f"{prepared.source_id} again"
        )
    if ctx.store.is_local:
        return ctx.store.local_path(key)
    # Shared by the processes on this machine: content-checked, and replaced atomically under a unique temp name.
    local = ctx.work_dir / "prepared-cache" / prepared.source_id / prepared.version / name
    expected = next((f.sha256 for f in prepared.files if f.name == name), None)
    if not local.exists() or sha256_file(local) != expected:
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".tmp-{uuid.uuid4().hex}-{name}")
        with ctx.store.open(key) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        tmp.replace(local)
    return local


# -- one source -----------------------------------------------------------------------------------------------
def raw_table(source: Source, file: SourceFile, encoding: str | None) -> _Table:
    """A raw table of a crawled source as prepare's engine reads it."""
    return _Table(
        source.id, file, f"raw/{source.id}/{source.raw_version}/files/{file.name}", file.columns, encoding
    )


def _prefix(source_id: str, version: str) -> str:
    return f"prepared/{source_id}/{version}"


def _prepare_framing(
    ctx: RunContext, engine: Engine, source_id: str, framing: Framing, report: PrepareReport, label: str
) -> PreparedSource:
    source = framed_source(_load_source(ctx, source_id), framing)
    override = _framing_override(ctx.config.sources.get(source_id), framing)
    version = _version(ctx, source, framing)
    prefix = _prefix(source_id, version)
    manifest = ctx.store.read_manifest(prefix)
    if manifest is not None:
        problems = ctx.store.verify(prefix)
        if problems:
            raise PreparedIntegrityError(
                f"prepared files of {label} (version {version}) do not match their manifest:\n  "
                + "\n  ".join(problems)
                + f"\nsomething changed them after they were written; delete {ctx.store.path(prefix)} "
                "and run `dareforge prepare` again to rebuild them"
            )
        report.skipped.append(label)
        return PreparedSource.model_validate(manifest["record"])
    raw_prefix = f"raw/{source_id}/{source.raw_version}"
    if not source.raw_version or ctx.store.read_manifest(raw_prefix) is None:
        raise PrepareError(f"{source_id}: no raw files in the store; run `dareforge crawl` first")
    table = _choose_table(ctx, source, override)
    scratch = ctx.scratch_dir(f"prepare-{source_id}")
    try:
        record = engine.prepare_table(source, override, table, version, scratch, framing)
        with _timed(source_id, "store files"):
            for f in record.files:
                key = f"{prefix}/files/{f.name}"
                ctx.store.put_file(scratch / f.name, key)
                report.written.append(key)
        ctx.store.write_manifest(
            prefix,
            {
                "source_id": source_id,
                "source_version": source.version,
                "framing": framing.framing,
                "version": version,
                "files": [f.model_dump() for f in record.files],
                "record": record.model_dump(mode="json"),
            },
        )
        report.written.append(f"{prefix}/_MANIFEST.json")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report.prepared.append(label)
    log.info("%s: prepared %s (%d train, %d test)", label, version, record.n_train, record.n_test)
    return record


def _write_records(
    ctx: RunContext, source_id: str, records: list[PreparedSource], report: PrepareReport
) -> None:
    """One partition per source, a row per framing."""
    if ctx.store.write_records(source_id, records):
        report.written.append(ctx.store.table_key(PreparedSource.table, source_id))


def _remove_unused(ctx: RunContext, source_id: str, records: list[PreparedSource]) -> None:
    """After a new preparation, versions no framing uses any more go (with the obscured data built on them)."""
    current = {r.version for r in records}
    for key in ctx.store.list(f"prepared/{source_id}"):
        old = key.split("/")[2]
        if old not in current:
            ctx.store.remove_prefix(_prefix(source_id, old))


def framed_source(source: Source, framing: Framing) -> Source:
    """The source as its framing poses it: target, problem type and special columns from the framing."""
    return source.model_copy(
        update={
            "target_columns": framing.target_columns,
            "task_hint": framing.task_type.value if framing.task_type else None,
            "time_column": framing.time_column,
            "entity_column": framing.entity_column,
            "id_column": framing.id_column,
        }
    )


def _framing_override(override: SourceOverride | None, framing: Framing) -> SourceOverride:
    """The config override, naming the framing's table when the config does not. The framing's columns ride on
    the source (`framed_source`), where prepare checks them leniently (an id that is not unique over the whole
    table is replaced); the config's own settings stay strict."""
    base = override.model_dump() if override else {}
    return SourceOverride.model_validate({**base, "table": base.get("table") or framing.table_file})


def _load_source(ctx: RunContext, source_id: str) -> Source:
    key = ctx.store.table_key(Source.table, source_id)
    if not ctx.store.exists(key):
        raise PrepareError(f"{source_id}: no such source in the store; crawl it first (`dareforge crawl`)")
    return ctx.store.read_partition(Source, source_id)[-1]


def _version(ctx: RunContext, source: Source, framing: Framing) -> str:
    override = ctx.config.sources.get(source.id)
    # DuckDB's memory limit and threads change how fast, not what is written.
    settings = ctx.config.prepare.model_dump(mode="json", exclude={"duckdb_memory_limit", "duckdb_threads"})
    facts = source.model_dump(
        mode="json",
        include={"target_columns", "id_column", "time_column", "entity_column", "task_hint"},
    )
    return fingerprint(
        PREPARE_FORMAT,
        source.version,
        source.raw_version,
        settings,
        override.model_dump(mode="json") if override else None,
        facts,
        framing.model_dump(
            mode="json",
            include={
                "framing",
                "table_file",
                "time_axis",
                "excluded_columns",
                "dropped_columns",
                "id_column",
            },
        ),
    )


@dataclass(frozen=True)
class _Table:
    source_id: str
    file: SourceFile
    key: str
    columns: list[str] | None
    encoding: str | None


def _choose_table(ctx: RunContext, source: Source, override: Any) -> _Table:
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
            columns = _header(ctx, f"{prefix}/{f.name}", encoding, TABLE_SUFFIXES[suffix] or ",")
        candidates.append(_Table(sid, f, f"{prefix}/{f.name}", columns, encoding or f.encoding))
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
        if not SAMPLE_SUBMISSION.search(Path(t.file.name).stem) and t.columns and _has(t.columns, targets)
    ]
    if not labelled:
        raise PrepareError(
            f"{sid}: no table has the target column(s) {targets} (sample submissions do not count); name the "
            f"file under sources.{sid}.table or the target under sources.{sid}.target{hint}"
        )
    return max(labelled, key=lambda t: (t.file.size, t.file.name))


def _has(columns: list[str], wanted: list[str]) -> bool:
    names = set(columns) | {c.strip() for c in columns}
    return all(w in names for w in wanted)


def _header(ctx: RunContext, key: str, encoding: str, delimiter: str) -> list[str] | None:
    with ctx.store.open(key) as fh:
        head = fh.read(65536)
    try:
        text = head.decode(encoding, errors="ignore")
    except LookupError:
        return None
    first = next(csv.reader(io.StringIO(text.lstrip("\ufeff")), delimiter=delimiter), [])
    return [c.strip() for c in first]


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _failure(ctx: RunContext, source_id: str, exc: Exception) -> str:
    if isinstance(exc, duckdb.OutOfMemoryException):
        return (
            f"{source_id}: DuckDB ran out of memory ({_first_line(exc)}); raise prepare.duckdb_memory_limit "
            f"(now {ctx.config.prepare.duckdb_memory_limit}) or free disk under {ctx.work_dir}"
        )
    return f"{source_id}: prepare failed ({_first_line(exc)}); see the log, or exclude it with rules.excluded_ids"


def _read_failure(table: _Table, exc: Exception) -> str:
    sid = table.source_id
    return (
        f"{sid}: cannot read {table.file.name} ({_first_line(exc)}); if the file is not UTF-8 set "
        f"sources.{sid}.encoding (e.g. latin-1), or pick another file with sources.{sid}.table"
    )


def _check_row_lengths(table: _Table, path: Path, encoding: str, delimiter: str, sniffed: int | None) -> None:
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
        try:
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
        f"{sid}: {table.file.name} line {line} has {fields} fields but its header (line 1) has {len(header)} "
        f"({names}); every row needs one field per header column: repair or remove the ragged rows (quote "
        f"values that contain {delimiter!r}), or name another file with sources.{sid}.table"
    )


# -- SQL helpers ----------------------------------------------------------------------------------------------
def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _is_numeric(dtype: str) -> bool:
    return dtype in INTEGER_TYPES or dtype in FLOAT_TYPES or dtype.startswith("DECIMAL")


def _is_datetime(dtype: str) -> bool:
    return dtype in DATETIME_TYPES


def _widen(dtype: str) -> str:
    if dtype in INTEGER_TYPES:
        return "DOUBLE"
    return FALLBACK.get(dtype, "VARCHAR")


@dataclass
class _Column:
    name: str
    stored: str
    """Its type in the scratch table (VARCHAR for every CSV column)."""
    dtype: str
    """Its value type: the stored type, or for CSV text the sniffed type every row casts to."""
    tried_timestamp: bool = False

    @property
    def typed(self) -> str:
        """SQL for the column's values in `dtype`."""
        if self.stored == "VARCHAR" and self.dtype != "VARCHAR":
            return f"TRY_CAST({_q(self.name)} AS {self.dtype})"
        if _is_numeric(self.dtype) or _is_datetime(self.dtype) or self.dtype in ("VARCHAR", "BOOLEAN"):
            return _q(self.name)
        return f"CAST({_q(self.name)} AS VARCHAR)"  # nested Parquet types: measured as text

    @property
    def text(self) -> str:
        """SQL for the column's values as text (as written in the source for CSV)."""
        return _q(self.name) if self.stored == "VARCHAR" else f"CAST({_q(self.name)} AS VARCHAR)"


@dataclass
class _Stats:
    nonnull: int = 0
    distinct: int = 0
    min: str | None = None
    max: str | None = None
    mean: float | None = None
    std: float | None = None
    avg_length: float | None = None
    integral: bool = False
    top: list[str] = field(default_factory=list)


@contextmanager
def _timed(source_id: str, step: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    log.debug("%s: %s took %.2fs", source_id, step, time.perf_counter() - started)


def _hash(seed: int, text_sql: str) -> str:
    """A stable 60-bit number from md5 of the seed and a text (md5, unlike DuckDB's hash(), never changes)."""
    return f"CAST('0x' || left(md5({_lit(f'{seed}:')} || {text_sql}), 15) AS BIGINT)"


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# -- the DuckDB engine ----------------------------------------------------------------------------------------
class Engine:
    """One DuckDB connection for the run: an in-memory database that spills to a scratch folder."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.cfg = ctx.config.prepare
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
                    "memory_limit": self.cfg.duckdb_memory_limit,
                    "threads": self.cfg.duckdb_threads,
                    "temp_directory": str(self._dir),
                    "preserve_insertion_order": True,
                },
            )
            self._con.execute("SET enable_progress_bar = false")
        return self._con

    def _scalar(self, sql: str) -> Any:
        rows = self.con.execute(sql).fetchall()  # fetch to the end: DuckDB then closes the result
        return rows[0][0] if rows else None

    # -- reading ------------------------------------------------------------------------------------------
    @contextmanager
    def _local_file(self, table: _Table, scratch: Path) -> Iterator[tuple[Path, str | None]]:
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

    def _load(self, table: _Table, scratch: Path) -> list[_Column]:
        """Copy the table into the scratch database as `src` (text for CSV); returns its columns."""
        suffix = Path(table.file.name).suffix.lower()
        with self._local_file(table, scratch) as (path, encoding):
            if suffix == ".parquet":
                reader = f"read_parquet({_lit(str(path))})"
                self.con.execute(f"CREATE OR REPLACE TABLE src AS SELECT * FROM {reader}")
                described = self.con.execute("DESCRIBE src").fetchall()
                return [_Column(name, dtype, dtype) for name, dtype, *_ in described]
            delimiter, encoding = TABLE_SUFFIXES[suffix] or ",", encoding or "utf-8"
            options = f"delim={_lit(delimiter)}, header=true, encoding={_lit(encoding)}"
            reader = f"read_csv({_lit(str(path))}, {options}"
            try:
                sniffed = self.con.execute(f"DESCRIBE SELECT * FROM {reader})").fetchall()
                _check_row_lengths(table, path, encoding, delimiter, len(sniffed))
                self.con.execute(f"CREATE OR REPLACE TABLE src AS SELECT * FROM {reader}, all_varchar=true)")
            except duckdb.InvalidInputException:  # how a ragged row past the sniffer's sample fails the read
                _check_row_lengths(table, path, encoding, delimiter, None)
                raise
        stored = self.con.execute("DESCRIBE src").fetchall()
        types = {name: dtype for name, dtype, *_ in sniffed}
        return [_Column(name, "VARCHAR", types.get(name, "VARCHAR")) for name, _dtype, *_ in stored]

    def sample_text(self, table: _Table, scratch: Path, rows: int) -> tuple[pa.Table, int]:
        """Every column of a raw table as text: a systematic sample of at most `rows` rows in file order, and
        the table's row count. Streaming keeps memory to one batch, whatever the file size."""
        suffix = Path(table.file.name).suffix.lower()
        with self._local_file(table, scratch) as (path, encoding):
            if suffix == ".parquet":
                relation = f"SELECT COLUMNS(*)::VARCHAR FROM read_parquet({_lit(str(path))})"
            else:
                delimiter, encoding = TABLE_SUFFIXES[suffix] or ",", encoding or "utf-8"
                options = f"delim={_lit(delimiter)}, header=true, all_varchar=true, encoding={_lit(encoding)}"
                relation = f"SELECT * FROM read_csv({_lit(str(path))}, {options})"
            try:
                reader = self.con.sql(relation).to_arrow_reader(65_536)  # sniffs the CSV once
                if suffix != ".parquet":
                    _check_row_lengths(table, path, encoding, delimiter, len(reader.schema))
                return _systematic_sample(reader, rows)
            except (duckdb.Error, UnicodeError, OSError, pa.ArrowException) as exc:
                if suffix != ".parquet":
                    _check_row_lengths(table, path, encoding, delimiter, None)
                raise PrepareError(_read_failure(table, exc)) from exc

    # -- profiling ----------------------------------------------------------------------------------------
    def _profile(self, relation: str, columns: list[_Column], n: int, targets: set[str]) -> dict[str, _Stats]:
        """Per-column statistics in one aggregate query per batch; a column whose sniffed type fails on some
        row is widened and measured again."""
        stats: dict[str, _Stats] = {}
        pending = list(columns)
        while pending:
            retry: list[_Column] = []
            for start in range(0, len(pending), COLUMN_BATCH):
                batch = pending[start : start + COLUMN_BATCH]
                retry += self._profile_batch(relation, batch, n, targets, stats)
            pending = retry
        self._top_values(
            relation, [c for c in columns if _kind(c, stats[c.name]) == ColumnKind.CATEGORICAL], stats
        )
        return stats

    def _profile_batch(
        self, relation: str, batch: list[_Column], n: int, targets: set[str], stats: dict[str, _Stats]
    ) -> list[_Column]:
        exact = n <= EXACT_DISTINCT_ROWS
        parts: list[str] = []
        for i, col in enumerate(batch):
            raw, typed = _q(col.name), col.typed
            parts.append(f"count({raw}) AS c{i}_nonnull")
            parts.append(f"count({typed}) AS c{i}_ok")
            distinct = f"count(DISTINCT {typed})" if exact else f"approx_count_distinct({typed})"
            parts.append(f"{distinct} AS c{i}_distinct")
            parts.append(f"CAST(min({typed}) AS VARCHAR) AS c{i}_min")
            parts.append(f"CAST(max({typed}) AS VARCHAR) AS c{i}_max")
            if _is_numeric(col.dtype):
                parts.append(f"avg({typed})::DOUBLE AS c{i}_mean")
                parts.append(f"stddev_samp({typed})::DOUBLE AS c{i}_std")
                if col.name in targets:
                    parts.append(f"count(*) FILTER (WHERE {typed} <> round({typed})) AS c{i}_fractional")
            if col.dtype == "VARCHAR":
                parts.append(f"avg(length({col.text}))::DOUBLE AS c{i}_length")
                if col.stored == "VARCHAR" and not col.tried_timestamp:
                    parts.append(f"count(TRY_CAST({raw} AS TIMESTAMP)) AS c{i}_timestamps")
        cursor = self.con.execute(f"SELECT {', '.join(parts)} FROM {relation}")
        names = [d[0] for d in cursor.description]
        row = dict(zip(names, cursor.fetchone() or (), strict=True))
        retry = []
        for i, col in enumerate(batch):
            nonnull = row[f"c{i}_nonnull"]
            if row[f"c{i}_ok"] < nonnull:  # the sniffed type fails on some row: widen and measure again
                col.dtype = _widen(col.dtype)
                retry.append(col)
                continue
            if col.dtype == "VARCHAR" and 0 < nonnull == row.get(f"c{i}_timestamps"):
                col.dtype, col.tried_timestamp = "TIMESTAMP", True  # text DuckDB reads as timestamps
                retry.append(col)
                continue
            stats[col.name] = _Stats(
                nonnull=nonnull,
                distinct=int(row[f"c{i}_distinct"] or 0),
                min=row[f"c{i}_min"],
                max=row[f"c{i}_max"],
                mean=_finite(row.get(f"c{i}_mean")),
                std=_finite(row.get(f"c{i}_std")),
                avg_length=row.get(f"c{i}_length"),
                integral=row.get(f"c{i}_fractional") == 0,
            )
        return retry

    def _top_values(self, relation: str, columns: list[_Column], stats: dict[str, _Stats]) -> None:
        for start in range(0, len(columns), COLUMN_BATCH):
            batch = columns[start : start + COLUMN_BATCH]
            selects = [
                f"(SELECT {i} AS __i, {c.text} AS __v, count(*) AS __n FROM {relation} "
                f"WHERE {_q(c.name)} IS NOT NULL GROUP BY 2 ORDER BY 3 DESC, 2 LIMIT {TOP_VALUES})"
                for i, c in enumerate(batch)
            ]
            rows = self.con.execute(" UNION ALL ".join(selects) + " ORDER BY 1, 3 DESC, 2").fetchall()
            for i, value, _count in rows:
                stats[batch[i].name].top.append(value)

    # -- the whole source ---------------------------------------------------------------------------------
    def prepare_table(
        self, source: Source, override: Any, table: _Table, version: str, scratch: Path, framing: Framing
    ) -> PreparedSource:
        try:
            try:
                with _timed(source.id, "load"):
                    columns = self._load(table, scratch)
            except (duckdb.Error, UnicodeError) as exc:
                raise PrepareError(_read_failure(table, exc)) from exc
            if framing.time_axis is not None and framing.time_column:
                columns = self._derive_time(columns, framing.time_axis, framing.time_column)
            dropped = {c for c in framing.dropped_columns if c not in framing.target_columns}
            if dropped:
                # Out of the public files too: an agent (or the leakage check) would find the answer there.
                kept = ", ".join(_q(c.name) for c in columns if c.name not in dropped)
                self.con.execute(f"CREATE OR REPLACE TABLE src AS SELECT {kept} FROM src")
                columns = [c for c in columns if c.name not in dropped]
            return self._prepare_loaded(source, override, table, version, scratch, columns, framing)
        finally:
            for statement in ("VIEW lab", "VIEW lab_all", "TABLE held_out", "TABLE src"):
                with suppress(duckdb.Error):
                    self.con.execute(f"DROP {statement} IF EXISTS")

    def _derive_time(self, columns: list[_Column], axis: TimeAxis, name: str) -> list[_Column]:
        """Rebuild the framing's time axis in `src` as ISO text (which profiling reads as timestamps): parsed
        text, quarters, epochs and decimal years in place; year + month (or quarter) parts as a new column."""
        expression = _time_sql(axis)
        if expression is None:
            return columns
        if name in {c.name for c in columns}:
            self.con.execute(
                f"CREATE OR REPLACE TABLE src AS SELECT * REPLACE ({expression} AS {_q(name)}) FROM src"
            )
            return [_Column(c.name, "VARCHAR", "VARCHAR") if c.name == name else c for c in columns]
        self.con.execute(f"CREATE OR REPLACE TABLE src AS SELECT *, {expression} AS {_q(name)} FROM src")
        return [*columns, _Column(name, "VARCHAR", "VARCHAR")]

    def _prepare_loaded(
        self,
        source: Source,
        override: Any,
        table: _Table,
        version: str,
        scratch: Path,
        columns: list[_Column],
        framing: Framing,
    ) -> PreparedSource:
        sid, cfg, con = source.id, self.cfg, self.con
        by_name = {c.name.strip(): c for c in columns} | {c.name: c for c in columns}
        shown = ", ".join(c.name for c in columns[:30]) + (", ..." if len(columns) > 30 else "")
        where = f"of {table.file.name} (columns: {shown})"

        def column(name: str | None, setting: str) -> _Column | None:
            if name is None:
                return None
            if name not in by_name:
                raise PrepareError(
                    f"{sid}: sources.{sid}.{setting} names {name!r}, which is not a column {where}"
                )
            return by_name[name]

        wanted = (override.target if override and override.target else None) or source.target_columns
        targets = []
        for name in wanted:
            if name not in by_name:
                raise PrepareError(
                    f"{sid}: target {name!r} is not a column {where}; fix sources.{sid}.target or sources.{sid}.table"
                )
            targets.append(by_name[name])
        n_all = self._scalar("SELECT count(*) FROM src")
        labelled = " AND ".join(f"{_q(t.name)} IS NOT NULL" for t in targets)

        # The id: the override, the source's own, a unique column named like an id, else the row number.
        id_col = column(override.id_column if override else None, "id_column")
        if id_col is not None and not self._unique(id_col, labelled):
            raise PrepareError(
                f"{sid}: sources.{sid}.id_column {id_col.name!r} is not unique among the labelled rows; "
                f"name a unique column or remove the setting to number the rows"
            )
        if id_col is None:
            with _timed(sid, "find id"):
                id_col = self._find_id(
                    source,
                    columns,
                    by_name,
                    labelled,
                    {t.name for t in targets},
                    set(framing.excluded_columns),
                )
        synthetic = id_col is None
        if synthetic:
            row_id = ROW_ID if ROW_ID not in by_name else f"__{ROW_ID}"
            id_col = _Column(row_id, "BIGINT", "BIGINT")
            # Numbered in hash order, not file order: files are often sorted by the label, and an id (or a
            # test file sorted by it) that follows the file order would give the answers away.
            row_hash = _hash(self.ctx.config.prepare.seed, "CAST(rowid AS VARCHAR)")
            con.execute(
                f"CREATE OR REPLACE TABLE lab_numbered AS SELECT rowid AS __rid, "
                f"row_number() OVER (ORDER BY {row_hash}, rowid) AS {_q(row_id)}, * FROM src WHERE {labelled}"
            )
            con.execute("CREATE OR REPLACE VIEW lab_all AS SELECT * FROM lab_numbered")
        else:
            con.execute(
                f"CREATE OR REPLACE VIEW lab_all AS SELECT rowid AS __rid, * FROM src WHERE {labelled}"
            )
        con.execute("CREATE OR REPLACE VIEW lab AS SELECT * FROM lab_all")

        n = self._scalar("SELECT count(*) FROM lab")
        if n == 0:
            names = ", ".join(t.name for t in targets)
            raise PrepareError(
                f"{sid}: target {names} is empty in every row of {table.file.name}; name the right column under "
                f"sources.{sid}.target (or the labelled file under sources.{sid}.table)"
            )
        if n < n_all:
            log.info("%s: dropped %d of %d rows whose target is missing", sid, n_all - n, n_all)
        with _timed(sid, "profile"):
            stats = self._profile("lab", columns, n, {t.name for t in targets})
        profiled = n  # the time-series filter below may drop rows without a time; the profile keeps them

        task_type = self._task_type(source, override, targets, stats)
        entity = column(
            override.entity_column if override and override.entity_column else None, "entity_column"
        )
        if entity is None and source.entity_column in by_name:
            entity = by_name[source.entity_column]
        group = column(override.group_column if override else None, "group_column")
        clock = column(override.time_column if override and override.time_column else None, "time_column")
        if clock is None and source.time_column in by_name:
            clock = by_name[source.time_column]
        if clock is None and task_type == TaskType.TIME_SERIES:
            clock = next((c for c in columns if _is_datetime(c.dtype)), None)
            if clock is None:
                raise PrepareError(
                    f"{sid}: a time series needs a time column and none {where} holds dates; "
                    f"name it under sources.{sid}.time_column"
                )

        # The private split, in SQL: a narrow table of the held-out rows' positions (`__rid`).
        if task_type == TaskType.TIME_SERIES:
            assert clock is not None
            split = "chronological"
            con.execute(
                f"CREATE OR REPLACE VIEW lab AS SELECT * FROM lab_all WHERE {clock.typed} IS NOT NULL"
            )
            n = self._scalar("SELECT count(*) FROM lab")
            if n < profiled:
                log.info("%s: dropped %d rows without a time in %s", sid, profiled - n, clock.name)
            # The (1 - test_share) quantile of time, exactly, with a top-N heap of test_share * n values.
            above = n - 1 - math.floor((n - 1) * (1 - cfg.test_share)) if n else 0
            cutoff = f"(SELECT {clock.typed} AS __t FROM lab ORDER BY __t DESC LIMIT 1 OFFSET {above})"
            held_out = f"SELECT __rid FROM lab WHERE {clock.typed} > {cutoff}"
        elif group is not None:
            split = "grouped"
            key = f"coalesce({group.text}, '')"
            goal = round(n * cfg.test_share)
            # Groups in hash order join the test set until it holds its share; the last group stays in train.
            held_out = f"""
                WITH __g AS (SELECT {key} AS __k, count(*) AS __size FROM lab GROUP BY 1),
                __o AS (
                    SELECT __k,
                        coalesce(sum(__size) OVER (ORDER BY {_hash(cfg.seed, "__k")}, __k
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS __before,
                        row_number() OVER (ORDER BY {_hash(cfg.seed, "__k")} DESC, __k DESC) AS __from_end
                    FROM __g
                )
                SELECT __rid FROM lab
                WHERE {key} IN (SELECT __k FROM __o WHERE __before < {goal} AND __from_end > 1)"""
        else:
            stratified = task_type == TaskType.CLASSIFICATION
            split = "stratified" if stratified else "random"
            strata = " || chr(31) || ".join(t.text for t in targets) if stratified else "''"
            share = f"round(__m * {cfg.test_share!r})"
            if not stratified:
                share = f"greatest(1, {share})"
            # Within each class, rows in hash order; the first round(share * class size) are held out, so every
            # class keeps its share (a class of one row stays in train).
            order = f"{_hash(cfg.seed, id_col.text)}, __rid"
            held_out = f"""
                SELECT __rid FROM (
                    SELECT __rid,
                        row_number() OVER (PARTITION BY {strata} ORDER BY {order}) AS __r,
                        count(*) OVER (PARTITION BY {strata}) AS __m
                    FROM lab
                ) WHERE __m > 1 AND __r <= least(__m - 1, {share})"""
        with _timed(sid, "split"):
            con.execute(f"CREATE OR REPLACE TABLE held_out AS {held_out}")
        n_rows, n_test = n, self._scalar("SELECT count(*) FROM held_out")
        if n_test == 0 or n_test == n_rows:
            side = "test" if n_test == 0 else "train"
            raise PrepareError(
                f"{sid}: the {split} split leaves the {side} set empty ({n_rows} labelled rows, "
                f"prepare.test_share={cfg.test_share}); the source has too few rows, classes, groups or time "
                f"points to split — exclude it (rules.excluded_ids) or change sources.{sid}.group_column/time_column"
            )

        # The files, each sorted so the same input always gives the same bytes.
        target_names = [t.name for t in targets]
        all_names = ([id_col.name] if synthetic else []) + [c.name for c in columns]
        key_names = [id_col.name] + ([clock.name] if task_type == TaskType.TIME_SERIES and clock else [])
        if task_type == TaskType.TIME_SERIES and entity is not None:
            key_names.append(entity.name)
        answer_names = list(dict.fromkeys(key_names + target_names))
        if task_type == TaskType.TIME_SERIES:
            assert clock is not None
            order = [clock.typed] + ([entity.text] if entity else []) + [id_col.typed, id_col.text]
        else:
            order = [id_col.typed, id_col.text]
        order_sql = ", ".join(order)
        outputs = {
            "train.csv": (all_names, "NOT IN", n_rows - n_test),
            "test.csv": ([c for c in all_names if c not in target_names], "IN", n_test),
            "answers.csv": (answer_names, "IN", n_test),
        }
        files = []
        for name, (names, condition, rows) in outputs.items():
            path = scratch / name
            with _timed(sid, f"write {name}"):
                con.execute(
                    f"COPY (SELECT {', '.join(map(_q, names))} FROM lab WHERE __rid {condition} "
                    f"(SELECT __rid FROM held_out) ORDER BY {order_sql}) "
                    f"TO {_lit(str(path))} (FORMAT csv, HEADER true, DELIMITER ',')"
                )
                digest = sha256_file(path)
            files.append(
                SourceFile(
                    name=name,
                    size=path.stat().st_size,
                    sha256=digest,
                    encoding="utf-8",
                    columns=names,
                    rows=rows,
                )
            )
        profiles = [_column_profile(c, stats[c.name], profiled) for c in columns]
        return PreparedSource(
            source_id=sid,
            source_version=source.version,
            framing=framing.framing,
            excluded_columns=[c for c in framing.excluded_columns if c in by_name],
            version=version,
            task_type=task_type,
            target_columns=target_names,
            id_column=id_col.name,
            time_column=clock.name if clock else None,
            entity_column=entity.name if entity else None,
            group_column=group.name if group else None,
            columns=profiles,
            n_rows=n_rows,
            n_train=n_rows - n_test,
            n_test=n_test,
            split=split,
            seed=cfg.seed,
            files=files,
        )

    def _unique(self, col: _Column, labelled: str) -> bool:
        """Every labelled row has a value and no value repeats (a grouped query, so it spills when large)."""
        nulls = self._scalar(f"SELECT count(*) FROM src WHERE {labelled} AND {_q(col.name)} IS NULL")
        if nulls:
            return False
        dupes = self._scalar(
            f"SELECT count(*) FROM (SELECT {col.text} AS __v FROM src WHERE {labelled} "
            f"GROUP BY 1 HAVING count(*) > 1 LIMIT 1)"
        )
        return dupes == 0

    def _find_id(
        self,
        source: Source,
        columns: list[_Column],
        by_name: dict[str, _Column],
        labelled: str,
        targets: set[str],
        excluded: set[str],
    ) -> _Column | None:
        candidates = []
        if source.id_column in by_name:
            candidates.append(by_name[source.id_column])
        # Columns the framing leaves out (a row number in file order) are never the id.
        candidates += [
            c
            for c in columns
            if re.search(ID_NAME, c.name.strip()) and c not in candidates and c.name not in excluded
        ]
        for col in candidates:
            if col.name in targets:
                continue
            if self._unique(col, labelled):
                return col
            log.info("%s: %s looks like an id but is not unique; not using it", source.id, col.name)
        return None

    def _task_type(
        self, source: Source, override: Any, targets: list[_Column], stats: dict[str, _Stats]
    ) -> TaskType:
        sid = source.id
        if override and override.task_type:
            try:
                return TaskType(override.task_type)
            except ValueError as exc:
                raise PrepareError(
                    f"{sid}: sources.{sid}.task_type is {override.task_type!r}; choose one of "
                    f"{', '.join(t.value for t in TaskType)}"
                ) from exc
        if source.task_hint:
            with suppress(ValueError):
                return TaskType(source.task_hint)
        for target in targets:
            s = stats[target.name]
            if not _is_numeric(target.dtype):
                continue
            if not s.integral:
                return TaskType.REGRESSION
            distinct = s.distinct
            if s.nonnull > EXACT_DISTINCT_ROWS and distinct <= 4 * self.cfg.max_classes:
                distinct = self._scalar(f"SELECT count(DISTINCT {target.typed}) FROM lab")
            if distinct > self.cfg.max_classes:
                return TaskType.REGRESSION
        return TaskType.CLASSIFICATION


def _systematic_sample(reader: pa.RecordBatchReader, rows: int) -> tuple[pa.Table, int]:
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


def _time_sql(axis: TimeAxis) -> str | None:
    """SQL for an axis as ISO text, or None when the column is used as it is (native dates, years, row order)."""

    def text(column: str) -> str:
        return f"CAST({_q(column)} AS VARCHAR)"

    def number(column: str) -> str:
        return f"TRY_CAST({_q(column)} AS DOUBLE)"

    sub_daily = axis.frequency in ("hourly", "minutely") or (axis.format or "").count("%H")
    iso = _lit("%Y-%m-%d %H:%M:%S" if sub_daily else "%Y-%m-%d")
    first = axis.columns[0]
    if axis.kind == "text":
        return f"strftime(try_strptime({text(first)}, {_lit(axis.format or '')}), {iso})"
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


def _kind(col: _Column, s: _Stats) -> ColumnKind:
    if _is_numeric(col.dtype):
        return ColumnKind.NUMERIC
    if _is_datetime(col.dtype):
        return ColumnKind.DATETIME
    if (
        col.dtype == "VARCHAR"
        and (s.avg_length or 0) >= TEXT_MIN_LENGTH
        and s.distinct >= TEXT_MIN_DISTINCT
        and s.distinct >= TEXT_DISTINCT_SHARE * s.nonnull
    ):
        return ColumnKind.TEXT
    return ColumnKind.CATEGORICAL


def _column_profile(col: _Column, s: _Stats, n: int) -> ColumnProfile:
    kind = _kind(col, s)
    return ColumnProfile(
        name=col.name,
        dtype=col.dtype,
        kind=kind,
        missing_rate=round(1 - s.nonnull / n, 6) if n else 0.0,
        distinct=s.distinct,
        min=s.min,
        max=s.max,
        mean=s.mean if kind == ColumnKind.NUMERIC else None,
        std=s.std if kind == ColumnKind.NUMERIC else None,
        top_values=s.top if kind == ColumnKind.CATEGORICAL else [],
    )
