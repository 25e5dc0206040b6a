"""Versions of anything published from the store (releases, their private halves, exports): folders
`<root>/<version>/` whose `manifest.json` is written last, so a version exists only once it is complete.

Versions are `YYYY.MM.DD` (UTC) with a `.N` suffix when that day already has one; a build whose content
fingerprint equals the latest version's reuses it (`plan_version`), a half-written newer version is completed
rather than named anew, and what a finished version's manifest does not list is removed before it is written
(`remove_unlisted`). When and where a version was built goes to its build record, `<root>/.builds/<version>.json`,
never into the version's own files. `verify_parts` re-hashes what the manifests list.

`Version` is what releases and exports share once built: where a name's versions live, listing and loading
them, re-hashing one; `BuildResult` is what a build of either returns.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, ClassVar, Generic, Self, TypeVar

from dareforge.errors import DareforgeError
from dareforge.publish.files import sha256_key
from dareforge.store import Store

PRIVATE_SUFFIX = "-private"
"""A release's private half is `<name>-private`: no public name may end so."""


class VersionError(DareforgeError):
    """A version that cannot be planned: a bad name, or one that exists with other content."""


MANIFEST = "manifest.json"


BUILDS = ".builds"
"""The folder beside a release's or export's versions that holds their build records (a dot folder: never a
version)."""


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_name(name: str, what: str = "release") -> None:
    if not NAME_RE.match(name) or name.endswith(PRIVATE_SUFFIX):
        raise VersionError(
            f"{what} name {name!r} must be letters, digits, '.', '_' or '-' (starting with a letter or digit) "
            f"and must not end in {PRIVATE_SUFFIX!r}, which names the private half"
        )


def version_key(version: str) -> tuple[tuple[int, int, str], ...]:
    """Natural order: 2026.05.01 < 2026.05.01.1 < 2026.05.01.2 < 2026.05.02."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in version.split("."))


@dataclass(frozen=True)
class Part:
    """One folder of a finished version that a target publishes as a unit (a Hub repo, a local folder)."""

    name: str  # the repo or folder name: the release name, or `<name>-private`
    prefix: str  # where it lives in the store
    manifest: dict[str, Any]
    private: bool


def version_dirs(store: Store, root: str) -> list[str]:
    """Every version folder under `root`, finished or not."""
    base = store.path(root)
    if not store.fs.exists(base):
        return []
    out = []
    for info in store.fs.ls(base, detail=True):
        version = info["name"].rstrip("/").rsplit("/", 1)[-1]
        if info.get("type") == "directory" and not version.startswith("."):
            out.append(version)
    return out


def finished_versions(store: Store, root: str) -> list[str]:
    """Versions under `root` whose `manifest.json` is written, oldest first."""
    finished = [v for v in version_dirs(store, root) if store.exists(f"{root}/{v}/{MANIFEST}")]
    return sorted(finished, key=version_key)


@dataclass(frozen=True)
class VersionPlan:
    """What a build under `root` does: write `version`, or (`existing`) find its content already there."""

    version: str
    existing: bool
    previous: str | None  # the newest finished version other than `version`
    note: str | None = None


def check_version(version: str | None) -> None:
    if version is not None and not NAME_RE.match(version):
        raise VersionError(f"version {version!r} must be letters, digits, '.', '_' or '-'")


def plan_version(
    store: Store, root: str, content_fp: str, version: str | None = None, today: date | None = None
) -> VersionPlan:
    """Pick the version a build of content `content_fp` writes. Versions are immutable: the latest version with
    the same `content_fingerprint` is reused, and an explicit `version` that exists with other content is an
    error. A half-written version newer than the latest finished one is completed rather than named anew."""
    check_version(version)
    versions = finished_versions(store, root)
    latest = versions[-1] if versions else None

    def fingerprint(v: str) -> str | None:
        return store.read_json(f"{root}/{v}/{MANIFEST}").get("content_fingerprint")

    if version is None:
        if latest is not None and fingerprint(latest) == content_fp:
            return VersionPlan(latest, True, latest, f"content equals {latest}; no new version")
        version = next_version(store, root, latest, today or datetime.now(UTC).date())
    elif version in versions:
        if fingerprint(version) != content_fp:
            raise VersionError(
                f"{root} {version} already exists with other content and versions are immutable; build a new "
                "version (omit version= for the date-based name)"
            )
        return VersionPlan(version, True, latest, f"{version} already holds this content")
    previous = next((v for v in reversed(versions) if v != version), None)
    return VersionPlan(version, False, previous)


def next_version(store: Store, root: str, latest: str | None, today: date) -> str:
    """Today's version name, or the newest half-written version newer than the latest finished one."""
    dirs = version_dirs(store, root)
    newer = [v for v in dirs if latest is None or version_key(v) > version_key(latest)]
    unfinished = [v for v in newer if not store.exists(f"{root}/{v}/{MANIFEST}")]
    if unfinished:
        return max(unfinished, key=version_key)
    base = today.strftime("%Y.%m.%d")
    if latest is not None and version_key(base) < version_key(latest)[:3]:
        raise VersionError(
            f"the latest version of {root} is {latest}, dated after today ({base}); pass version= explicitly"
        )
    candidate, n = base, 0
    while candidate in dirs or (latest is not None and version_key(candidate) <= version_key(latest)):
        n += 1
        candidate = f"{base}.{n}"
    return candidate


