"""A folder laid out like Kaggle downloads, for air-gapped clusters and tests.

Each immediate sub-folder of a mirror path is one source: a `competition-metadata.json` (an ApiCompetition as
the Kaggle API returns it) or a `dataset-metadata.json` (as `kaggle datasets metadata` writes it), next to the
data zip or the data files. After the copy, the crawl stage treats them exactly like a Kaggle download.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

from dareforge.crawlers.base import fingerprint, source_id
from dareforge.crawlers.kaggle import competition_source, dataset_source
from dareforge.errors import DareforgeError, SourceError
from dareforge.schema import Origin, Source, SourceStatus

COMPETITION_META = "competition-metadata.json"
DATASET_META = "dataset-metadata.json"
METADATA_FILES = (COMPETITION_META, DATASET_META)


class MirrorCrawler:
    name = "mirror"

    def __init__(self, roots: list[Path]):
        self.roots = roots

    def list_sources(self) -> Iterator[Source]:
        for root in self.roots:
            if not root.is_dir():
                raise DareforgeError(
                    f"mirror path {root} is not a folder; fix mirror.paths in dareforge.yaml"
                )
            for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
                yield self._source(folder)

    def _source(self, folder: Path) -> Source:
        data_files = self._data_files(folder)
        listing = [
            (p.relative_to(folder).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in data_files
        ]
        try:
            source = self._from_metadata(folder, data_files)
        except SourceError as exc:
            return Source(
                id=source_id(Origin.MIRROR.value, folder.name),
                origin=Origin.MIRROR,
                kind="dataset",
                ref=folder.name,
                title=folder.name,
                url=folder.as_uri(),
                version=fingerprint("mirror-unreadable", listing),
                status=SourceStatus.FAILED,
                status_detail=str(exc),
            )
        return source.model_copy(
            update={"version": fingerprint(source.version, listing), "url": folder.as_uri()}
        )

    @staticmethod
    def _data_files(folder: Path) -> list[Path]:
        return sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in METADATA_FILES)

    def _from_metadata(self, folder: Path, data_files: list[Path]) -> Source:
        found = [name for name in METADATA_FILES if (folder / name).is_file()]
        if not found:
            raise SourceError(
                f"mirror folder {folder} has no {COMPETITION_META} or {DATASET_META}; add one "
                "(`kaggle datasets metadata OWNER/NAME -p FOLDER` writes the dataset one)"
            )
        path = folder / found[0]
        try:
            meta = json.loads(path.read_text(encoding="utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SourceError(f"{path} is not valid UTF-8 JSON ({exc}); fix or re-export it") from exc
        if not isinstance(meta, dict):
            raise SourceError(f"{path} must hold a JSON object, not {type(meta).__name__}")
        if found[0] == COMPETITION_META:
            meta.setdefault("ref", folder.name)
            files = [{"name": p.name, "totalBytes": p.stat().st_size} for p in data_files]
            return competition_source(meta, files, Origin.MIRROR, meta.get("hasLeaderboard"))
        return dataset_source(meta, Origin.MIRROR)

    def download(self, source: Source, dest: Path) -> None:
        folder = Path(unquote(urlparse(source.url).path)) if source.url else None
        if folder is None or not folder.is_dir():
            raise SourceError(
                f"mirror folder for {source.id} is gone ({source.url}); restore it or remove the path"
            )
        if dest.exists():
            shutil.rmtree(dest)
        for path in self._data_files(folder):
            target = dest / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
