"""Questions over every kind of column a table has (issue 44), on small tables made here: dates written with a
time of day (and several UTC offsets), dates within one year (asked by month), booleans, free text (searched for
a word) and row keys (naming the row an extreme belongs to). Each reference is run and its answer compared with
the same figure computed here another way."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dareforge.generators.questions.build import Posed, degenerate
from dareforge.generators.questions.programs import PROGRAMS
from dareforge.generators.questions.question import Question, Table
from dareforge.reference_solutions.reference_runner import ReferenceRunner


@pytest.fixture(scope="module")
def runner():
    with ReferenceRunner(1, 60) as running:
        yield running


def _written(frame: pd.DataFrame, folder) -> pd.DataFrame:
    """`frame` written as data.csv in `folder`, read back as pandas reads it (what the programs choose from)."""
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / "data.csv", index=False)
    return pd.read_csv(folder / "data.csv")


def _drawn(table: Table, program: str, **params) -> Question:
    for seed in range(300):
        question = PROGRAMS[program].draw(table, np.random.default_rng(seed))
        if question is not None and all(question.params.get(k) == v for k, v in params.items()):
            return question
    raise AssertionError(f"{program} drew no question with {params}")


def _answer(runner: ReferenceRunner, question: Question, folder) -> tuple[object, str | None]:
    posed = Posed(question=question, load="df = pd.read_csv('data.csv')", instruction=question.text, spec={})
    outcome = runner.run(posed.script, folder)
    assert outcome.ok, outcome.error
    output = json.loads((folder / "answer.json").read_text())
    return output["answer"], degenerate(posed, output)


def _hourly_log(rows: int = 90) -> pd.DataFrame:
    """A sensor log of 2024 written with its local offset: -05:00 in winter, -04:00 from March's change."""
    rng = np.random.default_rng(3)
    local = pd.date_range("2024-01-05 08:00", periods=rows, freq="D") + pd.to_timedelta(
        np.arange(rows) % 9, unit="h"
    )
    offsets = np.where(local < pd.Timestamp("2024-03-10"), "-05:00", "-04:00")
    return pd.DataFrame(
        {
            "timestamp": [f"{t:%Y-%m-%d %H:%M:%S}{o}" for t, o in zip(local, offsets, strict=True)],
            "level": rng.normal(60, 8, rows).round(1),
        }
    )


def test_dates_with_a_time_and_several_offsets_are_asked_by_month(runner, tmp_path):
    frame = _hourly_log()
    table = Table.of(_written(frame, tmp_path))
    assert table.dates == ["timestamp"] and table.utc == ("timestamp",)
    question = _drawn(table, "time-window", year="2024-02")
    assert "falls in the month 2024-02" in question.text
    answer, problem = _answer(runner, question, tmp_path)
    in_february = frame["timestamp"].str.startswith("2024-02")
    assert problem is None
    assert answer == pytest.approx(round(frame["level"][in_february].mean(), 3))


def test_a_date_whose_utc_reading_moves_its_month_is_no_date_column(tmp_path):
    """A late-evening row west of UTC is next month's in UTC: "falls in January" would have two answers."""
    frame = _hourly_log()
    frame.loc[3, "timestamp"] = "2024-01-31 22:00:00-05:00"
    assert Table.of(_written(frame, tmp_path)).dates == []


def test_a_boolean_column_is_a_category_to_count(runner, tmp_path):
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"spill": rng.random(50) < 0.3, "flow": rng.normal(700, 50, 50).round(1)})
    table = Table.of(_written(frame, tmp_path))
    assert table.categorical == ["spill"]
    question = _drawn(table, "count-where", column="spill", value="True")
    answer, problem = _answer(runner, question, tmp_path)
    assert problem is None and answer == int(frame["spill"].sum())


def _listings(rows: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(8)
    makes = np.array(["Toyota Corolla", "Honda Civic Touring", "Ford Focus", "Toyota Camry Hybrid"])
    names = [f"{makes[i % 4]} {2000 + i}" for i in range(rows)]
    return pd.DataFrame(
        {
            "code": [f"P{100 + i}" for i in range(rows)],
            "name": names,
            "body": rng.choice(["sedan", "hatch"], rows),
            "price": rng.normal(20000, 3000, rows).round(0),
        }
    )


def test_free_text_is_searched_for_a_word_it_contains(runner, tmp_path):
    frame = _listings()
    table = Table.of(_written(frame, tmp_path))
    assert table.texts == ["name"] and table.keys == ["code"]
    count = _drawn(table, "text-contains", word="Toyota", number=None)
    answer, problem = _answer(runner, count, tmp_path)
    assert problem is None and answer == int(frame["name"].str.contains("Toyota").sum()) == 30
    mean = _drawn(table, "text-contains", word="Civic", number="price")
    answer, problem = _answer(runner, mean, tmp_path)
    assert problem is None
    assert answer == pytest.approx(round(frame["price"][frame["name"].str.contains("Civic")].mean(), 3))


def test_a_row_key_names_the_row_an_extreme_belongs_to(runner, tmp_path):
    frame = _listings()
    table = Table.of(_written(frame, tmp_path))
    question = _drawn(table, "key-of-extreme", group="body", value="'sedan'", largest=True)
    answer, problem = _answer(runner, question, tmp_path)
    sedans = frame[frame["body"] == "sedan"]
    assert problem is None and answer == sedans.loc[sedans["price"].idxmax(), "code"]

    # Two sedans share the largest price: two keys answer it, and the question is rejected.
    tied = frame.copy()
    top = sedans["price"].idxmax()
    tied.loc[sedans.index[sedans.index != top][0], "price"] = frame.loc[top, "price"]
    table = Table.of(_written(tied, tmp_path / "tied"))
    question = _drawn(table, "key-of-extreme", group="body", value="'sedan'", largest=True)
    _, problem = _answer(runner, question, tmp_path / "tied")
    assert problem is not None and "a tie for the extreme" in problem
