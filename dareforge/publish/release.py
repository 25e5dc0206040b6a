"""Release builder: freeze the released tasks of the store into an immutable, versioned release.

A release has two halves with the same version:

- public, `releases/<name>/<version>/`: `data/{train,test}.parquet` (one row per task, public fields only),
  `files/<ab>/<task_id>/<file>` (the task's public input files; `<ab>`, the id's first two characters, keeps
  every folder far below the Hub's 10,000 entries per folder at any catalog size), `README.md` (a Hugging Face
  dataset card that `datasets.load_dataset(<folder>)` reads), `CHANGELOG.md` (against the previous version) and
  `manifest.json` (whose `skill` block, `publish.skill`, sums up per family how the tasks tell solvers apart);
- private, `releases/<name>-private/<version>/`: `answers/<ab>/<task_id>/<file>` (answers, reference code and
  predictions, IF spec), `data/private.parquet` (metric, baseline and strong scores, spec, package versions),
  a minimal card and its own `manifest.json`.

The public rows carry id, family, source id and version, split, instruction, metric, sub-tasks (a Lake task's
sub-questions; their answers are private), limits, the public file
list (with release paths and checksums), generator version, seed and the reference's package versions. They
never carry answers, reference code or predictions, the sampled IF spec (the instruction states the workflow
in prose; the machine-readable spec would let a script rebuild the reference without reading it) or scores.
The public manifest lists only public files: a checksum of a small answers file could be brute-forced.

Which tasks: generated candidates whose task manifest exists, from sources the filter still keeps, that the
validation gate accepted. With no verdicts at all (the gate has not run), every candidate is released and a
log line says so; once verdicts exist, a task without one (not validated yet) is left out.

Versions are `YYYY.MM.DD` (UTC) with a `.N` suffix when that day already has a version. A build whose content
(task ids, split sides, every public and private file checksum, the task rows) equals the latest version's
makes no new version and returns the latest (`created=False`). Finished versions are never rewritten.

A version's bytes are a function of its inputs: two builds of the same tasks give the same files, so the
manifests and cards hold no build time, no store location and no measured seconds. When and where a version
was built goes to its build record, `<root>/.builds/<version>.json` beside the versions (never published;
the report reads it).

Atomicity without renames (object stores cannot rename folders): files go to their final keys first and a
version exists only once its public `manifest.json` is written, last (the private manifest just before it).
`list_versions` and `load_release` ignore a version without one, and the next build completes the newest such
half-written version (newer than the latest finished one) instead of starting another name; before the
manifests are written, files under the version that the manifest would not list are removed, so a finished
version folder holds exactly what its manifest lists.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property
from typing import Any

import pyarrow as pa

from dareforge.context import RunContext
from dareforge.hashing import canonical_json, content_fingerprint, sha256_bytes
from dareforge.publish import changelog, release_card
from dareforge.publish.files import copy, parquet_bytes, read_rows, write
from dareforge.publish.skill import skill_summary
from dareforge.publish.source_split import (
    DEFAULT_SEED,
    DEFAULT_TEST_SHARE,
    SPLITS,
    assign_splits,
    source_date,
)
from dareforge.publish.versions import (
    MANIFEST,
    PRIVATE_SUFFIX,
    BuildResult,
    Part,
    Version,
    VersionError,
    check_name,
    check_version,
    plan_version,
    remove_unlisted,
    write_build_record,
)
from dareforge.queries import chosen_framings, kept_sources
from dareforge.schema import Source, Task, TaskScores, Validation, Verdict
from dareforge.store import MANIFEST as TASK_MANIFEST

log = logging.getLogger(__name__)

RELEASES = "releases"
FORMAT = "dareforge-release/2"
UNSHARDED = "dareforge-release/1"  # task folders directly under `files/` and `answers/`; still read


def public_folder(task_id: str, release_format: str = FORMAT) -> str:
    """A task's folder in the public half: `files/<ab>/<task_id>`, `<ab>` its id's first two characters."""
    return _task_folder("files", task_id, release_format)


def answers_folder(task_id: str, release_format: str = FORMAT) -> str:
    """A task's folder in the private half: `answers/<ab>/<task_id>`."""
    return _task_folder("answers", task_id, release_format)


