"""The one-step baseline answers what one operation over the table gives, and nothing that needs a pipeline; a
question's tier counts its operations, and a question the baseline answers is easy whatever its program."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from dareforge.generators.questions.build import answer_metric, difficulty_of
from dareforge.generators.questions.one_step import one_step_solves
from dareforge.generators.questions.programs import PROGRAMS
from dareforge.generators.questions.question import OPERATIONS, Question, Table
from dareforge.generators.questions.table_questions import table_posed
from dareforge.generators.questions.tiers import tier, visible_frames
from tests.test_question_conventions import _table


def _answer(question: Question, frame: pd.DataFrame):
    """The question's answer, computed by its own code (as its reference does)."""
    space: dict = {"df": frame.copy(), "pd": pd, "np": np, "checks": {}}  # as `compute_code` starts it
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


def test_a_boolean_answer_is_never_counted_as_solved():
    """No program asks yes or no (true and false are trivial guesses), but the answer type remains: a boolean is
    never counted as one step."""
    table = _table()
    metric = answer_metric(answer_type="boolean")
    assert not any(one_step_solves(metric, answer, table.frame) for answer in (True, False))


def _top_groups_table(rare_values: float) -> Table:
    """Four groups of 12, 9, 7 and 5 rows; the rarest group's `amount` is `rare_values` (NaN: missing)."""
    rng = np.random.default_rng(3)
    group = ["a"] * 12 + ["b"] * 9 + ["c"] * 7 + ["d"] * 5
    amount = rng.normal(50, 10, len(group)).round(2)
    amount[-5:] = rare_values
    return Table.of(pd.DataFrame({"group": group, "amount": amount}))


def _top_three_median(table: Table) -> Question:
    for seed in range(500):
        question = PROGRAMS["top-groups-stat"].propose(table, np.random.default_rng(seed))
        if question is not None and (question.params["k"], question.params["stat"]) == (3, "median"):
            return question
    raise AssertionError("no median over the top three groups was drawn")


def _tier(table: Table, tmp_path) -> str:
    question = _top_three_median(table)
    posed = table_posed(question, table.frame, "tiers")
    return difficulty_of(posed, _answer(question, table.frame), tmp_path)


def test_a_pipeline_whose_answer_a_shortcut_gives_is_not_labelled_hard(tmp_path):
    """The median over the three most frequent groups is four operations; when the fourth group has no
    `amount` at all, it is the column's own median, which one step gives: easy, not hard."""
    assert _tier(_top_groups_table(rare_values=1000.0), tmp_path) == "hard"
    assert _tier(_top_groups_table(rare_values=np.nan), tmp_path) == "easy"


def test_tiers_count_operations_and_need_sub_tasks_to_be_hard():
    assert tier(["aggregate"], joins_files=False, has_subtasks=False, shortcut=False) == "easy"
    assert tier(["filter", "aggregate"], joins_files=False, has_subtasks=False, shortcut=False) == "medium"
    pipeline = ["filter", "group-aggregate", "rank"]
    assert tier(pipeline, joins_files=False, has_subtasks=True, shortcut=False) == "hard"
    assert tier(pipeline, joins_files=False, has_subtasks=False, shortcut=False) == "medium"
    assert tier(pipeline, joins_files=False, has_subtasks=True, shortcut=True) == "easy"
    assert tier(["join", "aggregate"], joins_files=True, has_subtasks=True, shortcut=False) == "hard"


def test_every_program_is_made_of_named_operations():
    for program in PROGRAMS.values():
        assert program.operations and set(program.operations) <= set(OPERATIONS), program.name


def test_a_column_holding_inf_gives_no_infinite_candidate():
    """An R dataset with an infinite value once failed every question of its source: the baseline's mean of that
    column was inf, which the grader refuses as a submission."""
    frame = pd.DataFrame({"ratio": [1.0, np.inf, 2.0, 3.0], "kind": ["a", "b", "a", "b"]})
    metric = answer_metric(answer_type="numeric_approximate", decimals=2)
    assert one_step_solves(metric, 1.0, frame)  # the minimum is still a candidate
    assert not one_step_solves(metric, 7.25, frame)  # the sum and mean are inf: no candidate, no error


def test_a_file_pandas_reads_with_mixed_types_is_a_shortcut_frame_without_a_warning(tmp_path):
    """pandas reads a large file in chunks of 262,144 rows and warns, listing every column whose chunks
    disagree; on a wide catalog table that was one 15 KB line in the run's log per task."""
    with open(tmp_path / "wide.csv", "w") as f:
        f.write("a,b\nx,1\n" + "".join(f"{i},{i}\n" for i in range(270_000)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (frame,) = visible_frames(tmp_path)
    assert {type(v) for v in frame["a"]} == {str, int}  # as a shortcut's plain read_csv sees it
