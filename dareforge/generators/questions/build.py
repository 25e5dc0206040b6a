"""Filling a question task's draft: run the reference twice, judge the answer, write the private files.

`fill_question` is what QA and Lake builders hand to `TaskWriter.build`. It runs the reference script in the
reference worker twice, in two processes at once, on copies of the clean files; the two `answer.json` files
must be byte-identical (the determinism certificate). A Lake task is run a third time on copies of its public,
messy files with its recorded cleaning step in front, and must give the same answers. Then the answer is
judged: a degenerate question is stored as a rejected task with the reason and no files.

Degenerate: an undefined (NaN) or empty answer or sub-answer; a count of 0 (a guess gets it right); an exact
0 where the grade is a relative error; an answer that appears in the question or a sub-question (a column
name, a value, a number stated in the text); a check the program computed that is undefined (NaN: the mean
of a group with no values); a filter that removes no row or keeps fewer than a group's rows, an extreme decided by
a group seen (nearly) once (`question.shared_problem`); and whatever the program's own rule says (a tie for a
top-1, a correlation near 0).

Guessed: a question that one of its family's trivial answers passes (`Guessing`: the guesses the gate's
`trivial` check grades, made from the public files and the question's texts, graded by the task's own grader
against the certified answer). Refused here, it is stored as rejected and the builder draws another question
in its place; the gate's check stays the safety net.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dareforge.context import RunContext
from dareforge.generators.questions.programs import PROGRAMS, QUESTIONS_VERSION
from dareforge.generators.questions.question import Question, SubQuestion, format_note, shared_problem
from dareforge.generators.questions.scripts import (
    ANSWER_FILE,
    Reference,
    Step,
    subtask_file,
    with_cleaning,
)
from dareforge.generators.questions.tiers import shortcut_solves, tier, visible_frames
from dareforge.generators.taskio import Draft, Runners, limits_of
from dareforge.reference_solutions.graders import grade
from dareforge.schema import ANSWER_METRIC, Difficulty, MetricSpec, SubTask, Task, TaskScores

REFERENCE = "reference.py"
CLEANING = "cleaning.py"
REFERENCE_OUTPUT = "reference_output.json"
SUBTASK_SEPARATOR = "-"
"""A sub-task played on its own has the id `<task id>-<sub-task id>` (task ids are hex: no '-' of their own)."""
QUESTION_PREFIX = "Question: "
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")


def answer_metric(question: Question | None = None, **fields: Any) -> MetricSpec:
    if question is not None:
        fields = {
            "answer_type": question.answer_type,
            "decimals": question.decimals,
            "unit": question.unit,
            **fields,
        }
    return MetricSpec(name=ANSWER_METRIC, target_columns=[], key_columns=[], **fields)


def subtask(sub_id: str, sub: SubQuestion) -> tuple[SubTask, Step]:
    """A sub-question as a sub-task: its text with the answer's format, graded by its own answer type."""
    step = sub.step
    note = sub.note or format_note(step.answer_type, step.decimals, answer_in_data=sub.answer_in_data)
    metric = answer_metric(answer_type=step.answer_type, decimals=step.decimals)
    return SubTask(id=sub_id, question=f"{sub.text} Answer with {note}.", metric=metric), step


def subtasks_of(question: Question, first: int = 1) -> list[tuple[SubTask, Step]]:
    """A question's sub-questions as sub-tasks `s<first>`, `s<first + 1>`, ..."""
    return [subtask(f"s{first + i}", sub) for i, sub in enumerate(question.steps)]


@dataclass
class Posed:
    """A question posed on a set of files: everything a draft needs besides the files themselves."""

    question: Question
    load: str
    instruction: str
    spec: dict[str, Any]
    subtasks: list[tuple[SubTask, Step]] = field(default_factory=list)
    cleaning: str | None = None
    operations: list[str] = field(default_factory=list)
    joins_files: bool = False
    visible_table: pd.DataFrame | None = None
    """The public table as pandas reads it, when the builder has it at hand (else the public files are read)."""

    @property
    def reference(self) -> Reference:
        q = self.question
        return Reference(
            load=self.load,
            main=Step(q.body, q.answer_type, q.decimals),
            subtasks={sub.id: step for sub, step in self.subtasks},
            cleaning=self.cleaning,
        )

    @property
    def script(self) -> str:
        return self.reference.script

    @property
    def spec_key(self) -> str:
        """The task's spec as stored (private, like an IF spec): the choices and the reference's code parts, so
        the reference (and a gold trajectory) can be rebuilt from the record alone."""
        record = {**self.spec, "version": QUESTIONS_VERSION, "reference": self.reference.as_dict()}
        return json.dumps(record, sort_keys=True, default=str)


