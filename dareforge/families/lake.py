"""Lake: a question over a folder of files (the framing's rows split or joined, made untidy, among other
sources' files), with sub-tasks, KramaBench-style; its answer is certified on the clean files and again on the
public ones behind the cleaning step."""

from dareforge.families.family import ANSWER_PASS_BAR, Build, Family, Grading, Words, any_framing
from dareforge.generators.questions.build import fill_question
from dareforge.generators.questions.folder_questions import lake_questions
from dareforge.schema import ANSWER_METRIC, Task


def lake_tasks(build: Build) -> list[Task]:
    """Up to `generate.lakes_per_source` lakes on the framing (see `lake_questions`); degenerate candidates are
    stored as rejected tasks with their reason."""
    ctx = build.ctx
    cap = ctx.config.generate.lakes_per_source
    tasks: dict[str, Task] = {}
    accepted = 0
    for posed, stage in lake_questions(ctx, build.prepared, build.others, build.title):
        if accepted >= cap:
            break
        fill = fill_question(ctx, build.runners, posed, stage)
        task = build.writer.build(build.family.name, ctx.config.generate.seed, posed.spec_key, fill)
        if task is not None and task.id not in tasks:
            tasks[task.id] = task
            accepted += task.status == "candidate"
    return list(tasks.values())


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
    per_framing=False,
    pass_bar=ANSWER_PASS_BAR,
    no_variant="their folder mixes several sources, each with its own map",
    certificate_runs=3,
)
