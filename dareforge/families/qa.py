"""QA: a question about one table (the framing's training rows, published as `data.csv`), with a typed answer
certified by running its program twice; graded as KramaBench grades its answer type."""

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path

from dareforge.families.family import (
    ANSWER_PASS_BAR,
    QUESTIONS,
    Build,
    Family,
    Grading,
    NoVariantError,
    Words,
    any_framing,
    until_accepted,
)
from dareforge.families.trivial import question_guesses, question_trivial
from dareforge.generators.prepare import prepared_file
from dareforge.generators.questions.build import Guessing, fill_question
from dareforge.generators.questions.programs import PROGRAMS
from dareforge.generators.questions.question import Question, Table
from dareforge.generators.questions.table_questions import DATA, kind_questions, qa_questions, table_posed
from dareforge.generators.taskio import Draft
from dareforge.schema import ANSWER_METRIC, Task


def ask(build: Build, question: Question, title: str | None) -> Task | None:
    """Pose `question` on the framing's training rows and certify its answer (`title` None: an obscured
    variant, which names no dataset)."""
    posed = table_posed(question, build.frames[0], title)

    def stage(draft: Draft) -> Path:
        (draft.public / DATA).write_bytes(prepared_file(build.ctx, build.prepared, "train.csv").read_bytes())
        return draft.public

    # The gate's trivial answers, asked at the draw: a question a guess answers is refused and another drawn.
    guessing = Guessing(question_guesses, build.family.pass_bar)
    fill = fill_question(build.ctx, build.runners, posed, stage, guessing)
    return build.writer.build(build.family.name, build.ctx.config.generate.seed, posed.spec_key, fill)


def qa_tasks(build: Build) -> list[Task]:
    """Up to `generate.qa_per_source` questions on the framing's training rows (see `qa_questions`), then one
    question about each kind of column the table holds that none of them asked about (dates, free text, row
    keys: `kind_questions`), where one can be asked."""
    table = Table.of(build.frames[0], build.prepared)
    cap = build.ctx.config.generate.qa_per_source
    tasks = until_accepted(cap, _drafts(build, qa_questions(build.ctx, build.prepared, table)))
    for kind in sorted(table.kinds() - _kinds_asked(tasks)) if cap else []:
        known = {t.id for t in tasks}
        more = until_accepted(1, _drafts(build, kind_questions(build.ctx, build.prepared, table, kind)))
        tasks += [t for t in more if t.id not in known]
    return tasks


def _drafts(build: Build, questions: Iterable[Question]) -> Iterator[Callable[[], Task | None]]:
    return (partial(ask, build, question, build.title) for question in questions)


def _kinds_asked(tasks: list[Task]) -> set[str]:
    """The column kinds the accepted candidates' programs ask about."""
    programs = [json.loads(t.spec or "{}").get("program") for t in tasks if t.status == "candidate"]
    return {PROGRAMS[p].kind for p in programs if p in PROGRAMS and PROGRAMS[p].kind}


def redraw(build: Build, original: Task) -> Task | None:
    """The original's question drawn again on the obscured table: the same seeds over the same column order pick
    the same program and the renamed columns, thresholds come from the rescaled values, and the answer is
    computed anew on the obscured data (then certified like any question). A draw whose program or columns
    differ from the original's mapped ones is not the same question: no variant, with the reason."""
    spec = json.loads(original.spec or "{}")
    table = Table.of(build.frames[0], build.prepared)
    drawn = itertools.chain(
        qa_questions(build.ctx, build.prepared, table),
        *(kind_questions(build.ctx, build.prepared, table, kind) for kind in sorted(table.kinds())),
    )
    for question in drawn:
        if question.program == spec.get("program") and build.maps(spec.get("params", {}), question.params):
            return ask(build, question, None)
    raise NoVariantError(
        f"no question drawn on the obscured table is the original's {spec.get('program')!r} question on its mapped "
        "columns (a column the program needs changed kind under the map, e.g. a year column renamed)"
    )


FAMILY = Family(
    name="QA",
    kind=None,
    grading=Grading.ANSWER,
    metrics=(ANSWER_METRIC,),
    words=Words(
        asks="a question about one table, typed answer",
        agent="computes one answer from `data.csv`, writes answer.json",
        hub_category="table-question-answering",
    ),
    build=qa_tasks,
    applies=any_framing,
    trivial=question_trivial,
    needs=QUESTIONS,
    per_framing=False,
    pass_bar=ANSWER_PASS_BAR,
    variant=redraw,
    certificate_runs=2,
)
