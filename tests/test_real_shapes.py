"""Real data read as a data scientist would (issue: the target a person picks, forecasts a model can win, messy
tables that never stop a stage). One test per class of mistake seen on real Kaggle datasets, each on a small
table made here in the shape that caused it (never a copy of a real dataset)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.families.generate import generate
from dareforge.generators.prepare import load_prepared, prepare, prepared_file
from dareforge.reference_solutions.forecast import model_free_scale, naive_forecasts
from dareforge.reference_solutions.metrics import GradingError, forecast_skill
from dareforge.schema import Framing, Source, Task, TaskType
from dareforge.understand.evidence import read_text
from dareforge.understand.understand_stage import understand
from tests.stores import mirror_dataset

RNG = np.random.default_rng(7)


def _ctx(tmp_path: Path, **understand_settings) -> RunContext:
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(tmp_path / "store"), str(tmp_path / "work")
    cfg.builtin.enabled = False
    cfg.mirror.paths = [str(tmp_path / "mirror")]
    cfg.understand = cfg.understand.model_copy(update=understand_settings)
    return RunContext.from_config(cfg, show_progress=False)


def _source(tmp_path: Path, name: str, frame: pd.DataFrame, description: str = "", **meta) -> str:
    data = frame.to_csv(index=False).encode()
    return mirror_dataset(tmp_path / "mirror", name, {f"{name}.csv": data}, description=description, **meta)


def _understood(tmp_path: Path, *sources: tuple[str, pd.DataFrame, str], **settings) -> RunContext:
    for name, frame, description in sources:
        _source(tmp_path, name, frame, description)
    ctx = _ctx(tmp_path, **settings)
    crawl(ctx)
    filter_sources(ctx)
    understand(ctx)
    return ctx


def _chosen(ctx: RunContext, name: str) -> dict[str, Framing]:
    framings = ctx.store.read_partition(Framing, f"mirror.someone--{name}")
    return {f.framing: f for f in framings if f.status == "chosen"}


# -- 1. ties broken by what names mean, not by column order ---------------------------------------------------
def _used_items(n: int = 400) -> pd.DataFrame:
    year = RNG.integers(2005, 2020, n)
    present = RNG.uniform(3, 30, n).round(2)
    km = RNG.integers(1000, 200000, n)
    selling = (present * (0.9 - 0.03 * (2020 - year)) - km / 1e5 + RNG.normal(0, 0.5, n)).clip(0.2).round(2)
    # The outcome comes first, the price known beforehand after it: column order alone picks the wrong one.
    return pd.DataFrame({"Year": year, "Selling_Price": selling, "Present_Price": present, "Kms": km})


def test_a_name_that_marks_the_outcome_wins_over_one_known_beforehand(tmp_path):
    ctx = _understood(tmp_path, ("used-items", _used_items(), "Used items with their prices."))
    chosen = _chosen(ctx, "used-items")
    assert "regression-selling_price" in chosen, list(chosen)
    evidence = " ".join(chosen["regression-selling_price"].evidence)
    assert "'selling' in its name marks an outcome" in evidence


def _stock(n: int = 600, offset: str = "-04:00") -> pd.DataFrame:
    days = pd.bdate_range("2015-01-01", periods=n)
    close = 50 * np.exp(np.cumsum(RNG.normal(0, 0.02, n)))
    opening = close * np.exp(RNG.normal(0, 0.005, n))
    return pd.DataFrame(
        {
            "Date": [d.strftime(f"%Y-%m-%d 00:00:00{offset}") for d in days],
            "Open": opening.round(3),
            "High": (np.maximum(opening, close) * 1.01).round(3),
            "Low": (np.minimum(opening, close) * 0.99).round(3),
            "Close": close.round(3),
            "Volume": RNG.integers(10**6, 10**7, n),
        }
    )


def test_a_daily_price_table_with_utc_offsets_is_a_close_series_with_no_timestamp_forecast(tmp_path):
    ctx = _understood(tmp_path, ("prices", _stock(), "Daily share prices."))
    chosen = _chosen(ctx, "prices")
    series = chosen["ts-close"]
    assert series.time_axis.format == "%Y-%m-%d %H:%M:%S%z" and series.time_axis.frequency == "daily"
    # A random walk: nothing forecasts it from the dates alone, so no TS-CF task is posed.
    assert series.forecast_from_time is False
    assert any("from the time alone" in c for c in series.checks)
    prepare(ctx)
    (prepared,) = load_prepared(ctx, "mirror.someone--prices", "ts-close")
    train = pd.read_csv(prepared_file(ctx, prepared, "train"))
    assert train["Date"].iloc[0] == "2015-01-01"  # the wall-clock day, its offset dropped
    # Open, High and Low are the same price an hour apart: no tabular target is left that is not a formula.
    assert not [
        f for f in chosen.values() if f.task_type == TaskType.REGRESSION and f.target_columns == ["Open"]
    ]


# -- 2. rows indexed by time are split in time ----------------------------------------------------------------
def test_time_indexed_rows_get_a_chronological_split_that_no_date_interpolates(tmp_path):
    n = 500
    days = pd.date_range("2020-01-01", periods=n, freq="D")
    temp = 15 + 10 * np.sin(np.arange(n) * 2 * math.pi / 365) + RNG.normal(0, 1, n)
    frame = pd.DataFrame(
        {
            "date": days.strftime("%Y-%m-%d"),
            "temperature": temp.round(2),
            "visitors": (200 + 8 * temp + np.arange(n) * 0.8 + RNG.normal(0, 20, n)).round(0),
        }
    )
    ctx = _understood(tmp_path, ("park", frame, "Daily visitors of a park. The target is visitors."))
    tabular = _chosen(ctx, "park")["regression-visitors"]
    assert tabular.split == "chronological" and tabular.time_column == "date"
    assert "rows indexed by time: checked (and split) in time" in tabular.checks
    prepare(ctx)
    (prepared,) = load_prepared(ctx, "mirror.someone--park", "regression-visitors")
    assert prepared.split == "chronological"
    train = pd.read_csv(prepared_file(ctx, prepared, "train"))
    test = pd.read_csv(prepared_file(ctx, prepared, "test"))
    assert train["date"].max() < test["date"].min()


@pytest.mark.parametrize("header", ["", "Unnamed: 0"])
def test_a_column_of_dates_without_a_name_is_named_date(tmp_path, header):
    """A table written with pandas' index of dates: its header cell is empty (or `Unnamed: 0` after another
    round trip), so an instruction could only say "after the training rows by `Unnamed: 0`"."""
    n = 400
    temp = RNG.normal(15, 5, n)
    frame = pd.DataFrame(
        {
            header: pd.date_range("2021-01-01", periods=n, freq="D").strftime("%m/%d/%Y"),
            "temperature": temp.round(2),
            "visitors": (200 + 8 * temp + RNG.normal(0, 10, n)).round(0),
        }
    )
    ctx = _understood(tmp_path, ("shop", frame, "Daily visitors of a shop. The target is visitors."))
    tabular = _chosen(ctx, "shop")["regression-visitors"]
    assert tabular.split == "chronological" and tabular.time_column == "date", tabular
    prepare(ctx)
    (prepared,) = load_prepared(ctx, "mirror.someone--shop", "regression-visitors")
    train = pd.read_csv(prepared_file(ctx, prepared, "train"))
    test = pd.read_csv(prepared_file(ctx, prepared, "test"))
    assert "date" in test.columns and not {"", "column0", "Unnamed: 0"} & set(train.columns), train.columns
    assert train["date"].max() < test["date"].min()


# -- 3. copies and formulas are not targets -------------------------------------------------------------------
def test_a_unit_twin_and_a_calendar_part_are_not_picked_as_targets(tmp_path):
    n = 400
    stamps = pd.date_range("2022-06-01", periods=n, freq="h")
    temp_c = (20 + 6 * np.sin(np.arange(n) * 2 * math.pi / 24) + RNG.normal(0, 1, n)).round(1)
    frame = pd.DataFrame(
        {
            "time": stamps.strftime("%Y-%m-%d %H:%M:%S"),
            "station": "A",
            "humidity": (80 - temp_c + RNG.normal(0, 3, n)).round(0),
            "temp_c": temp_c,
            "day_name": stamps.day_name(),
            "temp_f": (temp_c * 9 / 5 + 32).round(1),  # last: where labels usually stand
        }
    )
    ctx = _understood(tmp_path, ("weather", frame, "Hourly weather readings."))
    framings = ctx.store.read_partition(Framing, "mirror.someone--weather")
    chosen = [f.target_columns[0] for f in framings if f.status == "chosen"]
    assert "temp_f" not in chosen and "day_name" not in chosen, chosen
    twin = [f for f in framings if f.target_columns == ["temp_f"]]
    assert not twin or any("copies 'temp_c'" in e for e in twin[0].evidence)


def test_an_id_whose_order_follows_the_target_leaves_the_files(tmp_path):
    classes = np.repeat(["gold", "silver", "bronze", "iron"], 100)
    frame = pd.DataFrame(
        {
            "item_id": [f"P{i + 1}" for i in range(400)],  # handed out class by class
            "weight": RNG.normal(10, 2, 400).round(2) + (classes == "gold") * 3,
            "size": RNG.normal(5, 1, 400).round(2) + (classes == "iron") * 2,
            "tier": classes,
        }
    )
    frame = frame.sample(frac=1, random_state=0)
    ctx = _understood(tmp_path, ("tiers", frame, "Items and their tier."))
    framing = _chosen(ctx, "tiers")["classification-tier"]
    assert "item_id" in framing.dropped_columns and framing.id_column is None
    assert any(c.startswith("leak: item_id its order follows the target") for c in framing.checks)


# -- 4. what Kaggle descriptions say ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("description", "target"),
    [
        (
            "| Column | Description |\n|---|---|\n| `Outcome` | **Target**: 1 or 0 |\n| age | years |",
            "Outcome",
        ),
        ("* **Sales (USD)** \u2013 the target variable\n* **age** \u2013 years", "Sales"),
        ("- Input Parameters: age, income\n- Output Parameter: the yearly Sales.", "Sales"),
        ("3. Churn: Target label indicating whether the customer left", "Churn"),
        ("Develop classification models to predict customer outcomes from income.", "Outcome"),
    ],
    ids=["markdown-table", "bullet-with-unit", "output-parameter", "numbered-glossary", "plural"],
)
def test_kaggle_glossaries_name_the_target(description, target):
    source = Source(
        id="mirror.t",
        origin="mirror",
        kind="dataset",
        ref="t",
        title="a table",
        description=description,
        version="v1",
    )
    evidence = read_text(source, ["id", "age", "income", "Outcome", "Churn", "Sales"])
    assert max(["id", "age", "income", "Outcome", "Churn", "Sales"], key=evidence.weight) == target


def test_two_close_targets_make_two_framings_and_noise_labels_still_pose_questions(tmp_path):
    n = 400
    x = RNG.normal(size=(n, 3))
    frame = pd.DataFrame(
        {
            "a": x[:, 0].round(3),
            "b": x[:, 1].round(3),
            "c": x[:, 2].round(3),
            "target_min": (2 * x[:, 0] + x[:, 1] + RNG.normal(0, 0.5, n)).round(3),
            "target_max": (x[:, 2] - x[:, 1] + RNG.normal(0, 0.5, n)).round(3),
        }
    )
    noise = pd.DataFrame({"a": x[:, 0].round(3), "b": x[:, 1].round(3), "label": RNG.choice(["p", "q"], n)})
    ctx = _understood(
        tmp_path,
        ("two", frame, "Predict target_min and target_max."),
        ("noise", noise, "A label to predict: label."),
    )
    assert {"regression-target_min", "regression-target_max"} <= set(_chosen(ctx, "two"))
    (questions,) = _chosen(ctx, "noise").values()
    assert questions.questions_only and questions.framing == "questions"
    assert "not learnable" in questions.reason


# -- 5. forecasts a model can win -----------------------------------------------------------------------------
def test_forecast_skill_is_zero_for_the_best_model_free_forecast_and_one_for_a_perfect_one():
    days = pd.date_range("2023-01-01", periods=70, freq="D")
    values = 100 + 20 * (days.day_of_week >= 5) + np.arange(70) * 0.1
    frame = pd.DataFrame({"t": days.strftime("%Y-%m-%d"), "y": values})
    train, test = frame.iloc[:56], frame.iloc[56:]
    forecasts = naive_forecasts(train, test, "t", "y", None)
    # The weekly season repeated: the last week of training values, in step.
    assert np.allclose(forecasts["seasonal naive"], values[49:56].tolist() * 2)
    scale = model_free_scale(test["y"].to_numpy(), forecasts)
    truth = test["y"].to_numpy()
    assert forecast_skill(truth, forecasts["seasonal naive"], scale) == 0.0
    assert forecast_skill(truth, truth, scale) == 1.0
    with pytest.raises(GradingError, match="scale > 0"):
        forecast_skill(truth, truth, 0.0)


def test_a_seasonal_panel_gets_both_forecast_tasks_and_the_gate_bar_is_the_best_model_free_forecast(tmp_path):
    rows = []
    for shop, level in (("north", 100), ("south", 160)):
        for i, day in enumerate(pd.date_range("2023-01-01", periods=210, freq="D")):
            weekly = 25 * (day.day_of_week >= 5)
            rows.append(
                {
                    "date": day.strftime("%Y-%m-%d"),
                    "shop": shop,
                    "promo": int(i % 11 == 0),
                    "sales": round(
                        level + weekly + 0.4 * i + 30 * (i % 11 == 0) + float(RNG.normal(0, 4)), 2
                    ),
                }
            )
    ctx = _understood(tmp_path, ("shops", pd.DataFrame(rows), "Daily sales of two shops; forecast sales."))
    assert _chosen(ctx, "shops")["ts-sales"].forecast_from_time is True
    prepare(ctx)
    generate(ctx)
    tasks = {t.family: t for t in ctx.store.read_records(Task) if t.family.startswith("TS-")}
    assert set(tasks) == {"TS-XF", "TS-CF"}
    for task in tasks.values():
        assert task.metric.name == "forecast-skill" and task.metric.scale and task.metric.scale[0] > 0
        assert task.scores.baseline == 0.0  # no model-free forecast scores above the scale it sets
        assert task.scores.strong > 0.05, task.family


# -- 6/7. wide, messy and odd tables --------------------------------------------------------------------------
def test_a_wide_table_prepares_at_the_default_memory_limit_and_a_10000_column_one_gets_the_real_reason(
    tmp_path,
):
    n, k = 3000, 180
    wide = pd.DataFrame(RNG.normal(size=(n, k)).round(3), columns=[f"{i:06d}-S{i}" for i in range(k)])
    wide.insert(0, "when", pd.date_range("2020-01-01", periods=n, freq="6h").strftime("%Y-%m-%d %H:%M:%S"))
    _source(tmp_path, "wide", wide, "Sensor readings.")
    huge = "".join(f"c{i}," for i in range(10_000)) + "label\n"
    huge += "".join(",".join(["1"] * 10_000) + f",{i % 2}\n" for i in range(120))
    mirror_dataset(tmp_path / "mirror", "huge", {"huge.csv": huge.encode()})
    ctx = _ctx(tmp_path)
    crawl(ctx)
    filter_sources(ctx)
    report = understand(ctx)
    assert (
        "huge.csv has 10,001 columns, more than prepare.max_columns=2,000"
        in report.failures["mirror.someone--huge"]
    )
    prepared = prepare(ctx, ["mirror.someone--wide"])
    assert prepared.labels("prepared") and not prepared.failures, prepared.failures


def test_a_table_that_runs_duckdb_out_of_memory_is_read_again_with_more(tmp_path):
    frame = pd.DataFrame(RNG.normal(size=(4000, 60)).round(4), columns=[f"x{i}" for i in range(60)])
    frame["y"] = (frame["x0"] * 2 + RNG.normal(0, 0.1, 4000)).round(3)
    _source(tmp_path, "tight", frame, "The target is y.")
    ctx = _ctx(tmp_path)
    ctx.config.prepare.duckdb_memory_limit = "2MB"  # far too little: the first reads fail for memory
    ctx.config.prepare.duckdb_max_memory_limit = "1GB"
    crawl(ctx)
    filter_sources(ctx)
    understand(ctx)
    report = prepare(ctx)
    assert report.labels("prepared") and not report.failures, report.failures


def test_missing_cells_as_pandas_reads_them_and_a_target_that_is_no_number(tmp_path):
    n = 300
    x = RNG.normal(size=n).round(3)
    cells = [str(v) if i % 9 else "NA" for i, v in enumerate(x)]
    y = [f"{2 * v + 1:.3f}" if i % 13 else ("N/A" if i % 2 else "?") for i, v in enumerate(x)]
    frame = pd.DataFrame({"x": cells, "z": RNG.normal(size=n).round(3), "y": y})
    ctx = _understood(tmp_path, ("holes", frame, "The target is y."))
    prepare(ctx)
    (prepared,) = load_prepared(ctx, "mirror.someone--holes")
    assert {c.name: c.kind.value for c in prepared.columns}[
        "x"
    ] == "numeric"  # "NA" is missing, not a category
    train = pd.read_csv(prepared_file(ctx, prepared, "train"))
    assert train["y"].dtype == float and train["y"].notna().all()  # "N/A" and "?" rows are unlabelled


def test_a_numeric_column_holding_infinity_is_left_out_of_every_if_workflow(tmp_path):
    """R writes Inf for "never" (days to an event that did not happen): scikit-learn's imputers and scalers refuse
    it, and a range filter's noise cannot go beyond an infinite bound, so an IF workflow using the column failed
    to certify and the variant was lost."""
    n = 300
    dose = RNG.uniform(0, 10, n).round(2)
    frame = pd.DataFrame(
        {
            "dose": dose,
            "days_to_sprout": np.where(dose > 9, np.inf, (20 - dose + RNG.normal(0, 1, n)).round(2)),
            "soil": RNG.choice(["clay", "sand"], n),
            "height": (3 * dose + RNG.normal(0, 2, n)).round(2),
        }
    )
    ctx = _understood(tmp_path, ("seeds", frame, "The target is height."))
    ctx.config.generate.if_variants, ctx.config.generate.if_redraws = 4, 0  # every seed must make its task
    prepare(ctx)
    (prepared,) = load_prepared(ctx, "mirror.someone--seeds")
    assert np.isinf(pd.read_csv(prepared_file(ctx, prepared, "train"))["days_to_sprout"]).any()
    report = generate(ctx)
    if_tasks = [t for t in ctx.store.read_records(Task) if t.family == "Reg-IF" and t.variant_of is None]
    assert len(if_tasks) == 4, report.failures  # one per seed
    for task in if_tasks:
        reference = (Path(ctx.config.store.root) / "tasks" / task.id / "private" / "reference.py").read_text()
        assert "days_to_sprout" not in reference


def test_messy_lake_tables_never_stop_a_stage_and_every_source_has_tasks_or_a_reason(tmp_path):
    from tests.messy import make_messy_lake

    shapes = make_messy_lake(tmp_path / "mirror")
    ctx = _ctx(tmp_path)
    crawl(ctx)
    filter_sources(ctx)
    understood = understand(ctx)
    prepare(ctx)
    report = generate(ctx)
    tasks = {t.source_id for t in ctx.store.read_records(Task)}
    for source_id in shapes:
        reason = understood.failures.get(source_id) or report.failures.get(source_id)
        assert source_id in tasks or reason, f"{source_id} ({shapes[source_id]}): no task and no reason"
    # Nothing but an id, prose and a label: no prediction task, but the table still poses questions.
    (text_only,) = [
        f for f in ctx.store.read_partition(Framing, "mirror.lake--text-only") if f.status == "chosen"
    ]
    assert text_only.questions_only and "no column can be a feature" in text_only.reason
    # The workbook's data sheet and the JSON records are tables like any other.
    for source_id, table in (
        ("mirror.lake--spreadsheet", "tourism.xlsx.Data.csv"),
        ("mirror.lake--json-records", "flats.json.csv"),
    ):
        framings = [f for f in ctx.store.read_partition(Framing, source_id) if f.status == "chosen"]
        assert framings and framings[0].table_file == table, source_id
    assert not report.failures, report.failures


def test_a_title_blank_lines_and_group_labels_above_the_header_are_skipped(tmp_path):
    # A title, a blank line and a row of group labels above the column names, as exported spreadsheets start.
    lines = ["State: Top Report Categories,,,", ",,,", ",,Counts,", "State,Category,Reports,Share"]
    for i in range(240):
        reports = 100 + (i * 37) % 900
        lines.append(f'S{i % 12},{"abc"[i % 3]},"{reports:,}",{reports // 20}%')
    mirror_dataset(tmp_path / "mirror", "titled", {"titled.csv": "\n".join(lines).encode()})
    ctx = _ctx(tmp_path)
    crawl(ctx)
    (source,) = ctx.store.read_records(Source)
    assert source.files[0].columns == ["State", "Category", "Reports", "Share"]
    filter_sources(ctx)
    understand(ctx)
    assert prepare(ctx).labels("prepared")
    for prepared in load_prepared(ctx, "mirror.someone--titled"):
        assert {"State", "Category", "Reports", "Share"} <= {c.name for c in prepared.columns}


def test_an_unreadable_workbook_is_refused_naming_the_file(tmp_path):
    mirror_dataset(tmp_path / "mirror", "broken-book", {"book.xlsx": b"PK\x03\x04 not really a workbook"})
    mirror_dataset(tmp_path / "mirror", "old-book", {"old.xls": b"\xd0\xcf\x11\xe0 an Excel 97 file"})
    ctx = _ctx(tmp_path)
    crawl(ctx)
    decisions = filter_sources(ctx)
    assert not decisions.labels("kept")
    sources = {s.id: s for s in ctx.store.read_records(Source)}
    (book,) = sources["mirror.someone--broken-book"].files
    assert book.note.startswith("not read as a table: not a readable Excel workbook")
    (old,) = sources["mirror.someone--old-book"].files
    assert "save it as .xlsx or CSV" in old.note
    query = "select reason from filter_decisions where source_id = 'mirror.someone--old-book' and rule = 'tabular'"
    ((reason,),) = ctx.store.connect().sql(query).fetchall()
    assert "old.xls: not read as a table" in reason


def test_json_records_become_a_table_with_nested_fields_flattened(tmp_path):
    records = [{"city": "Oslo", "size": i, "meta": {"floor": i % 4}, "tags": ["a"]} for i in range(150)]
    mirror_dataset(tmp_path / "mirror", "flats", {"flats.json": json.dumps({"data": records}).encode()})
    ctx = _ctx(tmp_path)
    crawl(ctx)
    (source,) = ctx.store.read_records(Source)
    table = next(f for f in source.files if f.name == "flats.json.csv")
    assert table.columns == ["city", "size", "tags", "meta.floor"] and table.rows == 150
