"""A release's question tasks (QA, Lake) in KramaBench's layout (registered as `kramabench`), so its evaluator
grades answers to them.

KramaBench (mitdbg/Kramabench) keeps a workload, `workload/<name>.json`: a list of tasks, each with `id`,
`query`, `answer`, `answer_type` (string_exact, string_approximate, numeric_exact, numeric_approximate,
list_exact, list_approximate), `data_sources` (paths under the workload's data folder) and `subtasks` (the same
fields). Its `evaluate.py` reads the files from `data/<name>/input/`, and tells sub-tasks apart by their id
having a third '-'. Our mapping (`dest` plays KramaBench's repository root):

- `workload/<name>.json`, one entry per QA or Lake task of the release: id `<name>-<family>-<task id>`, its
  sub-tasks `<id>-<n>`; `query` is our instruction without the sentence about `answer.json` (a KramaBench system
  returns its answer itself), opened by a sentence naming the task's files by their paths in the input folder
  (`<task id>/data.csv`): KramaBench hands a system only the query and its id, and every task's folder holds
  files of the same names, so the query must say which are meant (every sub-task's query opens the same way);
  `answer` the certified answer, typed as KramaBench's metrics compare it (`krama_answer`); `dareforge`
  records the task id, family, split, our own answer type, decimals and unit, and the question's tier and
  operations.
- `data/<name>/input/<task id>/<file>`: the task's public files, so `data_sources` are `<task id>/<file>`.

How answers are typed (KramaBench's `benchmark/metrics.py`): `success` compares texts case-insensitively after
`strip()`, numbers numerically; list `f1`/`precision`/`recall` compare a text item with `str()` of the predicted
item, case-insensitively. So a boolean answer becomes the string_exact answer "true" or "false" (KramaBench
has no boolean type, and its `success` scores a JSON `true` against the text "true" 0, so the query asks for
the text: `BOOLEAN_NOTE`), and a list_exact answer's booleans and numbers go over as their text ("true",
"2003", "12.5"), which a system answering the numbers matches too. Numbers in lists are a known fault of
KramaBench's: in its June 2025 code F1 finds a number item but never counts it toward precision, so an exact
list of numbers scores 0, and precision and recall fail on a number item (they `strip()` it); in its later code
they divide by a number item, so a 0 fails them. list_approximate keeps its numbers (there a text item goes to
an LLM judge and a number is matched within a tolerance; no question of ours asks for one). Its June 2025
`Evaluator` also casts both answers to `str()` before any metric, so a list is graded character by character
and even the gold list scores below 1 there (0.76 for `["a.csv", "b.csv"]`): nothing in the export can mend
that (its later evaluator passes answers as they are).

The workload holds the answers: it is as private as the private release it is cut from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dareforge.exports.export_format import ExportJob, FolderLayout, LayoutReport
from dareforge.families.registry import family_of
from dareforge.generators.questions.question import format_note
from dareforge.generators.questions.scripts import ANSWER_FILE, subtask_file
from dareforge.generators.questions.table_questions import ANSWER_NOTE
from dareforge.publish.release import ReleaseError
from dareforge.schema import MetricSpec, Task

KRAMABENCH_TYPES = {"boolean": "string_exact"}
"""Our answer types KramaBench lacks -> the type it grades them with; the others keep their names."""

BOOLEAN_NOTE = 'the JSON string "true" or "false"'
"""How a boolean question asks for its answer in KramaBench (ours ask for a JSON boolean): its `success` metric
scores a JSON `true` against the text "true" 0 (it refuses a number or boolean against a text target)."""


WORKLOAD = "dareforge"
"""The workload's name: its file, its data folder, and the prefix of its task ids."""


def workload_file(root: Path) -> Path:
    return root / "workload" / f"{WORKLOAD}.json"


@dataclass
class KramaBenchReport(LayoutReport):
    tasks: list[str] = field(default_factory=list)
    subtasks: int = 0

    @property
    def workload(self) -> Path:
        return workload_file(self.dest)

    def summary(self) -> list[str]:
        return [
            f"exported {len(self.tasks)} QA/Lake tasks ({self.subtasks} sub-tasks) of {self.release.name} to "
            f"{self.dest}: workload {self.workload}"
        ]


