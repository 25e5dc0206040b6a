"""The one-step baseline answers what one operation over the table gives, and nothing that needs a pipeline."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dareforge.generators.questions.build import answer_metric
from dareforge.generators.questions.one_step import one_step_solves
from dareforge.generators.questions.programs import PROGRAMS
from dareforge.generators.questions.question import Question
from tests.test_question_conventions import _table


def _answer(question: Question, frame: pd.DataFrame):
    """The question's answer, computed by its own code (as its reference does)."""
    space: dict = {"df": frame.copy(), "pd": pd, "np": np}
    exec(question.body, space)  # the program's own code, on a table the test made
    answer = space["answer"]
    return answer.item() if hasattr(answer, "item") else answer


def _first(program: str, table) -> Question:
    for seed in range(200):
        question = PROGRAMS[program].propose(table, np.random.default_rng(seed))
        if question is not None:
            return question
    raise AssertionError(f"{program} asked nothing")


def test_a_value_s_share_and_count_are_one_step_and_a_growth_rate_is_not():
    table = _table()
    solved = {}
    for program in ("share", "count-where", "missing-audit", "growth-rate", "filtered-stat"):
        question = _first(program, table)
        answer = _answer(question, table.frame)
        solved[program] = one_step_solves(answer_metric(question), answer, table.frame)
    assert solved == {
        "share": True,
        "count-where": True,
        "missing-audit": True,
        "growth-rate": False,
        "filtered-stat": False,
    }


def test_a_boolean_question_is_never_counted_as_solved():
    table = _table()
    question = _first("compare-groups", table)
    assert question.answer_type == "boolean"
    assert not one_step_solves(answer_metric(question), _answer(question, table.frame), table.frame)
