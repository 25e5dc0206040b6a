"""The one interface every crawler implements; the crawl stage does the rest the same way for all of them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from dareforge.schema import Source


class Crawler(Protocol):
    """Lists sources (metadata only, cheap) and downloads one source's raw files into a local folder.

    `list_sources` yields `Source` records whose `version` fingerprints what defines the data, with `files`
    left empty: the crawl stage fills them in after download and safe unpacking. Listing must stay cheap, since
    it runs on every crawl. `download` may leave archives (zip) in `dest`; the stage unpacks them with the
    configured limits. It may return Source fields learned from the data (row count, tags): the stage keeps
    them in the version's manifest, so unchanged sources get them back without touching the data.
    """

    name: str

    def list_sources(self) -> Iterator[Source]: ...

    def download(self, source: Source, dest: Path) -> dict[str, Any] | None: ...


def slugify(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text.strip()).strip("-.").lower()
    return slug or "unnamed"


def source_id(origin: str, ref: str) -> str:
    return f"{origin}.{slugify(ref.replace('/', '--'))}"
