"""Competition-shaped mirror sources, made by the tests in the spirit of mle-bench's per-competition folders: a
labelled `train.csv`, an unlabelled `test.csv` without the outcome columns, a sample submission under one of the
names Kaggle uses, and a `competition-metadata.json` that does not name the target.

Each maker returns the folder's name, its source id and what a person would pose: the target, the outcome
columns that only the future knows, and the problem type.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Competition:
    folder: str
    target: str
    outcomes: tuple[str, ...]
    kind: str
    """classification or regression (a series is posed beside it where the rows are indexed by time)."""

    @property
    def source_id(self) -> str:
        return f"mirror.{self.folder}"


def _write(
    root: Path,
    comp: Competition,
    title: str,
    train: pd.DataFrame,
    test: pd.DataFrame,
    sample: pd.DataFrame,
    sample_name: str,
) -> Competition:
    folder = root / comp.folder
    folder.mkdir(parents=True)
    meta = {
        "ref": comp.folder,
        "title": title,
        "description": f"{title}: a playground competition. Submissions are scored on the test set.",
        "category": "Playground",
        "evaluationMetric": "See the evaluation page",
        "hasLeaderboard": True,
        "enabledDate": "2024-03-01T00:00:00Z",
        "deadline": "2030-12-31T23:59:00Z",
    }
    (folder / "competition-metadata.json").write_text(json.dumps(meta))
    train.to_csv(folder / "train.csv", index=False)
    test.to_csv(folder / "test.csv", index=False)
    if sample_name.endswith(".zip"):
        with zipfile.ZipFile(folder / sample_name, "w") as zf:
            zf.writestr(sample_name.removesuffix(".zip"), sample.to_csv(index=False))
    else:
        sample.to_csv(folder / sample_name, index=False)
    return comp


def passengers(root: Path, rows: int = 600) -> Competition:
    """Who survived a voyage: the sample submission is `gender_submission.csv`, which a name rule misses."""
    rng = np.random.default_rng(1)
    n = rows + rows // 3
    klass = rng.integers(1, 4, n)
    sex = rng.choice(["male", "female"], n)
    age = np.round(rng.uniform(1, 80, n))
    fare = np.round(rng.gamma(2, 15, n) * (4 - klass), 2)
    embarked = rng.choice(["S", "C", "Q"], n, p=[0.7, 0.2, 0.1])
    odds = 1.5 * (sex == "female") - 0.8 * (klass - 2) - 0.01 * (age - 30)
    survived = (rng.random(n) < 1 / (1 + np.exp(-odds))).astype(int)
    frame = pd.DataFrame(
        {
            "PassengerId": np.arange(1, n + 1),
            "Pclass": klass,
            "Sex": sex,
            "Age": age,
            "Fare": fare,
            "Embarked": embarked,
            "Survived": survived,
        }
    )
    frame.loc[rng.random(n) < 0.15, "Age"] = np.nan
    train, test = frame.iloc[:rows], frame.iloc[rows:]
    sample = pd.DataFrame(
        {"PassengerId": test["PassengerId"], "Survived": (test["Sex"] == "female").astype(int)}
    )
    comp = Competition("voyage-survival", "Survived", (), "classification")
    return _write(
        root,
        comp,
        "Voyage: who survived",
        train,
        test.drop(columns=["Survived"]),
        sample,
        "gender_submission.csv",
    )


def rentals(root: Path, days: int = 60) -> Competition:
    """Hourly bike rentals: `count` is `casual + registered`, and test.csv has none of the three (outcomes)."""
    rng = np.random.default_rng(2)
    stamps = pd.date_range("2011-01-01", periods=days * 24, freq="h")
    hour = stamps.hour.to_numpy()
    temp = np.round(
        10 + 8 * np.sin(np.arange(len(stamps)) / 24 / 30 * np.pi) + rng.normal(0, 2, len(stamps)), 1
    )
    humidity = rng.integers(30, 95, len(stamps))
    workingday = (stamps.day_of_week < 5).astype(int)
    weather = rng.choice([1, 2, 3], len(stamps), p=[0.6, 0.3, 0.1])
    rush = np.isin(hour, [7, 8, 17, 18]).astype(int)
    registered = (
        np.maximum(0, (20 + 90 * rush * workingday + 3 * temp - 10 * weather + rng.normal(0, 8, len(stamps))))
        .round()
        .astype(int)
    )
    casual = (
        np.maximum(
            0,
            (5 + 2 * temp * (1 - workingday) + 4 * (hour > 10) * (hour < 18) + rng.normal(0, 4, len(stamps))),
        )
        .round()
        .astype(int)
    )
    frame = pd.DataFrame(
        {
            "datetime": stamps.strftime("%Y-%m-%d %H:%M:%S"),
            "season": 1,
            "holiday": 0,
            "workingday": workingday,
            "weather": weather,
            "temp": temp,
            "humidity": humidity,
            "casual": casual,
            "registered": registered,
            "count": casual + registered,
        }
    )
    in_test = stamps.day > 19
    train, test = frame[~in_test], frame[in_test]
    sample = pd.DataFrame({"datetime": test["datetime"], "count": 0})
    comp = Competition("bike-rentals", "count", ("casual", "registered"), "regression")
    return _write(
        root,
        comp,
        "Bike rental demand",
        train,
        test.drop(columns=["casual", "registered", "count"]),
        sample,
        "sampleSubmission.csv",
    )


def transport(root: Path, rows: int = 600) -> Competition:
    """Who was transported: a boolean target written TRUE/FALSE, boolean features (True/False) with blanks."""
    rng = np.random.default_rng(3)
    n = rows + rows // 3
    cryo = rng.random(n) < 0.35
    vip = rng.random(n) < 0.05
    planet = rng.choice(["Earth", "Europa", "Mars"], n, p=[0.5, 0.25, 0.25])
    age = np.round(rng.uniform(0, 75, n))
    spend = np.where(cryo, 0, np.round(rng.gamma(1.5, 300, n)))
    odds = 2.2 * cryo - 0.002 * spend + 0.6 * (planet == "Europa") - 0.3
    transported = rng.random(n) < 1 / (1 + np.exp(-odds))
    frame = pd.DataFrame(
        {
            "PassengerId": [f"{i:04d}_01" for i in range(n)],
            "HomePlanet": planet,
            "CryoSleep": cryo,
            "Age": age,
            "VIP": vip,
            "RoomService": spend,
            "Transported": transported,
        }
    )
    frame["CryoSleep"] = frame["CryoSleep"].astype(object)
    frame.loc[rng.random(n) < 0.05, "CryoSleep"] = None
    frame["VIP"] = frame["VIP"].astype(object)
    frame.loc[rng.random(n) < 0.05, "VIP"] = None
    # Spelled as a spreadsheet writes it; prepared files spell it as pandas does.
    frame["Transported"] = np.where(transported, "TRUE", "FALSE")
    train, test = frame.iloc[:rows], frame.iloc[rows:]
    sample = pd.DataFrame({"PassengerId": test["PassengerId"], "Transported": False})
    comp = Competition("starship-transport", "Transported", (), "classification")
    return _write(
        root,
        comp,
        "Starship: who was transported",
        train,
        test.drop(columns=["Transported"]),
        sample,
        "sample_submission.csv",
    )


def houses(root: Path, rows: int = 500) -> Competition:
    """House prices, the sample submission zipped as Kaggle ships some."""
    rng = np.random.default_rng(4)
    n = rows + rows // 3
    area = rng.integers(500, 4000, n)
    rooms = rng.integers(1, 8, n)
    year = rng.integers(1900, 2010, n)
    quality = rng.integers(1, 11, n)
    zone = rng.choice(["RL", "RM", "FV"], n)
    price = np.round(20000 + 60 * area + 8000 * quality + 300 * (year - 1900) + rng.normal(0, 15000, n))
    frame = pd.DataFrame(
        {
            "Id": np.arange(1, n + 1),
            "LotArea": area,
            "Rooms": rooms,
            "YearBuilt": year,
            "OverallQual": quality,
            "Zoning": zone,
            "SalePrice": price,
        }
    )
    train, test = frame.iloc[:rows], frame.iloc[rows:]
    sample = pd.DataFrame({"Id": test["Id"], "SalePrice": 180000.0})
    comp = Competition("house-prices", "SalePrice", (), "regression")
    return _write(
        root,
        comp,
        "House prices",
        train,
        test.drop(columns=["SalePrice"]),
        sample,
        "sample_submission.csv.zip",
    )


MAKERS = (passengers, rentals, transport, houses)


def competition_mirror(root: Path) -> list[Competition]:
    """A mirror folder holding one competition of each shape above."""
    root.mkdir(parents=True, exist_ok=True)
    return [make(root) for make in MAKERS]


def read_csv_bytes(data: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data))
