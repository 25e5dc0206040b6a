import csv
import subprocess
import sys
from pathlib import Path

import pytest

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.builtin import BuiltinCrawler
from dareforge.crawlers.crawl import crawl
from dareforge.errors import ConfigError
from dareforge.schema import Origin, Source


@pytest.fixture(scope="module")
def crawler() -> BuiltinCrawler:
    return BuiltinCrawler()


@pytest.fixture(scope="module")
def sources(crawler: BuiltinCrawler) -> list[Source]:
    return list(crawler.list_sources())


@pytest.fixture(scope="module")
def crawled(tmp_path_factory) -> list[Source]:
    """The records the crawl stage stores: listing metadata plus what the download learned from the data."""
    root = tmp_path_factory.mktemp("builtin")
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    ctx = RunContext.from_config(cfg, show_progress=False)
    crawl(ctx)
    return sorted(ctx.store.read_records(Source), key=lambda s: s.id)


DATA_PACKAGES = ("sklearn", "statsmodels", "vega_datasets", "scipy")


def _placeholder_title(source: Source) -> str:
    return source.ref.replace(":", " ")


def test_listing_is_metadata_only(sources: list[Source]) -> None:
    assert [s.id for s in sources] == sorted(s.id for s in sources)
    assert len({s.id for s in sources}) == len(sources)
    for source in sources:
        assert source.id.startswith("builtin.") and source.origin is Origin.BUILTIN
        assert source.title == _placeholder_title(source)
        assert source.origin_package and "==" in source.origin_package
        assert source.files == [] and source.n_rows is None


def test_listing_imports_no_data_package() -> None:
    # A fresh interpreter: in this one the other tests may already have imported them.
    code = (
        "import sys\n"
        "from dareforge.crawlers.builtin import BuiltinCrawler\n"
        "assert list(BuiltinCrawler().list_sources())\n"
        f"print([m for m in {DATA_PACKAGES!r} if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_crawled_records_carry_the_packages_own_description(crawled: list[Source]) -> None:
    for source in crawled:
        assert source.title and source.title != _placeholder_title(source), source.id
        assert source.description.strip(), source.id
        assert source.license and source.license.strip(), source.id


def test_catalog_covers_tasks_and_data_quirks(crawled: list[Source]) -> None:
    assert len(crawled) >= 20
    with_target = [s for s in crawled if s.target_columns]
    assert len(with_target) >= 20
    assert {s.task_hint for s in with_target} == {"classification", "regression", "time-series"}
    assert sum("missing-values" in s.tags for s in crawled) >= 2
    assert sum("categorical" in s.tags for s in crawled) >= 2
    assert sum(s.time_column is not None and "datetime" in s.tags for s in crawled) >= 3
    for source in crawled:
        (table,) = source.files
        assert source.n_rows == table.rows and source.n_rows > 0
        assert set(source.target_columns) <= set(table.columns), source.id


def _read(path: Path) -> tuple[list[str], int]:
    with path.open(newline="", encoding="utf-8") as handle:
        header, *rows = csv.reader(handle)
    return header, len(rows)


def test_download_writes_one_csv_per_source(
    crawler: BuiltinCrawler, sources: list[Source], tmp_path: Path
) -> None:
    for source in sources:
        dest = tmp_path / source.id
        discovered = crawler.download(source, dest)
        (written,) = dest.iterdir()
        assert written.name == f"{source.id.removeprefix('builtin.')}.csv"
        header, n_rows = _read(written)
        expected = [*source.target_columns, *filter(None, [source.time_column, source.entity_column])]
        assert set(expected) <= set(header), source.id
        assert n_rows == discovered["n_rows"], source.id


def test_download_is_byte_identical(sources: list[Source], tmp_path: Path) -> None:
    # A fresh crawler per run, so the second file does not come from the first one's cached frame.
    for run in ("first", "second"):
        crawler = BuiltinCrawler()
        for source in sources:
            crawler.download(source, tmp_path / run / source.id)
    for source in sources:
        (first,) = (tmp_path / "first" / source.id).iterdir()
        assert first.read_bytes() == (tmp_path / "second" / source.id / first.name).read_bytes(), source.id


def test_include_selects_sources_by_key_or_id() -> None:
    crawler = BuiltinCrawler(["vega-cars", "builtin.sklearn-iris"])
    assert [s.id for s in crawler.list_sources()] == ["builtin.sklearn-iris", "builtin.vega-cars"]


def test_unknown_include_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no-such-set") as excinfo:
        BuiltinCrawler(["sklearn-iris", "no-such-set"])
    assert "sklearn-iris" in str(excinfo.value)
