"""Versioned, immutable export folders in the store: what the SFT and RL exports share.

An export lives at `exports/<name>/<version>/` and holds Parquet tables under per-config folders, a dataset
card (`README.md`, whose YAML `configs:` tell `datasets.load_dataset(<folder>)` what to load) and
`manifest.json` (format, lineage, counts, and every file with its size and sha256). Versioning is the
release's own (`dareforge.publish.release.plan_version`): `YYYY.MM.DD[.N]` names, a build whose content
fingerprint equals the latest version's returns that version (`created=False`), `manifest.json` is written
last, so a build killed midway leaves no visible version and the next build completes it, and when and where a
version was built goes to its build record, not into its files (two builds of the same content are the same
bytes).

An export has one public part and no private half: answers stay in the source release's private half, which
the lineage names (`release`: name, version and content fingerprint). Targets publish an `Export` like a
release (`LocalTarget`, `HubTarget`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import pyarrow as pa

from dareforge.context import RunContext
from dareforge.errors import DareforgeError
from dareforge.publish.files import parquet_bytes, read_rows, write
from dareforge.publish.release import Release
from dareforge.publish.source_split import SPLITS
from dareforge.publish.versions import (
    MANIFEST,
    Part,
    check_name,
    finished_versions,
    plan_version,
    remove_unlisted,
    verify_parts,
    write_build_record,
)
from dareforge.store import Store

log = logging.getLogger(__name__)

EXPORTS = "exports"


class ExportError(DareforgeError):
    pass


def export_root(name: str) -> str:
    return f"{EXPORTS}/{name}"


def release_ref(release: Release) -> dict[str, str]:
    """What an export records of its source release."""
    return {
        "name": release.name,
        "version": release.version,
        "content_fingerprint": release.manifest["content_fingerprint"],
    }


def split_tables(rows: list[dict[str, Any]], schema: pa.Schema) -> dict[str, bytes]:
    """One Parquet file per release split that has rows (`split` column), in the release's split order."""
    return {
        side: parquet_bytes([r for r in rows if r["split"] == side], schema)
        for side in SPLITS
        if any(r["split"] == side for r in rows)
    }


def turns(column: str, who: str, what: str) -> pa.Field:
    """A list-of-turns column, e.g. `messages` of `{role, content}`."""
    turn = pa.struct([pa.field(who, pa.string(), False), pa.field(what, pa.string(), False)])
    return pa.field(column, pa.list_(turn), False)


def family_counts(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, int]]:
    """family -> value of `key` -> rows, sorted."""
    counts: dict[str, Counter] = {}
    for r in rows:
        counts.setdefault(r["family"], Counter())[r[key]] += 1
    return {f: dict(sorted(c.items())) for f, c in sorted(counts.items())}


@dataclass
class Export:
    """A finished export version."""

    store: Store
    name: str
    version: str
    manifest: dict[str, Any]

    @property
    def prefix(self) -> str:
        return f"{export_root(self.name)}/{self.version}"

    @property
    def kind(self) -> str:
        """`sft export` or `rl export`: how targets title it (e.g. the Hub commit)."""
        return f"{self.manifest['kind']} export"

    def parts(self) -> list[Part]:
        return [Part(self.name, self.prefix, self.manifest, private=False)]

    def rows(self, config: str = "default", split: str | None = None) -> list[dict[str, Any]]:
        """The rows of one config (all splits, or one), as `datasets` would load them."""
        rows = []
        for side, rel in self.manifest["configs"][config].items():
            if split is None or side == split:
                rows += read_rows(self.store, f"{self.prefix}/{rel}")
        return rows


@dataclass
class ExportResult:
    export: Export
    created: bool
    previous: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.export.name

    @property
    def version(self) -> str:
        return self.export.version


def list_export_versions(ctx: RunContext, name: str) -> list[str]:
    """Finished versions of an export, oldest first."""
    check_name(name, "export")
    return finished_versions(ctx.store, export_root(name))


