"""A target named only in a description in another language than English (issue 44): a prediction phrase in
Turkish, Spanish, French... names the columns its parts gloss, and targets listed together are each posed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.schema import Framing, Source, TaskType
from dareforge.understand.evidence import read_text
from dareforge.understand.understand_stage import understand

DOTLESS = "\u0131"  # Turkish dotless i, as Turkish text writes it
COLUMNS = ["Tarih", "DolulukOrani_Yuzde", "SuDurumu_m3", "Nufus", "Sicaklik_Ort", "Yagis_mm", "Turist_Sayisi"]
DESCRIPTION = (
    f"\u0130zmir ili baraj doluluk oran{DOTLESS} ve su miktar{DOTLESS} tahminine y\u00f6nelik ge\u00e7mi\u015f 10 y{DOTLESS}l\n\n"
    f"Bu veri seti, \u0130zmir iline ait 2015-2024 y{DOTLESS}llar{DOTLESS} aras{DOTLESS}ndaki ayl{DOTLESS}k baraj doluluk oran{DOTLESS} "
    f"(**DolulukOrani_Yuzde**) ve barajlardaki su miktar{DOTLESS} (**SuDurumu_m3**) verilerini i\u00e7ermektedir.\n\n"
    "Ek olarak: n\u00fcfus, ortalama s\u0131cakl\u0131k, ya\u011f\u0131\u015f ve turist say\u0131s\u0131."
)


def _source(description: str) -> Source:
    return Source(
        id="mirror.t", origin="mirror", kind="dataset", ref="t", title="a table", description=description,
        tags=[], version="v1",
    )  # fmt: skip


def test_a_turkish_phrase_names_each_glossed_target_it_lists():
    evidence = read_text(_source(DESCRIPTION), COLUMNS)
    assert evidence.weight("DolulukOrani_Yuzde") >= 6 and evidence.weight("SuDurumu_m3") >= 6
    assert all(evidence.weight(c) < 6 for c in COLUMNS if c not in ("DolulukOrani_Yuzde", "SuDurumu_m3"))
    assert any("not in English" in s for s in evidence.sentences("SuDurumu_m3"))


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
    assert evidence.weight("SuDurumu_m3") < 6 and evidence.weight("DolulukOrani_Yuzde") < 6


def _reservoir(months: int = 120) -> list[dict]:
    """A dam's monthly record: its fill share follows rain and heat, the water held follows the fill share
    loosely (evaporation, a second basin), and tourists come in summer."""
    rng = np.random.default_rng(3)
    dates = pd.date_range("2015-01-01", periods=months, freq="MS")
    season = np.sin(2 * np.pi * (dates.month.to_numpy() - 1) / 12)
    rain = np.round(60 - 45 * season + rng.gamma(2, 8, months), 1)
    heat = np.round(17 + 10 * season + rng.normal(0, 1.5, months), 1)
    fill = np.round(np.clip(25 + 0.45 * rain - 0.9 * heat + rng.normal(0, 4, months), 1, 99), 2)
    water = np.round(1e6 * (2.1 * fill + 0.6 * rain + rng.normal(0, 18, months))).astype(int)
    return [
        {
            "Tarih": d.strftime("%Y-%m-%d"),
            "DolulukOrani_Yuzde": fill[i],
            "SuDurumu_m3": water[i],
            "Nufus": 4_300_000 + 900 * i,
            "Sicaklik_Ort": heat[i],
            "Yagis_mm": rain[i],
            "Turist_Sayisi": int(150_000 + 60_000 * season[i] + rng.normal(0, 9000)),
        }
        for i, d in enumerate(dates)
    ]


def test_both_listed_targets_are_posed_as_tabular_framings(tmp_path: Path):
    mirror = tmp_path / "mirror"
    folder = mirror / "izmir"
    folder.mkdir(parents=True)
    meta = {
        "id": "someone/izmir",
        "title": "Izmir_Water_Amount",
        "description": DESCRIPTION,
        "licenses": [{"name": "CC0-1.0"}],
        "lastUpdated": "2024-02-02",
    }
    (folder / "dataset-metadata.json").write_text(json.dumps(meta))
    rows = _reservoir()
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
    sid = "mirror.someone--izmir"
    assert understand(ctx, [sid]).labels("framed") == [sid]
    framings = ctx.store.read_partition(Framing, sid)
    tabular = [f for f in framings if f.status == "chosen" and f.task_type != TaskType.TIME_SERIES]
    # Listed together, each is posed: the first as the table's target, the other as its second target, since
    # the description's words point at it as strongly.
    assert {f.target_columns[0] for f in tabular} == {"SuDurumu_m3", "DolulukOrani_Yuzde"}, framings
    assert "a second tabular target" in tabular[1].reason
