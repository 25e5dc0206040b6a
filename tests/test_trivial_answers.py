"""Trivial answers never pass: each family's trivial answers are graded by the task's own grader, and the gate
rejects a task one of them passes (or, for IF row-share grading, one that reproduces too many rows). Every task
here is a small folder the test writes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dareforge.config import Config, ValidateConfig
from dareforge.families.registry import families, family_named
from dareforge.families.trivial import question_guesses
from dareforge.generators.questions.build import Guessing, Posed
from dareforge.generators.questions.question import Question
from dareforge.publish import skill
from dareforge.publish.release_card import skill_lines
from dareforge.schema import PreparedSource, Task, Validation
from dareforge.validators.check import TaskView
from dareforge.validators.gate import reasons_against
from dareforge.validators.trivial import Trivial
from dareforge.validators.validate import TASK_CHECKS
from tests.test_checks import make_view

CONFIG = Config()
ROWS = 50


def _if_view(tmp_path, task_id: str, family: str, predicted: list) -> TaskView:
    """An IF task whose reference run predicted `predicted` for the test rows (in row order)."""
    ids = np.arange(len(predicted))
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"row_id": ids + 1000, "x": rng.normal(size=len(ids)), "y": predicted})
    test = pd.DataFrame({"row_id": ids, "x": rng.normal(size=len(ids))})
    reference = pd.DataFrame({"row_id": ids, "y": predicted})
    return make_view(
        tmp_path,
        task_id,
        train,
        test,
        reference,
        family=family,
        private={"reference_predictions.csv": reference},
    )


def _question_view(
    tmp_path, task_id: str, question: str, answer, answer_type: str = "numeric_exact"
) -> TaskView:
    folder = tmp_path / "tasks" / task_id
    (folder / "public").mkdir(parents=True)
    (folder / "private").mkdir(parents=True)
    pd.DataFrame({"city": ["Lyon", "Oslo", "Lima"], "rain": [830.5, 763.0, 16.0]}).to_csv(
        folder / "public" / "data.csv", index=False
    )
    (folder / "private" / "answer.json").write_text(json.dumps({"answer": answer}))
    task = Task.model_validate(
        {
            "id": task_id,
            "family": "QA",
            "source_id": "builtin.rain",
            "source_version": "v1",
            "prepared_version": "p1",
            "generator_version": "1",
            "seed": 7,
            "instruction": f"Answer a question about the table in `data.csv`.\n\nQuestion: {question}",
            "public_files": [],
            "private_files": [],
            "metric": {"name": "answer", "target_columns": [], "key_columns": [], "answer_type": answer_type},
            "package_versions": [],
        }
    )
    prepared = PreparedSource.model_validate(
        {
            "source_id": "builtin.rain",
            "source_version": "v1",
            "version": "p1",
            "task_type": "regression",
            "target_columns": ["rain"],
            "id_column": "row_id",
            "columns": [],
            "n_rows": 3,
            "n_train": 3,
            "n_test": 0,
            "split": "random",
            "seed": 7,
            "files": [],
        }
    )
    return TaskView(task, prepared, folder)


def trivial_verdict(view: TaskView, config: ValidateConfig | None = None) -> tuple[dict, str | None]:
    """The trivial finding's details and the gate's reason against the task (None: it passes the gate)."""
    finding = Trivial().run(view, CONFIG)
    stored = finding.record(view.task.id, view.task.source_id, Trivial.name, "test")
    return json.loads(stored.details or "{}"), reasons_against(
        stored, config or CONFIG.validate_, view.family
    )


def test_every_family_declares_trivial_answers_and_validate_runs_the_check():
    assert all(callable(f.trivial) for f in families())
    assert Trivial.name in {c.name for c in TASK_CHECKS}


@pytest.mark.parametrize(("family", "value"), [("Reg-IF", 5517.384615384615), ("Class-IF", "yes")])
def test_an_if_task_with_constant_reference_predictions_is_flagged_and_rejected(tmp_path, family, value):
    details, reason = trivial_verdict(_if_view(tmp_path, "constant", family, [value] * 24))
    assert details["best"] == "most frequent value" and details["scores"]["most frequent value"] == 1.0
    assert reason is not None and "one constant" in reason and str(value) in reason
    # The gate rejects it whatever the share threshold: a flag needs none.
    assert reasons_against(
        Validation(
            task_id="constant",
            source_id="s",
            check="trivial",
            score=1.0,
            flagged=True,
            reason="r",
            checks_version="test",
        ),
        ValidateConfig(max_trivial_share=1.0),
        family_named(family),
    )


def test_a_regression_if_task_with_one_value_on_96_percent_of_rows_is_rejected_above_max_trivial_share(
    tmp_path,
):
    rng = np.random.default_rng(1)
    predicted = [12.5] * 48 + list(rng.normal(100.0, 10.0, size=2))  # 48 of 50 rows: 96%
    view = _if_view(tmp_path, "mostly-one", "Reg-IF", predicted)
    details, reason = trivial_verdict(view)
    assert details["best"] == "most frequent value"
    assert details["scores"]["most frequent value"] == pytest.approx(0.96)
    assert {"mean", "median"} <= details["scores"].keys()
    assert reason is not None and "validate.max_trivial_share=0.9" in reason and "0.960 >" in reason
    # The share is a threshold the gate applies, not a verdict of the check: above it, the task passes.
    assert trivial_verdict(view, ValidateConfig(max_trivial_share=0.97))[1] is None


def test_a_normal_if_task_passes(tmp_path):
    labels = [["a", "b", "c"][i % 3] for i in range(ROWS)]
    details, reason = trivial_verdict(_if_view(tmp_path, "normal", "Class-IF", labels))
    assert reason is None
    assert details["scores"]["most frequent value"] == pytest.approx(17 / ROWS)
    assert "mean" not in details["scores"], "a label has no mean"


def test_a_goal_task_is_graded_on_its_bars_own_baselines(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=200)
    data = pd.DataFrame({"row_id": range(200), "x": x, "y": 3 * x + rng.normal(0, 0.1, 200)})
    train, held = data.iloc[:160], data.iloc[160:]
    view = make_view(tmp_path, "mm", train, held.drop(columns="y"), held[["row_id", "y"]], family="Reg-MM")
    details, reason = trivial_verdict(view)
    assert reason is None and details["best"] == "mean" and details["scores"] == {"mean": 0.0}


@pytest.mark.parametrize(
    ("question", "answer", "winner"),
    [
        ("How many rows have `rain` above 900?", 0, "0"),
        ("How many rows have `rain` above 3?", 3, "3, stated in the question"),
        ("Which `city` comes first in the file?", "Lyon", "the first `city` of data.csv"),
    ],
)
def test_a_question_a_guess_answers_is_rejected_and_the_finding_names_the_guess(
    tmp_path, question, answer, winner
):
    answer_type = "string_exact" if isinstance(answer, str) else "numeric_exact"
    details, reason = trivial_verdict(_question_view(tmp_path, "guessable", question, answer, answer_type))
    assert details["best"] == winner and details["scores"][winner] == 1.0
    assert reason is not None and "the task's pass bar=0.99" in reason


@pytest.mark.parametrize("answer", [True, False])
def test_a_boolean_question_is_always_guessed(tmp_path, answer):
    """One of the constant guesses true and false is right: no boolean question passes the gate."""
    question = "Is the mean `rain` of Lyon higher than that of Oslo?"
    details, reason = trivial_verdict(_question_view(tmp_path, "yes-no", question, answer, "boolean"))
    assert details["scores"]["true" if answer else "false"] == 1.0 and reason is not None


def test_a_normal_question_passes(tmp_path):
    details, reason = trivial_verdict(
        _question_view(tmp_path, "fine", "What is the mean `rain`, to 1 decimal?", 536.5)
    )
    assert reason is None
    assert details["scores"]["1"] == 0.0 and max(details["scores"].values()) < 0.99


@pytest.mark.parametrize(
    ("question", "answer", "answer_type"),
    [
        ("How many rows have `rain` above 900?", 0, "numeric_exact"),
        ("How many rows have `rain` above 3?", 3, "numeric_exact"),
        ("Which `city` comes first in the file?", "Lyon", "string_exact"),
        ("Is the mean `rain` of Lyon higher than that of Oslo?", True, "boolean"),
        ("What is the mean `rain`, to 1 decimal?", 536.5, "numeric_exact"),
        ("What is the largest `rain`?", 830.5, "numeric_exact"),
        ("Which `city` has the least `rain`?", "Lima", "string_exact"),
    ],
)
def test_the_generator_refuses_exactly_the_questions_the_gate_rejects_as_guessed(
    tmp_path, question, answer, answer_type
):
    """The question builders' refusal at the draw (`Guessing`, on the draft's public files and texts) and the
    gate's trivial check (the family's `trivial`, on the stored task) grade the same guesses with the same grader:
    they agree on every question, and name the same guess."""
    view = _question_view(tmp_path, "same", question, answer, answer_type)
    details, reason = trivial_verdict(view)
    family = family_named("QA")
    posed = Posed(Question("count-where", {}, question, answer_type, "", ()), "", view.task.instruction, {})
    refused = Guessing(question_guesses, family.pass_bar).passing(posed, answer, view.path("public", ""))
    assert (refused is None) == (reason is None)
    assert family.trivial(view) == question_guesses(view.path("public", ""), [view.task.instruction])
    if refused is not None:
        assert refused.startswith(f"a guess answers it: {details['best']} scores 1.000")


def test_the_card_shows_per_family_the_best_trivial_answers_median_and_max(tmp_path):
    views = [
        _if_view(tmp_path, "a", "Class-IF", [["a", "b"][i % 2] for i in range(ROWS)]),
        _if_view(tmp_path, "b", "Class-IF", ["a"] * 40 + ["b"] * 10),
    ]
    tasks = [v.task for v in views]
    findings = [
        Validation(
            task_id=v.task.id,
            source_id=v.task.source_id,
            check=Trivial.name,
            score=(f := Trivial().run(v, CONFIG)).score,
            reason=f.reason,
            checks_version="test",
        )
        for v in views
    ]
    summary = skill.skill_summary(tasks, tasks, findings, [])
    assert summary["trivial"] == {"Class-IF": {"graded": 2, "median": 0.65, "max": 0.8}}
    asks = family_named("Class-IF").words.asks
    assert f"| Class-IF | {asks} | 2 | 0.65 | 0.80 | 1 |" in skill_lines(summary)
