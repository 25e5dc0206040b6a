"""Every question states its conventions, so exactly one answer is right: which statistic (a sample standard
deviation, Pearson's correlation), what happens to missing values, strict or inclusive bounds, the order of a
list, the rounding or type of a number. Checked on the rendered instruction of every program's questions over a
table that has every kind of column and missing values."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from dareforge.generators.questions.build import subtask
from dareforge.generators.questions.programs import PROGRAMS, is_multi_step
from dareforge.generators.questions.question import Question, SubQuestion, Table
from dareforge.generators.questions.table_questions import qa_instruction

DRAWS = 120
STATISTIC = re.compile(r"\]\.(mean|median|sum|std|max|min)\(\)")
"""A statistic of a column's values (`df['x'][...].mean()`), not a count of a condition (`(...).sum()`)."""
BOUND, INCLUSIVE_BOUND = re.compile(r"\]\s[<>]\s"), re.compile(r"\]\s[<>]=\s")
"""A column compared with a value (`df['x'] > 3`), strictly or not."""


def _table() -> Table:
    rng = np.random.default_rng(7)
    n = 300
    frame = pd.DataFrame(
        {
            "price": rng.normal(100, 20, n).round(2),
            "units": rng.integers(1, 50, n).astype(float),
            "rating": rng.uniform(1, 5, n).round(1),
            "region": rng.choice(["north", "south", "east", "west"], n),
            "segment": rng.choice(["retail", "online", "wholesale"], n),
            "year": rng.integers(2015, 2023, n),
            "day": pd.Series(pd.date_range("2020-01-01", periods=n, freq="D").strftime("%Y-%m-%d")),
            "sku": [f"S{1000 + i}" for i in range(n)],
            "note": [f"{rng.choice(['late', 'on time', 'damaged box'])} order {i}" for i in range(n)],
        }
    )
    frame.loc[rng.choice(n, 20, replace=False), "price"] = np.nan
    frame.loc[rng.choice(n, 10, replace=False), "region"] = np.nan
    return Table.of(frame)


def _questions() -> list[Question]:
    table = _table()
    found = []
    for program in PROGRAMS.values():
        for seed in range(DRAWS):
            question = program.propose(table, np.random.default_rng(seed))
            if question is not None:
                found.append(question)
    return found


QUESTIONS = _questions()


def test_every_program_asks_on_the_convention_table():
    assert {q.program for q in QUESTIONS} == set(PROGRAMS)


def _states_conventions(text: str, body: str, answer_type: str, decimals: int | None) -> None:
    said = text.lower()
    if answer_type.startswith("numeric"):
        assert (
            f"rounded to {decimals} decimal places" in said
            or "a json integer" in said
            or ("the value as it appears in the data" in said)
        ), "a number's rounding or type"
    if answer_type.startswith("list"):
        assert "first" in said or "in the order of" in said, "a list's order"
    if ".std(" in body:
        assert "sample standard deviation (n - 1" in said, "which standard deviation"
    if "pearsonr" in body:
        assert "pearson" in said, "which correlation"
    if STATISTIC.search(body):
        assert "missing" in said, "what a missing value does to a statistic of a column"
    if BOUND.search(body):
        assert "greater than" in said or "less than" in said, "a strict bound on a column"
    if INCLUSIVE_BOUND.search(body):
        assert "or equal" in said, "an inclusive bound on a column"
    if "kind='stable'" in body or "sorted(" in body:
        # Programs that rank without a tie rule reject a tie instead (their `problem`).
        assert "a tie goes to" in said, "how a tie for a place is broken"


@pytest.mark.parametrize("question", QUESTIONS, ids=lambda q: f"{q.program}:{q.text[:40]}")
def test_the_rendered_question_states_its_conventions(question: Question):
    text = qa_instruction(question, 300, "conventions")
    _states_conventions(text, question.body, question.answer_type, question.decimals)


SUBQUESTIONS = [(q, n, sub) for q in QUESTIONS for n, sub in enumerate(q.steps, 1)]


@pytest.mark.parametrize(
    "question,number,sub", SUBQUESTIONS, ids=lambda x: x.program if isinstance(x, Question) else str(x)[:30]
)
def test_every_sub_question_states_its_conventions(question: Question, number: int, sub: SubQuestion):
    task, step = subtask(f"s{number}", sub)
    _states_conventions(task.question, step.body, step.answer_type, step.decimals)


def test_pipeline_programs_ask_sub_questions_on_the_convention_table():
    pipelines = {q.program for q in QUESTIONS if is_multi_step(PROGRAMS[q.program])}
    assert pipelines and pipelines == {q.program for q in QUESTIONS if q.steps}
