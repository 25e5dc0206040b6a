"""Messy real-world table shapes, made by the tests: what a data lake's inputs and Kaggle uploads hold (censored
lab values, mixed-type columns, free text, spreadsheets, JSON records, gappy series). Each is a mirror folder
laid out like a Kaggle dataset download; none is copied from a real dataset."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd


def _folder(root: Path, name: str, description: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    meta = {
        "id": f"lake/{name}",
        "title": name.replace("-", " "),
        "description": description,
        "licenses": [{"name": "CC0-1.0"}],
        "lastUpdated": "2024-05-01",
    }
    (folder / "dataset-metadata.json").write_text(json.dumps(meta))
    return folder


def _csv(folder: Path, name: str, rows: list[list], header: list[str]) -> None:
    with open(folder / name, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def beach_samples(rng: np.random.Generator, n: int = 300) -> pd.DataFrame:
    """Water-quality samples: censored counts ("<10", "ND", ">2419"), dates in two spellings, a site code."""
    sites = ["B01", "B02", "B07", "B11"]
    rows = []
    for i in range(n):
        day = pd.Timestamp("2021-05-01") + pd.Timedelta(days=int(rng.integers(0, 150)))
        temp = round(float(rng.normal(21, 3)), 1)
        rain = round(float(rng.exponential(4)), 1)
        count = int(rng.lognormal(3 + 0.08 * rain, 1))
        shown = "<10" if count < 10 else (">2419" if count > 2419 else str(count))
        if i % 37 == 0:
            shown = "ND"
        rows.append(
            {
                "Sample Date": day.strftime("%m/%d/%Y") if i % 2 else day.strftime("%Y-%m-%d"),
                "Site": sites[i % 4],
                "Water Temp (C)": temp if i % 23 else "",
                "Rain 48h (mm)": rain,
                "Enterococcus (MPN/100mL)": shown,
                "Advisory": "yes" if count > 104 else "no",
            }
        )
    return pd.DataFrame(rows)


def make_messy_lake(root: Path, seed: int = 0) -> dict[str, str]:
    """Write every shape under `root`; returns source id -> the shape it is."""
    rng = np.random.default_rng(seed)
    shapes: dict[str, str] = {}

    def add(name: str, what: str, description: str = "") -> Path:
        shapes[f"mirror.lake--{name}"] = what
        return _folder(root, name, description or what)

    folder = add("beach-water", "censored lab values, two date spellings, blanks")
    beach_samples(rng).to_csv(folder / "samples.csv", index=False)

    folder = add("fraud-reports", "free text beside a label, ids, a mixed-type amount column")
    rows = []
    for i in range(240):
        amount = round(float(rng.lognormal(5, 1)), 2)
        cell = f"${amount:,.2f}" if i % 5 == 0 else ("unknown" if i % 41 == 0 else amount)
        text = " ".join(rng.choice(["card", "phone", "refund", "urgent", "bank", "gift", "wire"], size=12))
        rows.append(
            [f"R-{1000 + i}", text, cell, ["web", "phone", "mail"][i % 3], "fraud" if amount > 300 else "ok"]
        )
    _csv(folder, "reports.csv", rows, ["Report ID", "Narrative", "Amount", "Channel", "Outcome"])

    folder = add("text-only", "nothing but an id, prose and a label")
    rows = [
        [i, " ".join(rng.choice(["dry", "windy", "hot", "calm"], size=15)), "ab"[i % 2]] for i in range(200)
    ]
    _csv(folder, "notes.csv", rows, ["id", "note", "label"])

    folder = add(
        "fire-weather", "an hourly log with gaps, repeated stamps and a unit twin", "Hourly fire weather log."
    )
    rows = []
    stamp = pd.Timestamp("2022-07-01 00:00")
    for i in range(400):
        stamp += pd.Timedelta(hours=int(rng.choice([1, 1, 1, 2, 0])))
        temp_c = round(25 + 8 * math.sin(i / 24 * 2 * math.pi) + float(rng.normal(0, 1)), 1)
        rows.append(
            [
                stamp.strftime("%Y-%m-%d %H:%M"),
                temp_c,
                round(temp_c * 9 / 5 + 32, 1),
                int(rng.integers(5, 60)),
                round(float(rng.uniform(0, 30)), 1),
            ]
        )
    _csv(folder, "weather.csv", rows, ["Timestamp", "Temp_C", "Temp_F", "Humidity", "Wind"])

    folder = add("mixed-codes", "a code column of numbers and words, booleans as TRUE/FALSE, a blank column")
    rows = []
    for i in range(260):
        code = ["1", "2", "3", "x", "2.5", "N/A"][i % 6]
        rows.append(
            [
                code,
                "TRUE" if i % 3 else "FALSE",
                "",
                round(float(rng.normal()), 3),
                i % 7,
                "TRUE" if i % 7 < 3 else "FALSE",
            ]
        )
    _csv(folder, "codes.csv", rows, ["code", "flag", "notes", "x", "group", "passed"])

    folder = add("duplicate-headers", "two columns with one name and an index column pandas wrote")
    rows = [
        [i, round(float(rng.normal()), 3), round(float(rng.normal()), 3), i % 4, "uv"[i % 2]]
        for i in range(220)
    ]
    _csv(folder, "data.csv", rows, ["", "value", "value", "k", "label"])

    folder = add("spreadsheet", "an Excel workbook with a notes sheet and a data sheet")
    frame = pd.DataFrame(
        {
            "Region": rng.choice(["north", "south", "east"], 180),
            "Visitors": rng.integers(100, 900, 180),
            "Spend": rng.normal(50, 10, 180).round(2),
        }
    )
    frame["Revenue"] = (frame["Visitors"] * frame["Spend"] * rng.uniform(0.8, 1.2, 180)).round(0)
    with pd.ExcelWriter(folder / "tourism.xlsx") as writer:
        pd.DataFrame({"note": ["compiled by hand", "see data sheet"]}).to_excel(
            writer, sheet_name="Notes", index=False
        )
        frame.to_excel(writer, sheet_name="Data", index=False)

    folder = add("json-records", "a JSON list of records, with a nested field")
    records = [
        {
            "city": str(rng.choice(["Oslo", "Lima", "Pune"])),
            "size_m2": int(rng.integers(30, 200)),
            "rooms": int(rng.integers(1, 6)),
            "meta": {"floor": int(rng.integers(0, 9))},
        }
        for _ in range(210)
    ]
    for record in records:
        record["rent"] = round(record["size_m2"] * 11 + record["rooms"] * 40 + float(rng.normal(0, 60)), 1)
    (folder / "flats.json").write_text(json.dumps(records))
    return shapes
