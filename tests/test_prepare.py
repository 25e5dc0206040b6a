"""The prepare stage on real builtin sources and on mirror folders the tests lay out."""

from __future__ import annotations

import csv
import shutil
from collections import Counter
from pathlib import Path

import pytest

from dareforge.config import Config, SourceOverride
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.generators.prepare import (
    PreparedIntegrityError,
    load_prepared,
    prepare,
    prepare_failure,
    prepared_file,
)
from dareforge.hashing import sha256_file
from dareforge.schema import ColumnKind, Framing, PreparedSource, TaskType
from dareforge.understand.understand_stage import understand
from tests.stores import mirror_dataset

BUILTINS = ["sklearn-iris", "vega-cars", "vega-stocks", "sklearn-diabetes"]
IRIS, CARS, STOCKS, DIABETES = (f"builtin.{name}" for name in BUILTINS)


def _ctx(root: Path, **prepare) -> RunContext:
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    cfg.prepare = cfg.prepare.model_copy(update=prepare)
    return RunContext.from_config(cfg, show_progress=False)


@pytest.fixture(scope="module")
def crawled(tmp_path_factory) -> Path:
    """A store with the four builtin sources crawled and filtered (shared; tests prepare copies of it)."""
    root = tmp_path_factory.mktemp("crawled")
    ctx = _ctx(root)
    ctx.config.builtin.include = BUILTINS
    crawl(ctx)
    assert sorted(filter_sources(ctx).labels("kept")) == sorted([IRIS, CARS, STOCKS, DIABETES])
    understand(ctx)
    return root


@pytest.fixture(scope="module")
def prepared(crawled, tmp_path_factory):
    root = tmp_path_factory.mktemp("prepared")
    shutil.copytree(crawled / "store", root / "store")
    ctx = _ctx(root)
    report = prepare(ctx)
    return ctx, report


@pytest.fixture
def fresh(crawled, tmp_path):
    """A private copy of the crawled store, for tests that change it."""
    shutil.copytree(crawled / "store", tmp_path / "store")
    return tmp_path


def _sources(labels: list[str]) -> list[str]:
    """Source ids of `source_id/framing` report labels, sorted and unique."""
    return sorted({label.split("/")[0] for label in labels})


def _main(ctx, source_id: str) -> PreparedSource:
    """The prepared record of the source's best framing (the one its catalog names, for builtin sources)."""
    chosen = [f for f in ctx.store.read_partition(Framing, source_id) if f.status == "chosen"]
    best = max(chosen, key=lambda f: f.confidence)
    return load_prepared(ctx, source_id, best.framing)[0]


