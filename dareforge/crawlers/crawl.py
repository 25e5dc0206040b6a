"""The crawl stage: list sources from each crawler, download what changed, unpack safely, checksum, store.

Store layout per source: `raw/<id>/<version>/files/...` plus `raw/<id>/<version>/_MANIFEST.json`, and the
pointer `raw/<id>/_CURRENT.json` naming the complete version. The pointer is written last, so a crawl killed
at any point leaves the previous version intact and visible; the next crawl redoes only the unfinished work.
A binary file under a table's name is listed in the manifest's `not_stored` but not stored (see `crawl_source`).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path, PurePosixPath

from dareforge.context import RunContext
from dareforge.crawlers.crawler import Crawler
from dareforge.crawlers.documents import tabulate
from dareforge.crawlers.inspect import identify_target
from dareforge.crawlers.rdatasets import SAMPLE_ROWS
from dareforge.crawlers.unpack import copy_plain_file, plain_files, unpack_zip
from dareforge.describe import describe_file, is_binary
from dareforge.errors import DareforgeError, NeedsRulesError, SourceError, machine_at_fault
from dareforge.report import StageReport
from dareforge.schema import Source, SourceFile, SourceStatus

log = logging.getLogger(__name__)
CURRENT = "_CURRENT.json"
NOT_STORED = "not_stored"  # manifest entry: files described but kept out of the store (binary tables)
MAX_NESTED_ARCHIVES = 2


def build_crawlers(ctx: RunContext, origins: list[str] | None = None) -> list[Crawler]:
    """The crawlers the config enables (or exactly `origins`, when given)."""
    from dareforge.crawlers.builtin import BuiltinCrawler
    from dareforge.crawlers.kaggle import KaggleCrawler
    from dareforge.crawlers.mirror import MirrorCrawler

    cfg = ctx.config
    wanted = set(origins) if origins else None
    enabled = {
        "builtin": cfg.builtin.enabled,
        "mirror": bool(cfg.mirror.paths),
        "kaggle": cfg.kaggle.enabled,
    }
    unknown = (wanted or set()) - enabled.keys()
    if unknown:
        raise DareforgeError(f"unknown origin(s) {sorted(unknown)}; choose from {sorted(enabled)}")
    crawlers: list[Crawler] = []
    for name in enabled:
        if (wanted is None and not enabled[name]) or (wanted is not None and name not in wanted):
            continue
        if name == "builtin":
            crawlers.append(
                BuiltinCrawler(
                    cfg.builtin.include,
                    cfg.builtin.rdatasets,
                    cfg.builtin.rdatasets_seed,
                    cfg.rules.min_rows or SAMPLE_ROWS,
                )
            )
        elif name == "mirror":
            crawlers.append(
                MirrorCrawler([Path(p) for p in cfg.mirror.paths], ctx.work_dir / "mirror-digests.json")
            )
        else:
            crawlers.append(KaggleCrawler(cfg.kaggle))
    return crawlers


def crawl(
    ctx: RunContext, crawlers: list[Crawler] | None = None, origins: list[str] | None = None
) -> StageReport:
    """Bring every listed source up to date. The report counts the sources per action (downloaded, unchanged,
    failed, needs-rules) and keeps each failed source's reason; outcome `listing failed`: crawler -> the error
    (none of its sources was seen)."""
    crawlers = crawlers if crawlers is not None else build_crawlers(ctx, origins)
    report = StageReport("crawl")
    for crawler in crawlers:
        try:
            listing = sorted(crawler.list_sources(), key=lambda s: s.id)
        except DareforgeError as exc:
            log.error("%s: listing failed: %s", crawler.name, exc)
            report.add("listing failed", crawler.name, str(exc))
            continue
        with ctx.progress() as progress:
            bar = progress.add_task(f"crawl {crawler.name}", total=len(listing), item="")
            for source in listing:
                progress.update(bar, item=source.id)
                action = crawl_source(ctx, crawler, source, report)
                report.counts[action] += 1
                progress.advance(bar)
    seen, failed = sum(report.counts.values()), len(report.failures)
    if seen and failed / seen > ctx.config.crawl.max_failure_share:
        raise DareforgeError(
            f"{failed} of {seen} sources failed, over crawl.max_failure_share="
            f"{ctx.config.crawl.max_failure_share}; see `dareforge sources --status failed`"
        )
    report.reused = report.counts["unchanged"]
    parts = ", ".join(f"{n} {action}" for action, n in sorted(report.counts.items()))
    listing_failed = report.outcomes.get("listing failed", {})
    report.lines = [
        f"crawl: {seen} sources seen ({parts or 'none'}); {len(report.written)} records written",
        *(f"[red]{name}: listing failed:[/] {error}" for name, error in listing_failed.items()),
    ]
    return report


def crawl_source(ctx: RunContext, crawler: Crawler, source: Source, report: StageReport) -> str:
    """Bring one source up to date; returns what happened: unchanged, downloaded, failed or needs-rules."""
    # The download folder is shared across runs (a killed download resumes), so one process at a time per
    # source: a second one waits, then finds the version stored and reports it unchanged.
    with ctx.source_lock(source.id):
        return _crawl_locked(ctx, crawler, source, report)


def _crawl_locked(ctx: RunContext, crawler: Crawler, source: Source, report: StageReport) -> str:
    store = ctx.store
    current = _current_version(ctx, source.id)
    if source.status != SourceStatus.OK:
        # The crawler already knows this source cannot be fetched (e.g. a mirror folder without metadata).
        return _record_failure(
            ctx, source, current, source.status, source.status_detail or "", report, source.rules_url
        )
    if current == source.version:
        files, discovered = _stored(ctx, source.id, current)
        _write_record(ctx, source, discovered, files, report)
        return "unchanged"
    work = ctx.work_dir / source.id
    try:
        discovered = crawler.download(source, work / "download") or {}
        files_root = _unpack_all(work / "download", work / f"files-{source.version}", ctx)
        notes = tabulate(files_root, [f.rel for f in plain_files(files_root)])
        described = [describe_file(f.path, f.rel) for f in plain_files(files_root)]
        files = [f.model_copy(update={"note": notes[f.name]}) if f.name in notes else f for f in described]
        # Binary content under a table's name is described but not stored: nothing downstream reads it, and it
        # can be GBs of nothing (seen: a 2 GB sparse .csv, stored at full size). The manifest keeps it apart
        # from the stored files, so `Store.verify` holds, and the record still lists it for the filter's reason.
        stored = [f for f in files if not is_binary(f)]
        not_stored = [f.model_dump() for f in files if is_binary(f)]
        prefix = f"raw/{source.id}/{source.version}"
        for f in stored:
            store.put_file(files_root / f.name, f"{prefix}/files/{f.name}")
        store.write_manifest(
            prefix,
            {
                "source_id": source.id,
                "version": source.version,
                "files": [f.model_dump() for f in stored],
                **({NOT_STORED: not_stored} if not_stored else {}),
                "discovered": discovered,
            },
        )
        store.write_json(f"raw/{source.id}/{CURRENT}", {"version": source.version})
        _drop_old_versions(ctx, source.id, keep=source.version)
        shutil.rmtree(work, ignore_errors=True)
    except NeedsRulesError as exc:
        return _record_failure(
            ctx, source, current, SourceStatus.NEEDS_RULES, str(exc), report, exc.rules_url
        )
    except (DareforgeError, OSError, ValueError) as exc:
        if machine_at_fault(exc):
            raise
        detail = str(exc) if isinstance(exc, SourceError) else f"{type(exc).__name__}: {exc}"
        return _record_failure(ctx, source, current, SourceStatus.FAILED, detail, report)
    log.info("%s: stored version %s (%d files)", source.id, source.version, len(files))
    _write_record(ctx, source, discovered, files, report)
    return "downloaded"


def _record_failure(
    ctx: RunContext,
    source: Source,
    current: str | None,
    status: SourceStatus,
    detail: str,
    report: StageReport,
    rules_url: str | None = None,
) -> str:
    log.warning("%s: %s: %s", source.id, status.value, detail)
    report.failures[source.id] = detail
    files, discovered = _stored(ctx, source.id, current) if current else ([], {})
    update = {**discovered, "status": status, "status_detail": detail, "rules_url": rules_url}
    _write_record(ctx, source, update, files, report, raw_version=current)
    return status.value


def _write_record(
    ctx: RunContext,
    listed: Source,
    updates: dict,
    files: list[SourceFile],
    report: StageReport,
    raw_version: str | None = None,
) -> None:
    """Store the listing's record, completed with what the files and the download revealed."""
    source = Source.model_validate({**listed.model_dump(), **updates})
    override = ctx.config.sources.get(source.id)
    targets, id_column = identify_target(source, files, override.target if override else None)
    record = Source.model_validate(
        {
            **source.model_dump(),
            "files": files,
            "total_bytes": sum(f.size for f in files) or source.total_bytes,
            "target_columns": targets,
            "id_column": id_column,
            "raw_version": raw_version if source.status != SourceStatus.OK else source.version,
        }
    )
    if ctx.store.write_records(source.id, [record]):
        report.written.append(ctx.store.table_key(Source.table, source.id))