def build_record_key(root: str, version: str) -> str:
    return f"{root}/{BUILDS}/{version}.json"


def write_build_record(store: Store, root: str, version: str) -> None:
    """Record when and from which store `version` under `root` is built: facts about the build, not the
    content, so they stay out of the version's own files (see the module doc)."""
    store.write_json(
        build_record_key(root, version),
        {
            "version": version,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "created_from": store.url,
        },
    )


def read_build_record(store: Store, root: str, version: str) -> dict[str, Any]:
    """The build record of `version` under `root`; empty for a version built before records were kept."""
    key = build_record_key(root, version)
    return store.read_json(key) if store.exists(key) else {}


def remove_unlisted(store: Store, prefix: str, keep: set[str]) -> None:
    """Delete what a half-written earlier attempt left under `prefix` that the manifest will not list."""
    for key in store.list(prefix):
        rel = key[len(prefix) + 1 :]
        if rel not in keep and rel != MANIFEST:
            store.fs.rm(store.path(key))


def verify_parts(store: Store, parts: list[Part]) -> list[str]:
    """Re-hash every file the parts' manifests list; one line per problem."""
    problems = []
    for part in parts:
        for entry in part.manifest["files"]:
            key = f"{part.prefix}/{entry['name']}"
            if not store.exists(key):
                problems.append(f"{key}: missing")
            elif (digest := sha256_key(store, key)) != entry["sha256"]:
                problems.append(f"{key}: sha256 {digest} != manifest {entry['sha256']}")
    return problems


@dataclass
class Version(ABC):
    """A finished version in the store, `<ROOT>/<name>/<version>/`, as its manifest describes it. A subclass
    (a release, an export) says where its versions live and which error tells a reader what is missing."""

    store: Store
    name: str
    version: str
    manifest: dict[str, Any]

    ROOT: ClassVar[str]
    noun: ClassVar[str]  # "release", "export": how messages name it
    error: ClassVar[type[DareforgeError]]
    how_to_build: ClassVar[str]  # what a message about a name with no version tells the reader to run

    @classmethod
    def root(cls, name: str) -> str:
        check_name(name, cls.noun)
        return f"{cls.ROOT}/{name}"

    @property
    def prefix(self) -> str:
        return f"{self.ROOT}/{self.name}/{self.version}"

    @abstractmethod
    def parts(self) -> list[Part]:
        """What a target publishes, in the order it must (a private half before its public one)."""

    @classmethod
    def versions(cls, store: Store, name: str) -> list[str]:
        """Finished versions of `name`, oldest first; a version without `manifest.json` does not exist yet."""
        return finished_versions(store, cls.root(name))

    @classmethod
    def load(cls, store: Store, name: str, version: str | None = None) -> Self:
        """A finished version (the latest when `version` is None)."""
        root = cls.root(name)
        if version is None:
            versions = finished_versions(store, root)
            if not versions:
                raise cls.error(
                    f"{cls.noun} {name!r} has no finished version in {store.url}; {cls.how_to_build}"
                )
            version = versions[-1]
        key = f"{root}/{version}/{MANIFEST}"
        if not store.exists(key):
            known = ", ".join(finished_versions(store, root)) or "none"
            raise cls.error(f"{cls.noun} {name!r} has no finished version {version!r} (finished: {known})")
        return cls(store, name, version, store.read_json(key))

    def verify(self) -> list[str]:
        """Re-hash every file the manifests list; one line per problem (empty when the version is intact)."""
        return verify_parts(self.store, self.parts())


V = TypeVar("V", bound=Version)


@dataclass
class BuildResult(Generic[V]):
    """What a build returns: the finished version holding its content, whether this build wrote it
    (`created`; False when a version already held that content), and the version before it."""

    finished: V
    created: bool
    previous: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.finished.name

    @property
    def version(self) -> str:
        return self.finished.version
