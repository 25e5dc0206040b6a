"""What every export format is, and the two kinds a format is of.

A format (registered by name in `registry`) is a class that overrides its kind's writer method; the kind does
the rest:

- `TrainingExport` (training data: `sft`, `rl`) overrides `content` (its Parquet tables, manifest fields and
  extra files) and `card` (its README). The kind versions it in the store as `exports/<release>-<format>/
  <version>/`: Parquet tables under per-config folders, the dataset card (whose YAML `configs:` tell
  `datasets.load_dataset(<folder>)` what to load) and `manifest.json` (format, lineage, counts, and every file
  with its size and sha256). Versioning is the release's own (`dareforge.publish.versions`): `YYYY.MM.DD[.N]`
  names, a build whose content fingerprint equals the latest version's returns that version
  (`created=False`), `manifest.json` is written last, so a build killed midway leaves no visible version and
  the next build completes it, and when and where a version was built goes to its build record, not into its
  files (two builds of the same content are the same bytes). An export has one public part and no private
  half: answers stay in the source release's private half, which the lineage names (`release`: name, version
  and content fingerprint). Targets publish an `Export` like a release (`LocalTarget`, `HubTarget`).
- `FolderLayout` (another benchmark's layout: `dare-bench`, `kramabench`) overrides `write`, which fills a
  folder from the whole release; the kind makes it the destination folder whole, replacing what was there.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from dareforge.context import RunContext
from dareforge.exports import ExportError
from dareforge.publish.files import parquet_bytes, read_rows, staged_folder, write
from dareforge.publish.release import Release
from dareforge.publish.source_split import SPLITS
from dareforge.publish.versions import (
    MANIFEST,
    BuildResult,
    Part,
    Version,
    finished_versions,
    plan_version,
    remove_unlisted,
    write_build_record,
)
from dareforge.schema import Task, Trajectory

log = logging.getLogger(__name__)

EXPORTS = "exports"


@dataclass
class ChosenTrajectories:
    """The trajectories a corpus chose to train on, with what its lineage records of the choice."""

    trajectories: list[Trajectory]
    selection: dict[str, Any]  # strategy, thresholds, counts: recorded as given
    partitions: list[str]  # the trajectory table partitions read
    kinds: dict[str, str]  # trajectory id -> `gold` (default `sampled`)


@dataclass
class ExportJob:
    """What one export of a release reads. A training format reads `tasks` (the release's tasks on the corpus's
    side) and, when it says it does (`reads_trajectories`), `trajectories`; a folder layout reads the whole
    release and writes `dest`."""

    ctx: RunContext
    release: Release
    tasks: list[Task] = field(default_factory=list)
    trajectories: ChosenTrajectories | None = None
    dest: Path | None = None
    today: date | None = None  # names a new version (default: the UTC date)


class ExportFormat(ABC):
    """One registered way to export a release; see the module doc for the kinds and what a format overrides."""

    reads_trajectories: ClassVar[bool] = False

    def __init__(self, name: str):
        self.name = name  # its name in the registry

    @abstractmethod
    def export(self, job: ExportJob) -> ExportResult | LayoutReport: ...


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
class Export(Version):
    """A finished export version."""

    ROOT = EXPORTS
    noun = "export"
    error = ExportError
    how_to_build = "build one with `dareforge export`"

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
class ExportResult(BuildResult[Export]):
    @property
    def export(self) -> Export:
        return self.finished


def list_export_versions(ctx: RunContext, name: str) -> list[str]:
    """Finished versions of an export, oldest first."""
    return Export.versions(ctx.store, name)


def load_export(ctx: RunContext, name: str, version: str | None = None) -> Export:
    """A finished export version (the latest when `version` is None)."""
    return Export.load(ctx.store, name, version)


def verify_export(ctx: RunContext, name: str, version: str | None = None) -> list[str]:
    """Re-hash every file the manifest lists; one line per problem (empty when intact)."""
    return load_export(ctx, name, version).verify()


@dataclass
class ExportContent:
    """What a training format puts in a version. `meta` goes into the manifest and must hold
    `content_fingerprint`, covering everything written; `extra_files` go in the version's root (e.g. a trainer's
    registry of the configs)."""

    tables: dict[str, dict[str, bytes]]  # config -> split -> Parquet bytes; the first config is the default
    meta: dict[str, Any]
    extra_files: dict[str, bytes] = field(default_factory=dict)


class TrainingExport(ExportFormat):
    """Training data, versioned in the store (see the module doc)."""

    format: ClassVar[str]  # e.g. `dareforge-sft/1`: names the content's layout in the manifest

    @abstractmethod
    def content(self, job: ExportJob, name: str) -> ExportContent: ...

    @abstractmethod
    def card(self, meta: dict[str, Any]) -> str:
        """The README of a version whose manifest holds `meta`."""

    def export(self, job: ExportJob, name: str | None = None) -> ExportResult:
        """Write (or find) the version of export `name` (default `<release>-<format>`) holding `content(job)`."""
        name = name or f"{job.release.name}-{self.name}"
        root = Export.root(name)
        content = self.content(job, name)
        # One writer at a time per export, as for releases (`build_release`).
        with job.ctx.store.lock(root):
            return self._write(job, name, root, content)

    def _write(self, job: ExportJob, name: str, root: str, content: ExportContent) -> ExportResult:
        store = job.ctx.store
        versions = finished_versions(store, root)
        if versions:
            found = store.read_json(f"{root}/{versions[-1]}/{MANIFEST}").get("format")
            if found != self.format:
                raise ExportError(
                    f"export {name!r} already holds {found} versions; a {self.format} export needs another name"
                )
        plan = plan_version(store, root, content.meta["content_fingerprint"], None, job.today)
        if plan.existing:
            log.info("%s export %s: %s", self.name, name, plan.note)
            found_export = Export.load(store, name, plan.version)
            return ExportResult(
                found_export, False, found_export.manifest.get("previous_version"), [str(plan.note)]
            )

        prefix = f"{root}/{plan.version}"
        configs = {
            config: {
                split: f"{config if config != 'default' else 'data'}/{split}.parquet" for split in splits
            }
            for config, splits in content.tables.items()
        }
        meta = {
            "format": self.format,
            "kind": self.name,
            "name": name,
            "pretty_name": name,
            "version": plan.version,
            "previous_version": plan.previous,
            "configs": configs,
            **content.meta,
        }
        files = [
            write(store, f"{prefix}/{configs[config][split]}", configs[config][split], data)
            for config, splits in content.tables.items()
            for split, data in splits.items()
        ]
        files.append(write(store, f"{prefix}/README.md", "README.md", self.card(meta).encode()))
        files += [write(store, f"{prefix}/{n}", n, data) for n, data in sorted(content.extra_files.items())]
        files.sort(key=lambda e: e["name"])
        remove_unlisted(store, prefix, {e["name"] for e in files})
        write_build_record(store, root, plan.version)
        store.write_json(f"{prefix}/{MANIFEST}", {**meta, "files": files})  # last: now the version exists
        log.info("%s export %s %s written", self.name, name, plan.version)
        return ExportResult(Export.load(store, name, plan.version), True, plan.previous)


@dataclass
class LayoutReport(ABC):
    """What a folder layout wrote: `skipped` maps a task id to why the layout has no place for it."""

    release: Release
    dest: Path
    skipped: dict[str, str] = field(default_factory=dict)

    @abstractmethod
    def summary(self) -> list[str]: ...


class FolderLayout(ExportFormat):
    """Another benchmark's folder layout of a whole release (see the module doc)."""

    @abstractmethod
    def write(self, job: ExportJob, folder: Path) -> LayoutReport:
        """Fill `folder`, which becomes `job.dest` once this returns."""

    def export(self, job: ExportJob) -> LayoutReport:
        if job.dest is None:
            raise ExportError(f"the {self.name} layout is written to a folder: name one (--dest)")
        with staged_folder(Path(job.dest), replace=True) as folder:
            return self.write(job, folder)
