"""A folder laid out like Kaggle downloads, for air-gapped clusters and tests.

Each immediate sub-folder of a mirror path is one source: a `competition-metadata.json` (an ApiCompetition as
the Kaggle API returns it) or a `dataset-metadata.json` (as `kaggle datasets metadata` writes it), next to the
data zip or the data files. After the copy, the crawl stage treats them exactly like a Kaggle download.

Only regular files are read: a source folder that is a symbolic link, or one holding a link or a special file
anywhere inside, is recorded as failed with the links named (see `unpack.plain_files`), and nothing of it is
copied. Two folders that give the same source id are both refused the same way (see `_refuse_shared_ids`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

from dareforge.crawlers.crawler import source_id
from dareforge.crawlers.kaggle import competition_source, dataset_source
from dareforge.crawlers.unpack import PlainFile, copy_plain_file, open_plain, plain_file, plain_files
from dareforge.errors import DareforgeError, SourceError, UnsafeFileError
from dareforge.hashing import fingerprint, sha256_stream
from dareforge.schema import Origin, Source, SourceStatus

COMPETITION_META = "competition-metadata.json"
DATASET_META = "dataset-metadata.json"
METADATA_FILES = (COMPETITION_META, DATASET_META)


class MirrorCrawler:
    """A source's version fingerprints its metadata and its files' contents, not their times: a mirror copied
    again (a new machine, `cp` without `-p`) is the same input and redoes nothing downstream. `digests` keeps
    each file's hash by size, time and inode, so an unchanged mirror is not read again."""

    name = "mirror"

    def __init__(self, roots: list[Path], digests: Path | None = None):
        # Absolute: a source's url is a file URI, and `mirror.paths: [../mirror]` is how people write them.
        self.roots = [root.absolute() for root in roots]
        self.digests = FileDigests(digests)

    def list_sources(self) -> Iterator[Source]:
        by_id: dict[str, list[tuple[Path, Source]]] = {}
        for root in self.roots:
            if not root.is_dir():
                raise DareforgeError(
                    f"mirror path {root} is not a folder; fix mirror.paths in dareforge.yaml"
                )
            for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
                source = self._source(folder)
                by_id.setdefault(source.id, []).append((folder, source))
        self.digests.save()
        for claims in by_id.values():
            yield claims[0][1] if len(claims) == 1 else _refuse_shared_ids(claims)

    def _source(self, folder: Path) -> Source:
        listing: list[tuple[str, int, int]] = []
        try:
            files = self._files(folder)
            data_files = [f for f in files if f.path.name not in METADATA_FILES]
            listing = [(f.rel, f.size, f.mtime_ns) for f in data_files]
            source = self._from_metadata(folder, files, data_files)
            contents = [(f.rel, f.size, self.digests.sha256(f)) for f in data_files]
        except UnsafeFileError as exc:
            # Under the id its metadata gives, when that is safe to read: a link planted in a stored source
            # then fails the source's own record instead of leaving it in use next to a new failed one.
            return self._failed(folder, listing, str(exc), self._metadata_source(folder))
        except SourceError as exc:
            return self._failed(folder, listing, str(exc))
        except OSError as exc:  # hashed here, so an unreadable file fails its source, not the whole listing
            return self._failed(folder, listing, f"{exc}; make the file readable or move it out of {folder}")
        return source.model_copy(
            update={"version": fingerprint(source.version, contents), "url": folder.as_uri()}
        )

    def _metadata_source(self, folder: Path) -> Source | None:
        """The source the folder's own metadata describes, when it is a regular file in a real folder."""
        if folder.is_symlink():
            return None
        metadata = [f for f in (plain_file(folder, name) for name in METADATA_FILES) if f]
        try:
            return self._from_metadata(folder, metadata, []) if metadata else None
        except SourceError:
            return None

    @staticmethod
    def _failed(folder: Path, listing: list, detail: str, named: Source | None = None) -> Source:
        """A failed record: under the metadata's id when `named` is given, else under the folder's name."""
        failure = {
            "url": folder.as_uri(),
            "version": fingerprint("mirror-unreadable", listing),
            "status": SourceStatus.FAILED,
            "status_detail": detail,
        }
        if named is not None:
            return named.model_copy(update=failure)
        name = folder.name
        return Source(
            id=source_id(Origin.MIRROR.value, name),
            origin=Origin.MIRROR,
            kind="dataset",
            ref=name,
            title=name,
            **failure,
        )

    @staticmethod
    def _files(folder: Path) -> list[PlainFile]:
        """The folder's regular files; refuses a folder that is a link, or holds one (see `plain_files`)."""
        if folder.is_symlink():
            # Refused wherever it points: out of the mirror it would copy what it points at into the store;
            # inside, it only repeats another source (or, pointing at the mirror itself, all of them).
            raise UnsafeFileError(
                f"mirror folder {folder} is a symbolic link to {os.readlink(folder)}, which the crawl refuses; "
                f"move or copy the data into {folder.parent}, or add the folder holding the real source "
                "folders to mirror.paths"
            )
        return plain_files(folder)

    def _from_metadata(self, folder: Path, files: list[PlainFile], data_files: list[PlainFile]) -> Source:
        found = [f for name in METADATA_FILES for f in files if f.rel == name]
        if not found:
            raise SourceError(
                f"mirror folder {folder} has no {COMPETITION_META} or {DATASET_META}; add one "
                "(`kaggle datasets metadata OWNER/NAME -p FOLDER` writes the dataset one)"
            )
        path = found[0].path
        try:
            with open_plain(found[0]) as fh:
                meta = json.loads(fh.read().decode("utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SourceError(f"{path} is not valid UTF-8 JSON ({exc}); fix or re-export it") from exc
        if not isinstance(meta, dict):
            raise SourceError(f"{path} must hold a JSON object, not {type(meta).__name__}")
        if found[0].rel == COMPETITION_META:
            meta.setdefault("ref", folder.name)
            listed = [{"name": f.path.name, "totalBytes": f.size} for f in data_files]
            return competition_source(meta, listed, Origin.MIRROR, meta.get("hasLeaderboard"))
        return dataset_source(meta, Origin.MIRROR)

    def download(self, source: Source, dest: Path) -> None:
        folder = Path(unquote(urlparse(source.url).path)) if source.url else None
        if folder is None or not folder.is_dir():
            raise SourceError(
                f"mirror folder for {source.id} is gone ({source.url}); restore it or remove the path"
            )
        # Walked again, not taken from the listing: the folder may have changed since (links included).
        data_files = [f for f in self._files(folder) if f.path.name not in METADATA_FILES]
        if dest.exists():
            shutil.rmtree(dest)
        for file in data_files:
            copy_plain_file(file, dest / file.rel)


def _refuse_shared_ids(claims: list[tuple[Path, Source]]) -> Source:
    """One failed record for folders that give the same source id, naming them all.

    Ids are sanitised names ("unnamed" and "Unnamed!" both give mirror.unnamed) or metadata ids a copied
    folder repeats; two sources on one id overwrite each other's records and files without a word. All of
    them are refused rather than all but one, since which one would win depends only on folder order. A hash
    suffix on sanitised names was the other way out; it was not taken because it would rename every stored
    source whose name is not already a slug (orphaning its records, prepared files and tasks next to new
    copies), and would still not separate two folders that hold the same metadata id.
    """
    sid = claims[0][1].id
    folders = ", ".join(str(folder) for folder, _ in claims)
    refs = sorted({source.ref for _, source in claims})
    if len(refs) == 1:
        why = f"all hold the ref {refs[0]!r}"
        fix = "remove the copies, or give each its own id in its metadata"
    else:
        why = f"their refs {', '.join(map(repr, refs))} differ only in case or punctuation"
        fix = "rename all but one (the folder, or the ref/id in its metadata when it has one)"
    detail = f"mirror folders {folders} all give the source id {sid}: {why}; {fix}, so each has its own id"
    return claims[0][1].model_copy(
        update={
            "status": SourceStatus.FAILED,
            "status_detail": detail,
            "version": fingerprint("mirror-shared-id", [source.version for _, source in claims]),
        }
    )


class FileDigests:
    """SHA-256 of files by path, kept in a JSON file (when given) and trusted while a file's size, modification
    time and inode are those it was hashed at. A lost or unreadable memo only costs reading the files again;
    files not looked at since the last save are forgotten."""

    def __init__(self, path: Path | None):
        self.path, self.known, self.used = path, {}, set()
        if path is not None:
            try:
                self.known = json.loads(path.read_text())
            except (OSError, ValueError):
                self.known = {}
            if not isinstance(self.known, dict):
                self.known = {}
        self.saved = dict(self.known)

    def sha256(self, file: PlainFile) -> str:
        stamp = [file.size, file.mtime_ns, list(file.inode)]
        self.used.add(str(file.path))
        kept = self.known.get(str(file.path))
        if isinstance(kept, list) and len(kept) == 2 and kept[0] == stamp:
            return kept[1]
        with open_plain(file) as fh:
            digest = sha256_stream(fh)
        self.known[str(file.path)] = [stamp, digest]
        return digest

    def save(self) -> None:
        kept = {path: self.known[path] for path in self.used}
        if self.path is None or kept == self.saved:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temp.write_text(json.dumps(kept, sort_keys=True))
        os.replace(temp, self.path)
        self.known, self.saved, self.used = kept, dict(kept), set()
