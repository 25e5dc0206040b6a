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

import logging
import shutil
import uuid
from pathlib import Path

from rich.markup import escape

from dareforge.config import SourceOverride
from dareforge.context import RunContext
from dareforge.errors import DareforgeError, StoreError, machine_at_fault
from dareforge.generators.engine import Engine
from dareforge.generators.rawtable import (
    PrepareError,
    choose_table,
    failure_reason,
)
from dareforge.generators.sql import (
    timed,
)
from dareforge.generators.table_split import FILES
from dareforge.hashing import fingerprint, sha256_file
from dareforge.queries import framed_source_ids, why_none
from dareforge.report import StageReport
from dareforge.schema import (
    Framing,
    PreparedSource,
    PrepareFailure,
    Source,
    Task,
)

log = logging.getLogger(__name__)


PREPARE_FORMAT = 9
"""Bump when the output of prepare changes for the same inputs, so every source is prepared again.
3: prepared per framing (understand stage), time axes rebuilt from their parts. 4: cells pandas reads as
missing (`NA`, `N/A`, ...) are missing; a numeric target must read as a number; chronological tabular splits. 5: a class label of blanks is no label. 6: booleans spelled True and False; a competition's outcome columns
left out. 7: a time column without a name (`Unnamed: 0`) named `date`. 8: a series holds out its latest distinct times in
whole seasons, at least `forecast.MIN_TEST_STEPS` of them on a short series (`forecast.held_out_steps`). 9: times
that are plain numbers (years) have no season (`forecast.is_dated`)."""


class PreparedIntegrityError(StoreError):
    """Stored prepared files no longer match their manifest."""


def prepare(ctx: RunContext, source_ids: list[str] | None = None) -> StageReport:
    """Prepare each chosen framing of each source (default: every source the understand stage framed). The
    report labels each framing `source_id/framing`: outcomes `prepared` and `unchanged` (finished before, only
    verified); failures: each failed framing (or source, when it has none) with why and the fix."""
    ids = source_ids if source_ids is not None else framed_source_ids(ctx)
    report = StageReport("prepare")
    with Engine(ctx) as engine:
        for source_id in ctx.each_source("prepare", ids):
            _prepare_source(ctx, engine, source_id, report)
    return finish_report(report)


def finish_report(report: StageReport) -> StageReport:
    """Reuse count and summary lines (also for a report merged from several processes)."""
    report.reused = len(report.labels("unchanged"))
    report.lines = [
        f"prepare: {len(report.labels('prepared'))} prepared, {report.reused} unchanged, "
        f"{len(report.failures)} failed"
    ]
    for label, reason in report.failures.items():
        said_once = reason.removeprefix(f"{label.split('/')[0]}: ")
        report.lines.append(f"  [red]failed[/] {escape(label)}: {escape(said_once)}")
    return report


def prepare_failure(ctx: RunContext, source_id: str) -> PrepareFailure | None:
    """Why the last prepare of a source failed, or None when it did not fail (or never ran)."""
    rows = ctx.store.read_partition(PrepareFailure, source_id)
    return rows[-1] if rows else None


def _record_failure(ctx: RunContext, source_id: str, reason: str, report: StageReport) -> None:
    """Store the reason where `generate` (another process, maybe another machine) can tell the user; an id
    that names no stored source is a typo, not a source to remember."""
    sources = ctx.store.read_partition(Source, source_id)
    if not sources:
        return
    failure = PrepareFailure(source_id=source_id, source_version=sources[-1].version, reason=reason)
    if ctx.store.write_records(source_id, [failure]):
        report.written.append(ctx.store.table_key(PrepareFailure.table, source_id))


def _prepare_source(ctx: RunContext, engine: Engine, source_id: str, report: StageReport) -> None:
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
        report.failures[source_id] = reason
    records: list[PreparedSource] = []
    for framing in framings:
        label = f"{source_id}/{framing.framing}"
        try:
            records.append(_prepare_framing(ctx, engine, source_id, framing, report, label))
        except StoreError:
            raise  # the store is at fault (a tampered or unreadable file), not this source's data
        except Exception as exc:  # whatever an odd table breaks, it is this framing's failure, and recorded
            if machine_at_fault(exc):
                raise
            reason = str(exc) if isinstance(exc, PrepareError) else failure_reason(ctx, source_id, exc)
            engine.recover()
            log.warning("prepare %s failed: %s", label, reason)
            report.failures[label] = reason
    failed = [reason for label, reason in report.failures.items() if label.split("/")[0] == source_id]
    if failed:
        _record_failure(ctx, source_id, "; ".join(failed), report)
    elif framings:
        ctx.store.remove_prefix(ctx.store.table_key(PrepareFailure.table, source_id))
    if records:
        _write_records(ctx, source_id, records, report)
    if any(label.startswith(f"{source_id}/") for label in report.labels("prepared")):
        _remove_unused(ctx, source_id, records)


def prepared_of(
    ctx: RunContext, task: Task, source_prepared: list[PreparedSource] | None = None
) -> PreparedSource | None:
    """The prepared framing a task was built from (its current preparation when that one is gone), among
    `source_prepared` (its source's prepared records) when the caller has read them."""
    if source_prepared is None:
        source_prepared = load_prepared(ctx, task.source_id)
    framings = [p for p in source_prepared if p.framing == task.framing]
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


def _prefix(source_id: str, version: str) -> str:
    return f"prepared/{source_id}/{version}"


def _prepare_framing(
    ctx: RunContext, engine: Engine, source_id: str, framing: Framing, report: StageReport, label: str
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
        report.add("unchanged", label)
        return PreparedSource.model_validate(manifest["record"])
    raw_prefix = f"raw/{source_id}/{source.raw_version}"
    if not source.raw_version or ctx.store.read_manifest(raw_prefix) is None:
        raise PrepareError(f"{source_id}: no raw files in the store; run `dareforge crawl` first")
    table = choose_table(ctx, source, override)
    scratch = ctx.scratch_dir(f"prepare-{source_id}")
    try:
        record = engine.prepare_table(source, override, table, version, scratch, framing)
        with timed(source_id, "store files"):
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
    report.add("prepared", label)
    log.info("%s: prepared %s (%d train, %d test)", label, version, record.n_train, record.n_test)
    return record


def _write_records(
    ctx: RunContext, source_id: str, records: list[PreparedSource], report: StageReport
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
                "split",
                "questions_only",
                "forecast_from_time",
                "excluded_columns",
                "dropped_columns",
                "id_column",
            },
        ),
    )
