"""Targets: where a finished release version goes after the store (a folder here; the Hub in hub.py).

A target implements `Target.publish(release) -> str` (where it went: a path or URL) and must be idempotent:
publishing a version that is already there with the same manifest does nothing. It copies exactly the files
the manifests list (never whatever else sits under the prefix), and keeps the private half apart: a Hub
target pushes `release.prefix` to the public repo and `release.private_prefix` to a private one.

What a target publishes is any `Publishable`: a `Release` (private and public part) or an SFT/RL export
(`dareforge.exports.export_format.Export`, one public part); each part is one folder or repo named `Part.name`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from dareforge.hashing import sha256_file
from dareforge.publish.files import staged_folder
from dareforge.publish.release import ReleaseError
from dareforge.publish.versions import MANIFEST, Part
from dareforge.store import Store, link_or_copy_file


class Publishable(Protocol):
    """A finished version in the store: `Release`, or an export (`dareforge.exports.export_format.Export`)."""

    store: Store
    name: str
    version: str
    kind: str  # "release", "sft export", ...: names it in commit titles

    def parts(self) -> list[Part]: ...


@runtime_checkable
class Target(Protocol):
    def publish(self, release: Publishable) -> str: ...


def _copy_version(store: Store, prefix: str, manifest: dict[str, Any], dest: Path) -> bool:
    """Copy one half of a version to `dest` atomically; returns False when it was already there."""
    manifest_bytes = store.read_bytes(f"{prefix}/{MANIFEST}")
    existing = dest / MANIFEST
    if existing.exists():
        if existing.read_bytes() == manifest_bytes:
            return False
        raise ReleaseError(
            f"{dest} holds another build of {manifest['name']} {manifest['version']}; versions are immutable, so "
            "remove that folder by hand if it is stale"
        )
    try:
        with staged_folder(dest, replace=False) as tmp:
            for entry in manifest["files"]:
                target = tmp / entry["name"]
                target.parent.mkdir(parents=True, exist_ok=True)
                digest = _place(store, f"{prefix}/{entry['name']}", target)
                if digest != entry["sha256"]:
                    raise ReleaseError(
                        f"{prefix}/{entry['name']}: sha256 {digest} != manifest {entry['sha256']}; "
                        "the release in the store is damaged (see verify_release)"
                    )
            (tmp / MANIFEST).write_bytes(manifest_bytes)
    except OSError:
        # Another publisher finished first; fine if it put the same version there.
        if not (existing.exists() and existing.read_bytes() == manifest_bytes):
            raise
        return False
    return True


def _place(store: Store, key: str, target: Path) -> str:
    """Put the store file `key` at `target` and return the sha256 of what is there: a hard link when the store is
    local and on the same filesystem (a catalog's version is gigabytes; the store never rewrites a file in
    place, so the link keeps the version's bytes), else a copy."""
    if store.is_local:
        link_or_copy_file(store.local_path(key), target)
        return sha256_file(target)
    digest = hashlib.sha256()
    with store.open(key) as src, open(target, "wb") as out:
        while block := src.read(1 << 20):
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


@dataclass
class LocalTarget:
    """Puts releases at `<folder>/<name>/<version>/` and `<folder>/<name>-private/<version>/` (see `_place`)."""

    folder: Path
    include_private: bool = True

    def __post_init__(self) -> None:
        self.folder = Path(self.folder)

    def publish(self, release: Publishable) -> str:
        """Copy every part (the private one only with `include_private`); returns the public part's folder."""
        public = self.folder / release.name / release.version
        for part in release.parts():
            if part.private and not self.include_private:
                continue
            dest = self.folder / part.name / release.version
            _copy_version(release.store, part.prefix, part.manifest, dest)
            if not part.private:
                public = dest
        return str(public)