def load_export(ctx: RunContext, name: str, version: str | None = None) -> Export:
    """A finished export version (the latest when `version` is None)."""
    versions = list_export_versions(ctx, name)
    if version is None:
        if not versions:
            raise ExportError(
                f"export {name!r} has no finished version in {ctx.store.url}; build one with "
                "build_sft_export or build_rl_export"
            )
        version = versions[-1]
    if version not in versions:
        raise ExportError(
            f"export {name!r} has no finished version {version!r} (finished: {', '.join(versions) or 'none'})"
        )
    manifest = ctx.store.read_json(f"{export_root(name)}/{version}/{MANIFEST}")
    return Export(ctx.store, name, version, manifest)


def verify_export(ctx: RunContext, name: str, version: str | None = None) -> list[str]:
    """Re-hash every file the manifest lists; one line per problem (empty when intact)."""
    export = load_export(ctx, name, version)
    return verify_parts(ctx.store, export.parts())


def write_export(
    ctx: RunContext,
    name: str,
    *,
    kind: str,
    format: str,
    tables: dict[str, dict[str, bytes]],
    meta: dict[str, Any],
    card: Callable[[dict[str, Any]], str],
    version: str | None = None,
    today: date | None = None,
    extra_files: Mapping[str, bytes] | None = None,
) -> ExportResult:
    """Write (or find) the version of export `name` holding `tables` (config -> split -> Parquet bytes).

    `meta` must hold `content_fingerprint` (everything that defines the content); it
    goes into the manifest with `format`, `kind`, version fields and the file list, and `card(meta)` renders
    the README. The first config listed is the default one. `extra_files` (name -> bytes) go in the version's
    root, e.g. a trainer's registry of the configs; they must follow from what the fingerprint covers.
    """
    check_name(name, "export")
    # One writer at a time per export, as for releases (`build_release`).
    with ctx.store.lock(export_root(name)):
        return _write_export(ctx, name, kind, format, tables, meta, card, version, today, extra_files or {})


def _write_export(
    ctx: RunContext,
    name: str,
    kind: str,
    format: str,
    tables: dict[str, dict[str, bytes]],
    meta: dict[str, Any],
    card: Callable[[dict[str, Any]], str],
    version: str | None,
    today: date | None,
    extra_files: Mapping[str, bytes],
) -> ExportResult:
    store = ctx.store
    root = export_root(name)
    versions = finished_versions(store, root)
    if versions:
        found = store.read_json(f"{root}/{versions[-1]}/{MANIFEST}").get("format")
        if found != format:
            raise ExportError(
                f"export {name!r} already holds {found} versions; a {format} export needs another name"
            )
    plan = plan_version(store, root, meta["content_fingerprint"], version, today)
    if plan.existing:
        log.info("%s export %s: %s", kind, name, plan.note)
        found_export = load_export(ctx, name, plan.version)
        return ExportResult(
            found_export, False, found_export.manifest.get("previous_version"), [str(plan.note)]
        )

    prefix = f"{root}/{plan.version}"
    configs = {
        config: {split: f"{config if config != 'default' else 'data'}/{split}.parquet" for split in splits}
        for config, splits in tables.items()
    }
    meta = {
        "format": format,
        "kind": kind,
        "name": name,
        "pretty_name": meta.get("pretty_name") or name,
        "version": plan.version,
        "previous_version": plan.previous,
        "configs": configs,
        **{k: v for k, v in meta.items() if k != "pretty_name"},
    }
    files = [
        write(store, f"{prefix}/{configs[config][split]}", configs[config][split], data)
        for config, splits in tables.items()
        for split, data in splits.items()
    ]
    files.append(write(store, f"{prefix}/README.md", "README.md", card(meta).encode()))
    files += [write(store, f"{prefix}/{n}", n, data) for n, data in sorted(extra_files.items())]
    files.sort(key=lambda e: e["name"])
    remove_unlisted(store, prefix, {e["name"] for e in files})
    write_build_record(store, root, plan.version)
    store.write_json(f"{prefix}/{MANIFEST}", {**meta, "files": files})  # last: now the version exists
    log.info("%s export %s %s written", kind, name, plan.version)
    return ExportResult(load_export(ctx, name, plan.version), True, plan.previous)