@dataclass(frozen=True)
class Guessing:
    """What a guesser tries on a drafted question and the score that passes: `answers(public, texts)` are the
    family's trivial answers (by name, each an answer document `{"answer": value}`) to a question whose texts
    are `texts`, posed on the files in `public`; `bar` is the family's pass bar."""

    answers: Callable[[Path, list[str]], Mapping[str, Any]]
    bar: float

    def passing(self, posed: Posed, answer: Any, public: Path) -> str | None:
        """Why a guess answers the question (the first trivial answer that reaches the bar), or None."""
        metric = answer_metric(posed.question)
        for name, submission in self.answers(public, texts_of(posed)).items():
            score = grade(metric, submission, {"answer": answer}).score
            if score >= self.bar:
                return f"a guess answers it: {name} scores {score:.3f} (pass bar {self.bar:g})"
        return None


def texts_of(posed: Posed) -> list[str]:
    """What a guesser reads of a posed question: its instruction and its sub-questions."""
    return [posed.instruction, *(sub.question for sub, _ in posed.subtasks)]


def fill_question(
    ctx: RunContext,
    runners: Runners,
    posed: Posed,
    stage: Callable[[Draft], Path],
    guessing: Guessing,
) -> Callable[[Draft], None]:
    """The `fill` of a question task; `stage(draft)` writes the public files and returns the clean files' folder;
    a question a guess answers (`guessing`) is rejected like a degenerate one."""

    def fill(draft: Draft) -> None:
        clean = stage(draft)
        seconds, output, problem = certify_answer(runners, draft, posed, clean)
        if problem is None:
            problem = degenerate(posed, output)
        if problem is None:
            problem = guessing.passing(posed, output["answer"], draft.public)
        difficulty = None
        if problem is None:
            _write_private(draft, posed, output)
            difficulty = difficulty_of(posed, output["answer"], draft.public)
        else:
            for side in (draft.public, draft.private):
                shutil.rmtree(side)
                side.mkdir()
        draft.fields = {
            "instruction": posed.instruction,
            "metric": answer_metric(posed.question),
            "limits": limits_of(ctx),
            "scores": TaskScores(reference_seconds=seconds),
            "spec": posed.spec_key,
            "subtasks": [sub for sub, _ in posed.subtasks],
            "difficulty": difficulty,
            "operations": posed.operations,
            "status": "rejected" if problem else "candidate",
            "reject_reason": problem,
        }

    return fill


def difficulty_of(posed: Posed, answer: Any, public: Path) -> Difficulty:
    """The tier of a certified question (`tiers`): the one-step baseline runs on the public table, or on the
    public files when the builder did not hand it over."""
    frames = [posed.visible_table] if posed.visible_table is not None else visible_frames(public)
    shortcut = shortcut_solves(answer_metric(posed.question), answer, frames)
    return tier(posed.operations, posed.joins_files, bool(posed.subtasks), shortcut)


def _copy_folder(source: Path, target: Path) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    return target