def _task_folder(half: str, task_id: str, release_format: str) -> str:
    return f"{half}/{task_id}" if release_format == UNSHARDED else f"{half}/{task_id[:2]}/{task_id}"


class ReleaseError(VersionError):
    pass


_TASK = Task.arrow_schema()
_SCORES = _TASK.field("scores")
RELEASED_SCORES = _SCORES.with_type(pa.struct([f for f in _SCORES.type if f.name not in TaskScores.MEASURED]))
_SOURCE_FILE = _TASK.field("public_files").type.value_type
_FILE = pa.struct(
    [pa.field("path", pa.string(), False), *(_SOURCE_FILE.field(i) for i in range(_SOURCE_FILE.num_fields))]
)
PUBLIC_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), False),
        pa.field("family", pa.string(), False),
        pa.field("source_id", pa.string(), False),
        pa.field("source_version", pa.string(), False),
        pa.field("split", pa.string(), False),
        pa.field("instruction", pa.string(), False),
        _TASK.field("metric"),
        _TASK.field("pass_bar"),
        _TASK.field("subtasks"),
        _TASK.field("difficulty"),
        _TASK.field("operations"),
        _TASK.field("limits"),
        pa.field("files", pa.list_(_FILE), False),
        pa.field("generator_version", pa.string(), False),
        pa.field("seed", pa.int64(), False),
        _TASK.field("package_versions"),
    ]
)
PRIVATE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), False),
        pa.field("family", pa.string(), False),
        pa.field("source_id", pa.string(), False),
        pa.field("split", pa.string(), False),
        _TASK.field("metric"),
        RELEASED_SCORES,
        _TASK.field("spec"),
        _TASK.field("package_versions"),
        pa.field("files", pa.list_(_FILE), False),
    ]
)


def public_prefix(name: str, version: str) -> str:
    return f"{RELEASES}/{name}/{version}"


def private_prefix(name: str, version: str) -> str:
    return f"{RELEASES}/{name}{PRIVATE_SUFFIX}/{version}"


@dataclass
class Release(Version):
    """A finished release version, as consumers (audit, targets, exporters) read it."""

    ROOT = RELEASES
    noun = "release"
    error = ReleaseError
    how_to_build = "build one with `build_release`"
    kind = "release"

    @property
    def private_name(self) -> str:
        return f"{self.name}{PRIVATE_SUFFIX}"

    @property
    def private_prefix(self) -> str:
        return private_prefix(self.name, self.version)

    @cached_property
    def private_manifest(self) -> dict[str, Any]:
        key = f"{self.private_prefix}/{MANIFEST}"
        if not self.store.exists(key):
            raise ReleaseError(f"{key} is missing: the private half of {self.name} {self.version} is damaged")
        return self.store.read_json(key)

    @property
    def task_ids(self) -> list[str]:
        return list(self.manifest["task_ids"])

    @cached_property
    def splits(self) -> dict[str, str]:
        """task id -> `train` or `test`. Built once: callers look it up per task (an export of 10,000 tasks
        rebuilding it per row was quadratic)."""
        return {t["id"]: t["split"] for t in self.manifest["tasks"]}

    def files_dir(self, task_id: str) -> str:
        """Store prefix of a task's public files in this version (the version's format says which layout)."""
        return f"{self.prefix}/{public_folder(task_id, self.manifest['format'])}"

    def answers_dir(self, task_id: str) -> str:
        """Store prefix of a task's private files (answers, reference code) in this version."""
        return f"{self.private_prefix}/{answers_folder(task_id, self.manifest['format'])}"

    def rows(self, split: str | None = None) -> list[dict[str, Any]]:
        """The public task rows (all splits, or one), as in `data/<split>.parquet`."""
        names = {f["name"] for f in self.manifest["files"]}
        rows = []
        for side in SPLITS if split is None else (split,):
            if f"data/{side}.parquet" in names:
                rows += read_rows(self.store, f"{self.prefix}/data/{side}.parquet")
        return rows

    def parts(self) -> list[Part]:
        """Private half first: a target that stops midway never shows a public version without its answers."""
        return [
            Part(self.private_name, self.private_prefix, self.private_manifest, private=True),
            Part(self.name, self.prefix, self.manifest, private=False),
        ]

    def private_rows(self) -> list[dict[str, Any]]:
        return read_rows(self.store, f"{self.private_prefix}/data/private.parquet")

    def tasks(self) -> list[Task]:
        """The full task records, from the store's task manifests (these hold the private fields too)."""
        return [self.task(task_id) for task_id in self.task_ids]

    def task(self, task_id: str) -> Task:
        """One full task record: a reader of a large release loads its tasks one at a time."""
        key = f"tasks/{task_id}/{TASK_MANIFEST}"
        if not self.store.exists(key):
            raise ReleaseError(f"{key} is missing from {self.store.url}; release rows are in Release.rows()")
        return Task.model_validate(self.store.read_json(key)["task"])