def krama_answer(metric: MetricSpec, answer: Any) -> tuple[str, Any]:
    """(KramaBench answer type, answer as KramaBench's metrics compare it): see the module doc."""
    kind = metric.answer_type or "string_exact"
    if kind == "boolean" or isinstance(answer, bool):
        return KRAMABENCH_TYPES.get(kind, kind), _text(answer)
    if kind == "list_exact" and isinstance(answer, list):
        return kind, [item if isinstance(item, str) else _text(item) for item in answer]
    return KRAMABENCH_TYPES.get(kind, kind), answer


def _text(value: Any) -> str:
    """A value as KramaBench compares it with a text target (`str()`, case-insensitively): booleans lower-case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def krama_query(instruction: str, sources: list[str], metric: MetricSpec) -> str:
    """Our instruction (or sub-question) as a KramaBench query: opened by the sentence naming the task's files
    (`files_note`), without the sentence on writing answer.json, a boolean asked for as text (`BOOLEAN_NOTE`)."""
    text = "\n".join(line for line in instruction.splitlines() if line != ANSWER_NOTE).strip()
    if metric.answer_type == "boolean":
        text = text.replace(format_note("boolean"), BOOLEAN_NOTE)
    return f"{files_note(sources)}\n\n{text}"


def files_note(sources: list[str]) -> str:
    """Which files of KramaBench's input folder a query is about, by their paths there (`<task id>/<file>`)."""
    folders = sorted({s.split("/", 1)[0] for s in sources})
    paths = ", ".join(f"`{s}`" for s in sources)
    if len(folders) != 1:
        return f"This question's files, by their paths in the input folder: {paths}."
    (folder,) = folders
    return (
        f"This question's files are in the folder `{folder}/` of the input folder: {paths}. "
        f"A file named below without a folder is the one in `{folder}/`."
    )


class KramaBenchLayout(FolderLayout):
    def write(self, job: ExportJob, folder: Path) -> KramaBenchReport:
        """The question tasks of the job's release in KramaBench's layout (see the module doc)."""
        release = job.release
        sides = release.splits
        report = KramaBenchReport(release, Path(job.dest))
        entries = []
        questions = []
        for task in release.tasks():
            if family_of(task).asks_question:
                questions.append(task)
            else:
                report.skipped[task.id] = (
                    f"a {task.family} task asks for predictions; KramaBench grades one answer"
                )
        for task in sorted(questions, key=lambda t: (t.family, t.id)):
            sources = []
            for f in task.public_files:
                target = folder / "data" / WORKLOAD / "input" / task.id / f.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(release.store.read_bytes(f"{release.files_dir(task.id)}/{f.name}"))
                sources.append(f"{task.id}/{f.name}")
            entries.append(_entry(release, task, WORKLOAD, sources, sides.get(task.id)))
            report.tasks.append(task.id)
            report.subtasks += len(task.subtasks)
        path = workload_file(folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entries, indent=2, ensure_ascii=False) + "\n")
        return report


def _answer(release, task: Task, name: str) -> Any:
    key = f"{release.answers_dir(task.id)}/{name}"
    if not release.store.exists(key):
        raise ReleaseError(f"task {task.id} has no {name} in the private release {release.private_prefix}")
    return json.loads(release.store.read_bytes(key))["answer"]


def _entry(release, task: Task, workload: str, sources: list[str], split: str | None) -> dict[str, Any]:
    ident = f"{workload}-{task.family.lower()}-{task.id}"
    kind, answer = krama_answer(task.metric, _answer(release, task, ANSWER_FILE))
    subtasks = []
    for n, sub in enumerate(task.subtasks, start=1):
        sub_kind, sub_answer = krama_answer(sub.metric, _answer(release, task, subtask_file(sub.id)))
        subtasks.append(
            {
                "id": f"{ident}-{n}",
                "query": krama_query(sub.question, sources, sub.metric),
                "answer": sub_answer,
                "answer_type": sub_kind,
                "data_sources": sources,
            }
        )
    return {
        "id": ident,
        "query": krama_query(task.instruction, sources, task.metric),
        "answer": answer,
        "answer_type": kind,
        "data_sources": sources,
        "subtasks": subtasks,
        "dareforge": {
            "task_id": task.id,
            "family": task.family,
            "split": split,
            "answer_type": task.metric.answer_type,
            "decimals": task.metric.decimals,
            "unit": task.metric.unit,
            "difficulty": task.difficulty,
            "operations": task.operations,
        },
    }