def _current_version(ctx: RunContext, source_id: str) -> str | None:
    key = f"raw/{source_id}/{CURRENT}"
    if not ctx.store.exists(key):
        return None
    version = ctx.store.read_json(key)["version"]
    return version if ctx.store.read_manifest(f"raw/{source_id}/{version}") else None


def _stored(ctx: RunContext, source_id: str, version: str) -> tuple[list[SourceFile], dict]:
    """The files of a stored version, and the metadata its download discovered in the data."""
    manifest = ctx.store.read_manifest(f"raw/{source_id}/{version}") or {}
    # In the order `plain_files` described them, as the record of the download had them.
    entries = [*manifest.get("files", []), *manifest.get(NOT_STORED, [])]
    listed = sorted(entries, key=lambda f: PurePosixPath(f["name"]).parts)
    files = [SourceFile.model_validate(f) for f in listed]
    return files, manifest.get("discovered", {})


def _drop_old_versions(ctx: RunContext, source_id: str, keep: str) -> None:
    for key in ctx.store.list(f"raw/{source_id}"):
        version = key.split("/")[2]
        if version not in (keep, CURRENT):
            ctx.store.remove_prefix(f"raw/{source_id}/{version}")


def _unpack_all(download: Path, target: Path, ctx: RunContext) -> Path:
    """Copy plain files and unpack archives (and archives inside them, one level deep) into `target`.

    Whatever the crawler wrote is walked without following links, and a link or special file refuses the
    source (see `unpack.plain_files`): a download is input from outside, like a mirror folder.
    """
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    if not download.is_dir() or not any(download.iterdir()):
        raise SourceError(f"download of {download.parent.name} produced no files")
    for file in plain_files(download):
        if file.path.name.endswith(".kaggle-partial"):
            continue
        if file.path.suffix.lower() == ".zip":
            _unpack_into(file.path, (target / file.rel).parent, ctx, depth=1)
        else:
            copy_plain_file(file, target / file.rel)
    return target


def _unpack_into(archive: Path, folder: Path, ctx: RunContext, depth: int) -> None:
    scratch = folder / f".unpack-{archive.name}"
    extracted = unpack_zip(archive, scratch, ctx.config.unpack)
    for path in extracted:
        rel = path.relative_to(scratch)
        dest = folder / rel
        if dest.exists():
            raise SourceError(
                f"{archive.name}: member {rel.as_posix()} collides with another file of the source"
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        path.rename(dest)
        if dest.suffix.lower() == ".zip" and depth < MAX_NESTED_ARCHIVES:
            _unpack_into(dest, dest.parent, ctx, depth + 1)
            dest.unlink()
    shutil.rmtree(scratch)