@dataclass
class ReleaseResult(BuildResult[Release]):
    changelog: str = ""
    excluded: dict[str, int] = field(default_factory=dict)

    @property
    def release(self) -> Release:
        return self.finished


# -- reading ----------------------------------------------------------------------------------------------------
def list_versions(ctx: RunContext, name: str) -> list[str]:
    """Finished versions of a release, oldest first."""
    return Release.versions(ctx.store, name)


def load_release(ctx: RunContext, name: str, version: str | None = None) -> Release:
    """A finished version (the latest when `version` is None)."""
    return Release.load(ctx.store, name, version)


def verify_release(ctx: RunContext, name: str, version: str | None = None) -> list[str]:
    """Re-hash every file both manifests list; one line per problem (empty when the release is intact)."""
    return load_release(ctx, name, version).verify()


# -- selecting --------------------------------------------------------------------------------------------------
@dataclass
class Selection:
    tasks: list[Task]
    sources: dict[str, Source]
    excluded: Counter
    verdicts: dict[str, Any]
    notes: list[str]
    candidates: list[Task]
    """The tasks before the gate: the card tells what share of them it rejected, and why."""
    judged: list[Verdict]


def select_tasks(ctx: RunContext) -> Selection:
    """The tasks a release would hold now, with counts of what was left out and why."""
    store = ctx.store
    excluded: Counter = Counter()
    notes: list[str] = []
    tasks = sorted({t.id: t for t in store.read_records(Task)}.values(), key=lambda t: t.id)
    candidates = []
    kept = kept_sources(ctx)
    framed = chosen_framings(ctx)
    for task in tasks:
        if task.variant_of is not None:
            excluded["obscured variant (for the memorization probe, never released)"] += 1
        elif task.status != "candidate":
            excluded["rejected by the generator"] += 1
        elif kept is not None and task.source_id not in kept:
            excluded["source no longer kept by the filter"] += 1
        elif framed is not None and (task.source_id, task.framing) not in framed:
            excluded["framing no longer chosen by the understand stage"] += 1
        elif not store.exists(f"tasks/{task.id}/{TASK_MANIFEST}"):
            excluded["unfinished (no task manifest)"] += 1
        else:
            candidates.append(task)
    verdicts = store.read_records(Verdict)
    if not verdicts:
        note = f"no verdict table: every candidate task is accepted ({len(candidates)} tasks)"
        log.warning("release: %s", note)
        notes.append(note)
        selected = candidates
        fingerprint = None
    else:
        by_task = {v.task_id: v for v in verdicts}
        selected = []
        for task in candidates:
            verdict = by_task.get(task.id)
            if verdict is None:
                excluded["not validated yet (no verdict)"] += 1
            elif not verdict.accepted:
                excluded[changelog.exclusion(verdict.reasons)] += 1
            else:
                selected.append(task)
        fingerprint = sha256_bytes(
            canonical_json(sorted([v.task_id, v.accepted, v.thresholds_fingerprint] for v in verdicts))
        )[:16]
    sources = {s.id: s for s in store.read_records(Source)}
    verdict_info = {
        "present": bool(verdicts),
        "fingerprint": fingerprint,
        "thresholds_fingerprints": sorted({v.thresholds_fingerprint for v in verdicts}),
        "accepted": sum(v.accepted for v in verdicts),
        "rejected": sum(not v.accepted for v in verdicts),
    }
    return Selection(selected, sources, excluded, verdict_info, notes, candidates, verdicts)