def _last_line(error: str | None) -> str:
    lines = [line for line in (error or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no error message"


def certify_answer(
    runners: Runners, draft: Draft, posed: Posed, clean: Path
) -> tuple[float, dict[str, Any], str | None]:
    """(CPU seconds of the runs, the first run's answer.json, why the task must be rejected or None)."""
    script = posed.script
    folders = {name: _copy_folder(clean, draft.folder / f"run-{name}") for name in ("main", "twin")}
    runners.main.submit(script, folders["main"])
    runners.twin.submit(script, folders["twin"])
    outcomes = {"main": runners.main.collect(), "twin": runners.twin.collect()}
    if posed.cleaning is not None:
        folders["public"] = _copy_folder(draft.public, draft.folder / "run-public")
        outcomes["public"] = runners.main.run(with_cleaning(posed.cleaning, script), folders["public"])
    seconds = sum(o.cpu_seconds for o in outcomes.values())
    texts = {}
    for name, outcome in outcomes.items():
        if not outcome.ok:
            return seconds, {}, f"reference failed in the {name} run: {_last_line(outcome.error)}"
        path = folders[name] / ANSWER_FILE
        if not path.exists():
            return seconds, {}, f"reference wrote no {ANSWER_FILE} in the {name} run"
        texts[name] = path.read_bytes()
    output = json.loads(texts["main"])
    if texts["twin"] != texts["main"]:
        return seconds, output, "not deterministic: the twin run's answer.json differs from the first run's"
    if "public" in texts:
        public = json.loads(texts["public"])
        for key in ("answer", "subtasks"):
            if public[key] != output[key]:
                return (
                    seconds,
                    output,
                    f"the recorded cleaning step does not reproduce the {key} from the public files: "
                    f"{_short(public[key])} instead of {_short(output[key])}",
                )
    return seconds, output, None


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _empty(value: Any) -> str | None:
    if value is None:
        return "undefined (NaN or missing)"
    if value == "" or value == []:
        return "empty"
    if isinstance(value, list) and any(v is None or v == "" for v in value):
        return "a list with an undefined item"
    return None


def _defined(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def degenerate(posed: Posed, output: dict[str, Any]) -> str | None:
    """Why the answered question is degenerate, or None; see the module docstring."""
    question, answer = posed.question, output["answer"]
    if why := _empty(answer):
        return f"the answer is {why}"
    if question.answer_type == "numeric_exact" and not question.answer_in_data and answer == 0:
        return "a count of 0: a guess of 0 gets it right"
    if question.answer_type == "numeric_approximate" and answer == 0:
        return "an answer of exactly 0: its relative error is undefined"
    checks = output.get("checks") or {}
    if undefined := sorted(name for name, value in checks.items() if not _defined(value)):
        # A statistic over a group with no values (a first difference in its base year) is NaN, and arrives
        # as null: the program's own test cannot compare it, and the question has no sound answer.
        return f"its checks are undefined (NaN or missing): {', '.join(undefined)}"
    if why := PROGRAMS[question.program].problem(checks) or shared_problem(checks):
        return why
    if shown := visible(answer, texts_of(posed)):
        return f"the answer ({shown}) appears in the question or a sub-question"
    for sub, _ in posed.subtasks:
        value = output["subtasks"].get(sub.id)
        if why := _empty(value):
            return f"sub-task {sub.id}'s answer is {why}"
        if shown := visible(value, [sub.question]):
            return f"sub-task {sub.id}'s answer ({shown}) appears in its question"
    return None


def stated_numbers(texts: list[str]) -> list[float]:
    """The numbers written in `texts` (whole words: "12", "-3.5"; not the digits of a name such as "x2"), in
    order of appearance: what a reader can guess a numeric answer from without the data."""
    return [float(m) for text in texts for m in _NUMBER.findall(text)]


def visible(answer: Any, texts: list[str]) -> str | None:
    """The part of `answer` that a text states (a name as a whole word, case-insensitive; a number equal to
    one written in the text), or None. Booleans are never 'visible'."""
    items = answer if isinstance(answer, list) else [answer]
    numbers = stated_numbers(texts)
    for item in items:
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int | float):
            if any(math.isclose(item, n, rel_tol=1e-9, abs_tol=1e-12) for n in numbers):
                return repr(item)
            continue
        word = re.compile(rf"(?<!\w){re.escape(str(item).strip())}(?!\w)", re.IGNORECASE)
        if str(item).strip() and any(word.search(text) for text in texts):
            return repr(item)
    return None


def _write_private(draft: Draft, posed: Posed, output: dict[str, Any]) -> None:
    private = draft.private
    (private / REFERENCE).write_text(posed.script)
    if posed.cleaning is not None:
        (private / CLEANING).write_text(posed.cleaning)
    (private / ANSWER_FILE).write_text(json.dumps({"answer": output["answer"]}) + "\n")
    for sub, _ in posed.subtasks:
        (private / subtask_file(sub.id)).write_text(json.dumps({"answer": output["subtasks"][sub.id]}) + "\n")
    (private / REFERENCE_OUTPUT).write_text(json.dumps(output, sort_keys=True, indent=1) + "\n")


def is_subtask_id(task_id: str) -> bool:
    return SUBTASK_SEPARATOR in task_id


def subtask_task(parent: Task, sub: SubTask) -> Task:
    """A sub-task as a task of its own (KramaBench's sub-task setting): the parent's files and introduction,
    its main question for context, and the sub-question to answer, graded by the sub-task's metric against
    `subtask-<id>.json`. Never stored: built when an evaluation asks for sub-tasks."""
    lines = parent.instruction.splitlines()
    main = next((line[len(QUESTION_PREFIX) :] for line in lines if line.startswith(QUESTION_PREFIX)), "")
    intro = lines[: next((i for i, line in enumerate(lines) if line.startswith(QUESTION_PREFIX)), len(lines))]
    instruction = "\n".join(
        [
            *intro,
            f"The task's main question (do not answer it here): {main}",
            "",
            f"{QUESTION_PREFIX}{sub.question}",
            lines[-1],
        ]
    )
    return parent.model_copy(
        update={
            "id": f"{parent.id}{SUBTASK_SEPARATOR}{sub.id}",
            "instruction": instruction,
            "metric": sub.metric,
            "subtasks": [],
        }
    )
