"""A target named only in a description in another language than English (issue 44): a prediction phrase in
Turkish, Spanish, French... names the columns its parts gloss, and targets listed together are each posed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.schema import Framing, Source, TaskType
from dareforge.understand.columns import Sample
from dareforge.understand.evidence import read_text
from dareforge.understand.propose import copies
from dareforge.understand.understand_stage import understand

DOTLESS = "\u0131"  # Turkish dotless i, as Turkish text writes it
COLUMNS = ["Gun", "Tuketim_MWh", "Uretim_MWh", "Nufus", "Sicaklik_Ort", "Ruzgar_Hizi", "Tatil"]
DESCRIPTION = (
    f"Bursa ili elektrik tüketimi ve üretim miktar{DOTLESS} tahminine yönelik gunluk veri\n\n"
    f"Bu veri seti, Bursa iline ait günlük elektrik tüketimi (**Tuketim_MWh**) ve santrallerin "
    f"üretim miktar{DOTLESS} (**Uretim_MWh**) verilerini içermektedir.\n\n"
    f"Ek olarak: nüfus, ortalama s{DOTLESS}cakl{DOTLESS}k, rüzgar h{DOTLESS}z{DOTLESS} ve tatil günleri."
)


def _source(description: str) -> Source:
    return Source(
        id="mirror.t", origin="mirror", kind="dataset", ref="t", title="a table", description=description,
        tags=[], version="v1",
    )  # fmt: skip


def test_a_turkish_phrase_names_each_glossed_target_it_lists():
    evidence = read_text(_source(DESCRIPTION), COLUMNS)
    assert evidence.weight("Tuketim_MWh") >= 6 and evidence.weight("Uretim_MWh") >= 6
    assert all(evidence.weight(c) < 6 for c in COLUMNS if c not in ("Tuketim_MWh", "Uretim_MWh"))
    assert any("not in English" in s for s in evidence.sentences("Uretim_MWh"))


def test_object_after_the_verb_and_a_column_named_outright():
    columns = ["superficie", "habitaciones", "precio_venta", "barrio"]
    glossed = "El objetivo es predecir el precio de venta (precio_venta) de cada vivienda."
    assert read_text(_source(glossed), columns).weight("precio_venta") >= 6
    french = ["surface", "prix", "demande"]
    assert read_text(_source("Un jeu pour la pr\u00e9vision de la demande."), french).weight("demande") >= 6


def test_a_gloss_without_a_prediction_phrase_names_nothing():
    plain = DESCRIPTION.split("\n\n", 1)[
        1
    ]  # the glossary alone says what the columns are, not what to predict
    evidence = read_text(_source(plain), COLUMNS)
    assert evidence.weight("Tuketim_MWh") < 6 and evidence.weight("Uretim_MWh") < 6


def _grid(days: int = 400) -> list[dict]:
    """A city's daily electricity: use follows heat and holidays, the plants' output follows wind and use
    loosely (the rest is bought from the grid)."""
    rng = np.random.default_rng(3)
    dates = pd.date_range("2022-01-01", periods=days, freq="D")
    season = np.cos(2 * np.pi * (dates.day_of_year.to_numpy() - 200) / 365)
    heat = np.round(16 + 11 * season + rng.normal(0, 2, days), 1)
    wind = np.round(rng.gamma(3, 4, days), 1)
    holiday = (rng.random(days) < 0.08).astype(int)
    use = np.round(5200 + 90 * np.abs(heat - 18) - 700 * holiday + rng.normal(0, 160, days), 1)
    made = np.round(2100 + 85 * wind + 0.25 * use + rng.normal(0, 260, days), 1)
    return [
        {
            "Gun": d.strftime("%Y-%m-%d"),
            "Tuketim_MWh": use[i],
            "Uretim_MWh": made[i],
            "Nufus": 3_100_000 + 40 * i,
            "Sicaklik_Ort": heat[i],
            "Ruzgar_Hizi": wind[i],
            "Tatil": holiday[i],
        }
        for i, d in enumerate(dates)
    ]


def test_both_listed_targets_are_posed_as_tabular_framings(tmp_path: Path):
    mirror = tmp_path / "mirror"
    folder = mirror / "grid"
    folder.mkdir(parents=True)
    meta = {
        "id": "someone/grid",
        "title": "Bursa_Elektrik",
        "description": DESCRIPTION,
        "licenses": [{"name": "CC0-1.0"}],
        "lastUpdated": "2024-02-02",
    }
    (folder / "dataset-metadata.json").write_text(json.dumps(meta))
    rows = _grid()
    with open(folder / "train.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(tmp_path / "store"), str(tmp_path / "work")
    cfg.builtin.enabled = False
    cfg.mirror.paths = [str(mirror)]
    ctx = RunContext.from_config(cfg, show_progress=False)
    crawl(ctx)
    sid = "mirror.someone--grid"
    assert understand(ctx, [sid]).labels("framed") == [sid]
    framings = ctx.store.read_partition(Framing, sid)
    tabular = [f for f in framings if f.status == "chosen" and f.task_type != TaskType.TIME_SERIES]
    # Listed together, each is posed: the first as the table's target, the other as its second target, since
    # the description's words point at it as strongly.
    assert {f.target_columns[0] for f in tabular} == {"Tuketim_MWh", "Uretim_MWh"}, framings
    assert "a second tabular target" in tabular[1].reason


def test_columns_whose_every_value_is_unique_are_no_copies_but_a_recoded_label_is():
    days = [d.strftime("%Y-%m-%d") for d in pd.date_range("2022-01-01", periods=30, freq="D")]
    sample = Sample.from_arrow(
        "t.csv",
        pa.table(
            {
                "Gun": days,
                "Uretim_MWh": [f"{2100 + 37.5 * i:.1f}" for i in range(30)],
                "grade": ["low", "mid", "high"] * 10,
                "grade_code": ["0", "1", "2"] * 10,
            }
        ),
        30,
    )
    made, day = sample.column("Uretim_MWh"), sample.column("Gun")
    assert not copies(made, day) and not copies(day, made)
    assert copies(sample.column("grade_code"), sample.column("grade"))