# -- building ---------------------------------------------------------------------------------------------------
def public_file_entries(task: Task, release_format: str = FORMAT) -> list[dict[str, Any]]:
    """The task's public files as release rows list them: the path in the release's public folder first (in
    the layout of `release_format`)."""
    folder = public_folder(task.id, release_format)
    return [{"path": f"{folder}/{f.name}", **f.model_dump()} for f in task.public_files]


def _public_row(task: Task, split: str) -> dict[str, Any]:
    return {
        "id": task.id,
        "family": task.family,
        "source_id": task.source_id,
        "source_version": task.source_version,
        "split": split,
        "instruction": task.instruction,
        "metric": task.metric.model_dump(),
        "pass_bar": task.pass_bar,
        "subtasks": [sub.model_dump() for sub in task.subtasks],
        "difficulty": task.difficulty,
        "operations": list(task.operations),
        "limits": task.limits.model_dump(),
        "files": public_file_entries(task),
        "generator_version": task.generator_version,
        "seed": task.seed,
        "package_versions": list(task.package_versions),
    }


def _private_row(task: Task, split: str) -> dict[str, Any]:
    return {
        "id": task.id,
        "family": task.family,
        "source_id": task.source_id,
        "split": split,
        "metric": task.metric.model_dump(),
        "scores": task.scores.model_dump(exclude=set(TaskScores.MEASURED)),
        "spec": task.spec,
        "package_versions": list(task.package_versions),
        "files": [
            {"path": f"{answers_folder(task.id)}/{f.name}", **f.model_dump()} for f in task.private_files
        ],
    }


def _task_entry(task: Task, split: str) -> dict[str, Any]:
    return {
        "id": task.id,
        "source_id": task.source_id,
        "source_version": task.source_version,
        "prepared_version": task.prepared_version,
        "generator_version": task.generator_version,
        "family": task.family,
        "seed": task.seed,
        "split": split,
        "metric": task.metric.model_dump(),
        "public_files": {f.name: f.sha256 for f in task.public_files},
    }


def build_release(
    ctx: RunContext,
    name: str,
    version: str | None = None,
    *,
    pretty_name: str | None = None,
    test_share: float = DEFAULT_TEST_SHARE,
    seed: str = DEFAULT_SEED,
    sticky: bool = True,
    today: date | None = None,
) -> ReleaseResult:
    """Build (or find) the release version holding the store's released tasks; see the module doc."""
    check_name(name)
    check_version(version)
    # Picking the version, completing a half-written one and removing what it does not list are safe only
    # for one builder at a time: a second one waits, then finds the version finished.
    with ctx.store.lock(f"{RELEASES}/{name}"):
        return _build_release(ctx, name, version, pretty_name, test_share, seed, sticky, today)


