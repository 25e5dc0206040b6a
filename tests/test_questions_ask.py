"""Questions that ask something (issue 41), on small tables made here: a filter removes rows and keeps enough of
them, missing-value markers such as `Unknown` are missing values in the question's text and in its reference
alike, and an extreme is not decided by a group seen once."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dareforge.generators.questions.build import Posed, degenerate
from dareforge.generators.questions.programs import PROGRAMS
from dareforge.generators.questions.question import MIN_EXTREME_VALUES, Question, Table
from dareforge.generators.rawtable import is_missing_marker
from dareforge.reference_solutions.reference_runner import ReferenceRunner
from dareforge.understand.columns import Sample


@pytest.fixture(scope="module")
def runner():
    with ReferenceRunner(1, 60) as running:
        yield running


def _answered(runner: ReferenceRunner, frame: pd.DataFrame, question: Question, folder) -> tuple[Posed, dict]:
    """The question posed on `frame` (written as data.csv), and its reference's answer.json."""
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / "data.csv", index=False)
    posed = Posed(question=question, load="df = pd.read_csv('data.csv')", instruction=question.text, spec={})
    outcome = runner.run(posed.script, folder)
    assert outcome.ok, outcome.error
    return posed, json.loads((folder / "answer.json").read_text())


def _drawn(table: Table, program: str, seeds: int = 200, **params) -> Question:
    """The first question `program` draws on `table` whose params include `params`."""
    for seed in range(seeds):
        question = PROGRAMS[program].draw(table, np.random.default_rng(seed))
        if question is not None and all(question.params.get(k) == v for k, v in params.items()):
            return question
    raise AssertionError(f"{program} drew no question with {params}")


def _read(frame: pd.DataFrame, folder) -> pd.DataFrame:
    """`frame` as pandas reads it back from a file (what the programs choose from)."""
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / "data.csv", index=False)
    return pd.read_csv(folder / "data.csv")


# --- a filter must remove rows ------------------------------------------------------------------------


def test_a_period_that_holds_every_row_is_no_filter(runner, tmp_path):
    """The audit's "in the year 2025" on a table of 2025 alone: dates within one year are asked by month, and a
    table of one month alone still gets a filter that keeps every dated row, rejected."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "when": np.repeat(pd.date_range("2025-01-01", periods=30, freq="D").strftime("%Y-%m-%d"), 2),
            "amount": rng.normal(100, 10, 60).round(2),
        }
    )
    table = Table.of(_read(frame, tmp_path / "read"))
    question = _drawn(table, "time-window", year="2025-01")
    posed, output = _answered(runner, frame, question, tmp_path / "q")
    assert "the filter keeps every row that has a value (60 of 60)" in degenerate(posed, output)

    # Another year in the table: the year 2025 removes rows and is asked.
    later = frame.assign(when=frame["when"].where(frame.index < 40, "2026-03-01"))
    table = Table.of(_read(later, tmp_path / "read2"))
    posed, output = _answered(runner, later, _drawn(table, "time-window", year=2025), tmp_path / "q2")
    assert degenerate(posed, output) is None


def test_a_filter_that_keeps_too_few_values_is_degenerate(runner, tmp_path):
    """A category of 4 rows whose number is present once: its mean is one row's value."""
    frame = pd.DataFrame(
        {
            "kind": ["a"] * 20 + ["b"] * 20 + ["c"] * 4,
            "x": [*np.linspace(1, 2, 40), 3.5, np.nan, np.nan, np.nan],
            "y": np.linspace(10, 50, 44),
        }
    )
    table = Table.of(_read(frame, tmp_path / "read"))
    question = _drawn(table, "filtered-stat", number="x", group="kind", value="'c'", stat="mean")
    posed, output = _answered(runner, frame, question, tmp_path / "q")
    assert "keeps 4 row(s) with 1 value(s), fewer than 3" in degenerate(posed, output)


# --- sentinels follow the missing-value rule ----------------------------------------------------------


def test_missing_value_markers_are_one_list_read_trimmed_and_in_any_case():
    cells = pd.Series(["Unknown", " n/a ", "NONE", "-", "?", "   ", "null", "unknowns", "a", None])
    assert is_missing_marker(cells).tolist() == [True] * 7 + [False] * 3
    # Understanding reads a column through the same list: `unknown` is no value there either.
    sample = Sample.from_arrow("t.csv", __import__("pyarrow").table({"c": ["x", "Unknown", "?"]}), 3)
    assert sample.column("c").text.tolist() == ["x", None, None]