def _rows(ctx, record: PreparedSource, name: str) -> list[dict[str, str]]:
    with open(prepared_file(ctx, record, name), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _tree(ctx) -> dict[str, str]:
    root = Path(ctx.store.root) / "prepared"
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def test_prepares_every_accepted_source_with_the_right_task(prepared):
    ctx, report = prepared
    assert _sources(report.labels("prepared")) == sorted([IRIS, CARS, STOCKS, DIABETES])
    assert report.failures == {} and report.labels("unchanged") == []
    records = {sid: _main(ctx, sid) for sid in _sources(report.labels("prepared"))}
    assert records[IRIS].task_type == TaskType.CLASSIFICATION and records[IRIS].split == "stratified"
    assert records[CARS].task_type == TaskType.REGRESSION and records[CARS].split == "random"
    assert records[DIABETES].task_type == TaskType.REGRESSION
    stocks = records[STOCKS]
    assert stocks.task_type == TaskType.TIME_SERIES and stocks.split == "chronological"
    assert (stocks.time_column, stocks.entity_column) == ("date", "symbol")
    assert all(r.id_column == "row_id" for r in records.values())  # none of them has an id column
    assert load_prepared(ctx, "builtin.nothing-here") == []
    # Beside the catalog's forecast, a stock price also makes a regression on symbol and date.
    assert [p.framing for p in load_prepared(ctx, STOCKS)] == ["regression-price", "ts-price"]


def test_files_split_cleanly_without_leaks(prepared):
    ctx, report = prepared
    for sid, framing in (label.split("/") for label in report.labels("prepared")):
        (record,) = load_prepared(ctx, sid, framing)
        train, test, answers = (_rows(ctx, record, n) for n in ("train", "test.csv", "answers"))
        key = record.id_column
        train_ids, test_ids = [r[key] for r in train], [r[key] for r in test]
        assert len(set(train_ids)) == len(train_ids) and len(set(test_ids)) == len(test_ids)
        assert not set(train_ids) & set(test_ids)
        assert [r[key] for r in answers] == test_ids
        assert (len(train), len(test)) == (record.n_train, record.n_test)
        assert record.n_train + record.n_test == record.n_rows
        assert not set(record.target_columns) & set(test[0])
        assert set(answers[0]) >= {key, *record.target_columns}
        assert all(r[t] != "" for r in train + answers for t in record.target_columns)
        assert [f.name for f in record.files] == ["train.csv", "test.csv", "answers.csv"]
    cars = _main(ctx, CARS)
    assert cars.n_rows == 406 - 8  # rows without Miles_per_Gallon cannot be graded


def test_stratified_split_keeps_every_class_share(prepared):
    ctx, _ = prepared
    iris = _main(ctx, IRIS)
    train, answers = _rows(ctx, iris, "train"), _rows(ctx, iris, "answers")
    total = Counter(r["species"] for r in train + answers)
    held = Counter(r["species"] for r in answers)
    share = ctx.config.prepare.test_share
    assert all(abs(held[c] - share * total[c]) <= 1 for c in total)
    test_text = prepared_file(ctx, iris, "test").read_text()
    assert not any(name in test_text for name in total)  # no answer value in the public test file


def test_chronological_split_holds_out_the_latest_times(prepared):
    ctx, _ = prepared
    stocks = _main(ctx, STOCKS)
    train, test, answers = (_rows(ctx, stocks, n) for n in ("train", "test", "answers"))
    assert max(r["date"] for r in train) < min(r["date"] for r in test)
    assert list(answers[0]) == ["row_id", "date", "symbol", "price"]
    assert [(r["date"], r["symbol"]) for r in test] == sorted((r["date"], r["symbol"]) for r in test)


def test_profile_is_sensible(prepared):
    ctx, _ = prepared
    cars = {c.name: c for c in _main(ctx, CARS).columns}
    assert cars["Horsepower"].kind == ColumnKind.NUMERIC and cars["Horsepower"].missing_rate > 0
    assert cars["Miles_per_Gallon"].missing_rate == 0  # measured on the labelled rows
    assert cars["Year"].kind == ColumnKind.DATETIME and cars["Year"].dtype == "DATE"
    assert cars["Origin"].kind == ColumnKind.CATEGORICAL and set(cars["Origin"].top_values) == {
        "USA",
        "Europe",
        "Japan",
    }
    assert cars["Cylinders"].dtype == "BIGINT" and (cars["Cylinders"].min, cars["Cylinders"].max) == (
        "3",
        "8",
    )
    iris = {c.name: c for c in _main(ctx, IRIS).columns}
    species = iris["species"]
    assert species.kind == ColumnKind.CATEGORICAL and species.distinct == 3 and species.top_values
    petal = iris["petal length (cm)"]
    assert 3.7 < petal.mean < 3.8 and petal.std > 1 and petal.missing_rate == 0


def test_second_prepare_writes_nothing_and_threads_do_not_change_bytes(prepared, crawled, tmp_path):
    ctx, first = prepared
    before = _tree(ctx)
    again = prepare(ctx)
    assert again.written == [] and sorted(again.labels("unchanged")) == sorted(first.labels("prepared"))
    assert again.labels("prepared") == []
    assert _tree(ctx) == before
    # A fresh store prepared with other DuckDB settings gives the same versions and the same bytes.
    shutil.copytree(crawled / "store", tmp_path / "store")
    other = _ctx(tmp_path, duckdb_threads=1, duckdb_memory_limit="256MB")
    prepare(other)
    assert _tree(other) == before


def test_a_new_seed_gives_a_new_split(prepared, fresh):
    ctx, _ = prepared
    reseeded = _ctx(fresh, seed=ctx.config.prepare.seed + 1)
    report = prepare(reseeded, [IRIS])
    assert _sources(report.labels("prepared")) == [IRIS]
    old, new = _main(ctx, IRIS), _main(reseeded, IRIS)
    assert new.version != old.version and new.seed == old.seed + 1
    ids = [{r["row_id"] for r in _rows(c, rec, "test")} for c, rec in ((ctx, old), (reseeded, new))]
    assert ids[0] != ids[1] and len(ids[0]) == len(ids[1])


def test_a_tampered_prepared_file_is_caught(fresh):
    ctx = _ctx(fresh)
    prepare(ctx, [CARS])
    record = _main(ctx, CARS)
    path = prepared_file(ctx, record, "answers.csv")
    path.write_text(path.read_text().replace("16.0", "17.0", 1))
    with pytest.raises(PreparedIntegrityError, match=r"answers\.csv: sha256 \w+ != manifest") as info:
        prepare(ctx, [CARS])
    assert "do not match their manifest" in str(info.value) and "run `dareforge prepare` again" in str(
        info.value
    )


# -- mirror folders laid out by the tests ------------------------------------------------------------------------
def _mirror(root: Path, name: str, files: dict[str, bytes]) -> None:
    mirror_dataset(root, name, files)


@pytest.fixture
def mirror_ctx(tmp_path):
    root = tmp_path / "mirror"
    latin = "name,city,size,price\n" + "".join(
        f"caf\xe9 {i},M\xfcnchen,{3 * (i % 7) + i % 5},{i % 7}\n" for i in range(120)
    )
    _mirror(root, "latin", {"prices.csv": latin.encode("latin-1")})
    # Columns named like the SQL's own aliases (v, k, m) must not confuse it.
    grouped = "PassengerId,family,v,k,m,label\n" + "".join(
        f"{1000 - i},f{i // 4},{3 * i},{i % 3},x{i % 5},{'ab'[i % 2]}\n" for i in range(200)
    )
    _mirror(
        root,
        "grouped",
        {
            "train.csv": grouped.encode(),
            "sample_submission.csv": b"PassengerId,label\n1,a\n",
            "test.csv": b"PassengerId,family,v,k,m\n1,f1,1,1,x1\n",
        },
    )
    empty = "x,label\n" + "".join(f"{i},\n" for i in range(150))
    _mirror(root, "unlabelled", {"data.csv": empty.encode()})
    ctx = _ctx(tmp_path)
    ctx.config.builtin.enabled = False
    ctx.config.mirror.paths = [str(root)]
    crawl(ctx)
    return ctx


def test_latin1_file_with_an_encoding_override(mirror_ctx):
    ctx, sid = mirror_ctx, "mirror.someone--latin"
    ctx.config.sources[sid] = SourceOverride(target=["price"])
    understood = understand(ctx, [sid])
    assert understood.labels("unframed") == [sid]
    assert f"set sources.{sid}.encoding (e.g. latin-1)" in understood.failures[sid]
    report = prepare(ctx, [sid, "mirror.not-crawled"])
    assert list(report.failures) == [sid, "mirror.not-crawled"]
    assert prepare_failure(ctx, sid).reason == report.failures[sid]  # kept for generate to report
    assert prepare_failure(ctx, "mirror.not-crawled") is None  # an id that names no source is not kept
    ctx.config.sources[sid] = SourceOverride(encoding="latin-1", target=["price"])
    assert understand(ctx, [sid]).labels("framed") == [sid]
    report = prepare(ctx, [sid])
    assert report.labels("prepared") == [f"{sid}/classification-price"], report.failures
    assert prepare_failure(ctx, sid) is None  # prepared now: the old failure is gone
    record = _main(ctx, sid)
    assert record.task_type == TaskType.CLASSIFICATION  # seven distinct values
    train = _rows(ctx, record, "train")
    assert train[0]["city"] == "München" and train[0]["name"].startswith("café")
    assert record.n_rows == 120 and {c.name: c for c in record.columns}["price"].dtype == "BIGINT"


def test_id_detection_grouped_split_and_failures(mirror_ctx):
    ctx = mirror_ctx
    grouped, unlabelled = "mirror.someone--grouped", "mirror.someone--unlabelled"
    ctx.config.sources[grouped] = SourceOverride(group_column="family", target=["label"])
    understood = understand(ctx, [unlabelled, grouped, "mirror.not-crawled"])
    assert understood.labels("framed") == [grouped]
    assert understood.labels("unframed") == [unlabelled, "mirror.not-crawled"]
    (chosen,) = [f for f in ctx.store.read_partition(Framing, grouped) if f.status == "chosen"]
    assert chosen.framing == "classification-label" and "config" in chosen.proposers
    assert any(
        "kept because dareforge.yaml names it as the target" in c for c in chosen.checks
    )  # parity: unlearnable
    assert "no column can be a target" in understood.failures[unlabelled]
    assert "crawl it first" in understood.failures["mirror.not-crawled"]
    report = prepare(ctx, [unlabelled, grouped])
    assert report.labels("prepared") == [f"{grouped}/classification-label"]
    assert list(report.failures) == [unlabelled]
    assert f"dareforge sources --why {unlabelled}" in report.failures[unlabelled]
    record = _main(ctx, grouped)
    assert record.id_column == "PassengerId" and record.split == "grouped" and record.group_column == "family"
    assert record.files[0].columns == ["PassengerId", "family", "v", "k", "m", "label"]
    assert {c.name: c for c in record.columns}["m"].top_values == ["x0", "x1", "x2", "x3", "x4"]
    train, test = _rows(ctx, record, "train"), _rows(ctx, record, "test")
    assert not {r["family"] for r in train} & {r["family"] for r in test}
    assert len(train) + len(test) == 200 and 30 <= len(test) <= 50
    assert [int(r["PassengerId"]) for r in test] == sorted(int(r["PassengerId"]) for r in test)


def _rows_of(fields: int, start: int, stop: int) -> str:
    return "".join(",".join(str(i + k) for k in range(fields)) + "\n" for i in range(start, stop))


RAGGED = {
    # rows wider than the header after a few good ones: DuckDB took line 52 for the header
    "wider-later": ("a,b,y\n" + _rows_of(3, 0, 50) + _rows_of(5, 50, 300), 52, 5),
    # every row wider than the header: DuckDB took line 2 for the header ("columns: 3, 4, 5, 6, 7")
    "all-wider": ("a,b,y\n" + _rows_of(5, 0, 300), 2, 5),
    # one row in the middle: DuckDB finds no dialect at all
    "one-wide": ("a,b,y\n" + _rows_of(3, 0, 150) + _rows_of(5, 150, 151) + _rows_of(3, 151, 300), 152, 5),
    # one row past the sniffer's sample: the sniff succeeds and the full read fails
    "late-narrow": ("a,b,y\n" + _rows_of(3, 0, 30_000) + "1,2\n" + _rows_of(3, 0, 10), 30_002, 2),
}


def test_ragged_rows_are_named_by_line_not_as_a_missing_target(tmp_path):
    root = tmp_path / "mirror"
    for name, (text, _, _) in RAGGED.items():
        _mirror(root, name, {"train.csv": text.encode()})
    titled = "Measurements of something\n"
    rows = "".join(f"{2 * i},{i * 7 % 13},{i % 5 + i / 3}\n" for i in range(200))
    _mirror(root, "titled", {"data.csv": (titled + "a,b,y\n" + rows).encode()})
    ctx = _ctx(tmp_path)
    ctx.config.builtin.enabled = False
    ctx.config.mirror.paths = [str(root)]
    crawl(ctx)
    ids = [f"mirror.someone--{name}" for name in RAGGED]
    for sid in ids:
        ctx.config.sources[sid] = SourceOverride(target=["y"])
    report = understand(ctx, ids)
    assert report.labels("unframed") == ids
    for sid, (_, line, fields) in zip(ids, RAGGED.values(), strict=True):
        reason = report.failures[sid]
        assert f"train.csv line {line} has {fields} fields but its header (line 1) has 3 (a, b, y)" in reason
        assert "repair or remove the ragged rows" in reason and "is not a column" not in reason
    # a one-field title line above the header is DuckDB's to skip, as before
    titled_id = "mirror.someone--titled"
    ctx.config.sources[titled_id] = SourceOverride(table="data.csv", target=["y"])
    assert understand(ctx, [titled_id]).labels("framed") == [titled_id]
    assert _sources(prepare(ctx, [titled_id]).labels("prepared")) == [titled_id]
    assert _main(ctx, titled_id).n_rows == 200


def test_a_class_label_of_blanks_is_no_label(tmp_path):
    """A catalog source's label column held "No ", "Yes" and "   ": the blank rows became answers that read as
    empty (answers are read stripped), and the MM task failed its own grading. Such rows are unlabelled."""
    labels = ["No ", "Yes", "   "]
    text = "x,z,outcome\n" + "".join(
        f"{i},{i * 7 % 11},{labels[i % 3] if i % 10 else '   '}\n" for i in range(300)
    )
    _mirror(tmp_path / "mirror", "blanks", {"data.csv": text.encode()})
    ctx = _ctx(tmp_path)
    ctx.config.builtin.enabled = False
    ctx.config.mirror.paths = [str(tmp_path / "mirror")]
    crawl(ctx)
    sid = "mirror.someone--blanks"
    ctx.config.sources[sid] = SourceOverride(target=["outcome"])
    assert understand(ctx, [sid]).labels("framed") == [sid]
    assert prepare(ctx, [sid]).labels("prepared") == [f"{sid}/classification-outcome"]
    record = _main(ctx, sid)
    train, answers = _rows(ctx, record, "train"), _rows(ctx, record, "answers")
    blank = sum(1 for i in range(300) if i % 10 == 0 or i % 3 == 2)
    assert len(train) + len(answers) == record.n_rows == 300 - blank
    assert all(row["outcome"].strip() for row in train + answers)