def _build_release(
    ctx: RunContext,
    name: str,
    version: str | None,
    pretty_name: str | None,
    test_share: float,
    seed: str,
    sticky: bool,
    today: date | None,
) -> ReleaseResult:
    store = ctx.store
    selection = select_tasks(ctx)
    if not selection.tasks:
        why = (
            ", ".join(f"{n} {reason}" for reason, n in selection.excluded.items()) or "no tasks in the store"
        )
        raise ReleaseError(f"nothing to release ({why}); run `dareforge generate` (and the gate) first")
    versions = list_versions(ctx, name)
    latest = load_release(ctx, name, versions[-1]) if versions else None

    source_ids = sorted({t.source_id for t in selection.tasks})
    previous_sides = {s["id"]: s["split"] for s in latest.manifest["sources"]} if latest and sticky else None
    sides = assign_splits(
        {s: source_date(selection.sources.get(s)) for s in source_ids},
        test_share=test_share,
        seed=seed,
        previous=previous_sides,
        families={s: {t.family for t in selection.tasks if t.source_id == s} for s in source_ids},
    )
    tasks = sorted(selection.tasks, key=lambda t: (sides[t.source_id], t.source_id, t.family, t.seed, t.id))
    public_rows = [_public_row(t, sides[t.source_id]) for t in tasks]
    private_rows = [_private_row(t, sides[t.source_id]) for t in tasks]
    public_fp = content_fingerprint({"format": FORMAT, "rows": public_rows})
    private_fp = content_fingerprint({"format": FORMAT, "rows": private_rows})
    skill = skill_summary(selection.candidates, tasks, store.iter_records(Validation), selection.judged)
    # The skill figures are part of what a version says: a ladder run on unchanged tasks makes a new version.
    skill_fp = content_fingerprint(skill)
    content_fp = sha256_bytes(f"{public_fp}:{private_fp}:{skill_fp}".encode())

    def existing(release: Release, notes: list[str]) -> ReleaseResult:
        return ReleaseResult(
            release,
            created=False,
            previous=release.manifest.get("previous_version"),
            notes=notes,
            excluded=dict(selection.excluded),
        )

    plan = plan_version(store, f"{RELEASES}/{name}", content_fp, version, today)
    if plan.existing:
        log.info("release %s: %s", name, plan.note)
        return existing(load_release(ctx, name, plan.version), [*selection.notes, str(plan.note)])
    version = plan.version
    previous = load_release(ctx, name, plan.previous) if plan.previous else None

    pub, priv = public_prefix(name, version), private_prefix(name, version)
    public_files, private_files = [], []
    for task in tasks:
        for f in task.private_files:
            rel = f"{answers_folder(task.id)}/{f.name}"
            private_files.append(
                copy(store, f"tasks/{task.id}/private/{f.name}", f"{priv}/{rel}", rel, f.sha256, f.size)
            )
        for f in task.public_files:
            rel = f"{public_folder(task.id)}/{f.name}"
            public_files.append(
                copy(store, f"tasks/{task.id}/public/{f.name}", f"{pub}/{rel}", rel, f.sha256, f.size)
            )
    for side in SPLITS:
        rows = [r for r in public_rows if r["split"] == side]
        if rows:
            rel = f"data/{side}.parquet"
            public_files.append(write(store, f"{pub}/{rel}", rel, parquet_bytes(rows, PUBLIC_SCHEMA)))
    private_files.append(
        write(
            store,
            f"{priv}/data/private.parquet",
            "data/private.parquet",
            parquet_bytes(private_rows, PRIVATE_SCHEMA),
        )
    )

    entries = [_task_entry(t, sides[t.source_id]) for t in tasks]
    private_entries = [
        {"id": t.id, "private_files": {f.name: f.sha256 for f in t.private_files}} for t in tasks
    ]
    task_counts = Counter(t.source_id for t in tasks)
    sources = []
    for source_id in source_ids:
        s = selection.sources.get(source_id)
        when = source_date(s)
        versions_seen = sorted({t.source_version for t in tasks if t.source_id == source_id})
        sources.append(
            {
                "id": source_id,
                "version": ", ".join(versions_seen),
                "title": s.title if s else source_id,
                "url": s.public_url if s else None,
                "license": s.license if s else None,
                "origin": str(s.origin) if s else None,
                "date": when.isoformat() if when else None,
                "split": sides[source_id],
                "tasks": task_counts[source_id],
            }
        )
    meta: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "pretty_name": pretty_name or name,
        "version": version,
        "previous_version": previous.version if previous else None,
        "private_release": f"{name}{PRIVATE_SUFFIX}",
        "content_fingerprint": content_fp,
        "public_fingerprint": public_fp,
        "task_ids": sorted(t.id for t in tasks),
        "tasks": entries,
        "splits": {
            side: {
                "tasks": sum(e["split"] == side for e in entries),
                "sources": sorted(s for s in source_ids if sides[s] == side),
            }
            for side in SPLITS
        },
        "families": {
            family: {
                side: sum(e["family"] == family and e["split"] == side for e in entries) for side in SPLITS
            }
            for family in sorted({e["family"] for e in entries})
        },
        "split_rule": {
            "by": "source",
            "test": "most recently updated",
            "families": "each family on both sides where its sources allow",
            "test_share": test_share,
            "seed": seed,
            "sticky": sticky,
        },
        "sources": sources,
        "generator_versions": sorted({t.generator_version for t in tasks}),
        "package_versions": sorted({"; ".join(t.package_versions) for t in tasks}),
        "verdicts": selection.verdicts,
        "selection": {
            "candidates": len(tasks) + sum(selection.excluded.values()),
            "released": len(tasks),
            "excluded": dict(sorted(selection.excluded.items())),
        },
        "skill": skill,
    }

    # The changelog sees private checksums to tell "same id, other files", but prints only file names.
    before = None
    if previous is not None:
        private_before = {e["id"]: e["private_files"] for e in previous.private_manifest["tasks"]}
        before = [{**e, "private_files": private_before.get(e["id"], {})} for e in previous.manifest["tasks"]]
    after = [
        {**e, "private_files": p["private_files"]} for e, p in zip(entries, private_entries, strict=True)
    ]
    result = changelog.diff(before, after)
    reviewed = changelog.among(selection.judged, selection.candidates)
    changes = changelog.render(name, version, previous and previous.version, result, reviewed)
    meta["changes"] = result.summary()

    public_files.append(
        write(store, f"{pub}/README.md", "README.md", release_card.public_card(meta).encode())
    )
    public_files.append(write(store, f"{pub}/CHANGELOG.md", "CHANGELOG.md", changes.encode()))
    private_meta = {
        "format": FORMAT,
        "name": f"{name}{PRIVATE_SUFFIX}",
        "public_release": name,
        "pretty_name": meta["pretty_name"],
        "version": version,
        "content_fingerprint": content_fp,
        "private_fingerprint": private_fp,
        "task_ids": meta["task_ids"],
        "tasks": private_entries,
    }
    private_files.append(
        write(store, f"{priv}/README.md", "README.md", release_card.private_card(private_meta).encode())
    )

    public_files.sort(key=lambda e: e["name"])
    private_files.sort(key=lambda e: e["name"])
    remove_unlisted(store, priv, {e["name"] for e in private_files})
    remove_unlisted(store, pub, {e["name"] for e in public_files})
    write_build_record(store, f"{RELEASES}/{name}", version)
    store.write_json(f"{priv}/{MANIFEST}", {**private_meta, "files": private_files})
    store.write_json(f"{pub}/{MANIFEST}", {**meta, "files": public_files})  # last: now the version exists
    log.info("release %s %s: %d tasks (%s)", name, version, len(tasks), ", ".join(selection.notes) or "gated")
    return ReleaseResult(
        load_release(ctx, name, version),
        created=True,
        previous=previous.version if previous else None,
        changelog=changes,
        notes=list(selection.notes),
        excluded=dict(selection.excluded),
    )
