"""Lake: a question over a folder of files (the framing's rows split or joined, made untidy, among other
sources' files), with sub-tasks, KramaBench-style; its answer is certified on the clean files and again on the
public ones behind the cleaning step."""

from dareforge.families.family import ANSWER_PASS_BAR, Build, Family, Grading, Words, any_framing
from dareforge.generators.questions.folder_questions import lake_tasks
from dareforge.schema import ANSWER_METRIC, Task


def _build(build: Build) -> list[Task]:
    return lake_tasks(
        build.family.name, build.ctx, build.prepared, build.others, build.writer, build.runners, build.title
    )


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
    build=_build,
    applies=any_framing,
    per_framing=False,
    pass_bar=ANSWER_PASS_BAR,
    no_variant="their folder mixes several sources, each with its own map",
    certificate_runs=3,
)
