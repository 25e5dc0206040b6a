"""QA: a question about one table (the framing's training rows), with a typed answer certified by running its
program twice; graded as KramaBench grades its answer type."""

import json

from dareforge.families.family import (
    ANSWER_PASS_BAR,
    Build,
    Family,
    Grading,
    NoVariantError,
    Words,
    any_framing,
)
from dareforge.generators.questions.question import Table
from dareforge.generators.questions.table_questions import qa_questions, qa_task, qa_tasks
from dareforge.schema import ANSWER_METRIC, Task


def _build(build: Build) -> list[Task]:
    return qa_tasks(
        build.family.name,
        build.ctx,
        build.prepared,
        build.frames[0],
        build.writer,
        build.runners,
        build.title,
    )


def redraw(build: Build, original: Task) -> Task | None:
    """The original's question drawn again on the obscured table: the same seeds over the same column order pick
    the same program and the renamed columns, thresholds come from the rescaled values, and the answer is
    computed anew on the obscured data (then certified like any question). A draw whose program or columns
    differ from the original's mapped ones is not the same question: no variant, with the reason."""
    spec = json.loads(original.spec or "{}")
    train = build.frames[0]
    for question in qa_questions(build.ctx, build.prepared, Table.of(train, build.prepared)):
        if question.program == spec.get("program") and build.maps(spec.get("params", {}), question.params):
            return qa_task(
                build.family.name,
                build.ctx,
                build.prepared,
                question,
                len(train),
                None,
                build.writer,
                build.runners,
            )
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
    build=_build,
    applies=any_framing,
    per_framing=False,
    pass_bar=ANSWER_PASS_BAR,
    variant=redraw,
    certificate_runs=2,
)
