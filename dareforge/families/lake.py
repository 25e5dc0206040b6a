"""Lake: a question over a folder of files (the framing's rows split or joined, made untidy, among other
sources' files), with sub-tasks, KramaBench-style; its answer is certified on the clean files and again on the
public ones behind the cleaning step."""

from collections.abc import Callable
from functools import partial
from pathlib import Path

from dareforge.families.family import (
    ANSWER_PASS_BAR,
    QUESTIONS,
    Build,
    Family,
    Grading,
    Words,
    any_framing,
    until_accepted,
)
from dareforge.families.trivial import question_guesses, question_trivial
from dareforge.generators.questions.build import Guessing, Posed, fill_question
from dareforge.generators.questions.folder_questions import lake_questions
from dareforge.generators.taskio import Draft
from dareforge.schema import ANSWER_METRIC, Task


def lake_tasks(build: Build) -> list[Task]:
    """Up to `generate.lakes_per_source` lakes on the framing (see `lake_questions`)."""
    ctx = build.ctx
    # The gate's trivial answers, asked at the draw: a lake a guess answers is refused and another drawn.
    guessing = Guessing(question_guesses, build.family.pass_bar)

    def draft(posed: Posed, stage: Callable[[Draft], Path]) -> Task | None:
        fill = fill_question(ctx, build.runners, posed, stage, guessing)
        return build.writer.build(build.family.name, ctx.config.generate.seed, posed.spec_key, fill)

    lakes = lake_questions(ctx, build.prepared, build.others, build.title)
    return until_accepted(ctx.config.generate.lakes_per_source, (partial(draft, *lake) for lake in lakes))


FAMILY = Family(
    name="Lake",
    kind=None,
    grading=Grading.ANSWER,
    metrics=(ANSWER_METRIC,),
    words=Words(
        asks="a question over a folder of files, typed answer, with sub-tasks",
        agent="finds the needed files among distractors, cleans and joins them, writes answer.json",
        hub_category="table-question-answering",
    ),
    build=lake_tasks,
    applies=any_framing,
    trivial=question_trivial,
    needs=QUESTIONS,
    per_framing=False,
    pass_bar=ANSWER_PASS_BAR,
    no_variant="their folder mixes several sources, each with its own map",
    certificate_runs=3,
)