def test_a_marker_is_a_missing_value_in_the_question_and_its_reference(runner, tmp_path):
    """`Unknown` holds the highest mean of `score` and `-` is another marker; the question says both are missing
    values, and its reference never answers with them nor counts them as a value."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        {
            "team": ["red"] * 30 + ["blue"] * 30 + ["green"] * 30 + ["Unknown"] * 20 + ["-"] * 5,
            "score": np.concatenate(
                [rng.normal(m, 1, n) for m, n in ((10, 30), (20, 30), (15, 30), (90, 25))]
            ),
        }
    )
    table = Table.of(_read(frame, tmp_path / "read"))
    assert table.markers == {"team": ("-", "Unknown")}
    assert set(table.frame["team"].dropna()) == {"red", "blue", "green"}

    best = _drawn(table, "group-argmax", group="team", highest=True, stat="mean")
    assert 'In `team`, "-" and "Unknown" mark a missing value' in best.text
    posed, output = _answered(runner, frame, best, tmp_path / "best")
    assert output["answer"] == "blue" and degenerate(posed, output) is None

    distinct = _drawn(table, "distinct-count", group="team")
    assert '"Unknown"' in distinct.text and "Missing values do not count as a value" in distinct.text
    _, output = _answered(runner, frame, distinct, tmp_path / "distinct")
    kept = frame["score"] > distinct.params["value"]
    assert output["answer"] == frame.loc[kept, "team"].loc[lambda t: ~t.isin(["Unknown", "-"])].nunique()

    # Every sub-question of a pipeline on the column states the rule too, and its code applies it.
    gap = _drawn(table, "group-gap", group="team")
    assert all('"Unknown"' in sub.text and "markers" in sub.step.body for sub in gap.steps)


# --- an extreme over values seen once is degenerate ----------------------------------------------------


def _thin_winner(n: int = 2000) -> pd.DataFrame:
    """`n` rows in groups a and b, and one row of group z that holds the highest `price` by far."""
    rng = np.random.default_rng(3)
    half = (n - 1) // 2
    return pd.DataFrame(
        {
            "shop": ["a"] * half + ["b"] * (n - 1 - half) + ["z"],
            "price": np.concatenate([rng.normal(10, 1, half), rng.normal(12, 1, n - 1 - half), [99.0]]),
        }
    )


def test_the_highest_mean_of_a_group_seen_once_is_degenerate(runner, tmp_path):
    frame = _thin_winner()
    table = Table.of(_read(frame, tmp_path / "read"))
    question = _drawn(table, "group-argmax", group="shop", highest=True, stat="mean")
    posed, output = _answered(runner, frame, question, tmp_path / "q")
    assert output["answer"] == "z"
    assert f"a group of 1 value(s), fewer than {MIN_EXTREME_VALUES}" in degenerate(posed, output)

    # The lowest mean is decided by group a's 999 rows: asked.
    lowest = _drawn(table, "group-argmax", group="shop", highest=False, stat="mean")
    posed, output = _answered(runner, frame, lowest, tmp_path / "low")
    assert output["answer"] == "a" and degenerate(posed, output) is None


def test_an_extreme_among_mostly_thin_groups_is_degenerate(runner, tmp_path):
    """Three groups of 50 rows and five of 2: the winner is well seen, but most groups are a row or two."""
    rng = np.random.default_rng(4)
    sizes = {"a": 50, "b": 50, "c": 50, "d": 2, "e": 2, "f": 2, "g": 2, "h": 2}
    frame = pd.DataFrame(
        {
            "unit": [g for g, n in sizes.items() for _ in range(n)],
            "load": np.concatenate([rng.normal(100 if g == "a" else 10, 1, n) for g, n in sizes.items()]),
        }
    )
    table = Table.of(_read(frame, tmp_path / "read"))
    question = _drawn(table, "group-argmax", group="unit", highest=True, stat="mean")
    posed, output = _answered(runner, frame, question, tmp_path / "q")
    assert output["answer"] == "a"
    assert f"% of the groups hold fewer than {MIN_EXTREME_VALUES} values" in degenerate(posed, output)
