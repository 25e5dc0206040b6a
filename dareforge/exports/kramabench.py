"""A release's question tasks (QA, Lake) in KramaBench's layout (registered as `kramabench`), so its evaluator
grades answers to them.

KramaBench (mitdbg/Kramabench) keeps a workload, `workload/<name>.json`: a list of tasks, each with `id`,
`query`, `answer`, `answer_type` (string_exact, string_approximate, numeric_exact, numeric_approximate,
list_exact, list_approximate), `data_sources` (paths under the workload's data folder) and `subtasks` (the same
fields). Its `evaluate.py` reads the files from `data/<name>/input/`, and tells sub-tasks apart by their id
having a third '-'. Our mapping (`dest` plays KramaBench's repository root):

- `workload/<name>.json`, one entry per QA or Lake task of the release: id `<name>-<family>-<task id>`, its
  sub-tasks `<id>-<n>`; `query` is our instruction without the sentence about `answer.json` (a KramaBench system
  returns its answer itself); `answer` the certified answer; a boolean answer becomes the string_exact answer
  "true" or "false" (KramaBench has no boolean type); `dareforge` records the task id, family, split, our
  own answer type, decimals and unit, and the question's tier and operations.
- `data/<name>/input/<task id>/<file>`: the task's public files, so `data_sources` are `<task id>/<file>`.

The workload holds the answers: it is as private as the private release it is cut from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dareforge.exports.export_format import ExportJob, FolderLayout, LayoutReport
from dareforge.families.registry import family_of
from dareforge.generators.questions.scripts import ANSWER_FILE, subtask_file
from dareforge.generators.questions.table_questions import ANSWER_NOTE
from dareforge.publish.release import ReleaseError
from dareforge.schema import MetricSpec, Task

KRAMABENCH_TYPES = {"boolean": "string_exact"}
"""Our answer types KramaBench lacks -> the type it grades them with; the others keep their names."""


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
    """(KramaBench answer type, answer as KramaBench compares it)."""
    kind = metric.answer_type or "string_exact"
    if kind == "boolean":
        return KRAMABENCH_TYPES[kind], "true" if answer else "false"
    return KRAMABENCH_TYPES.get(kind, kind), answer


def krama_query(instruction: str) -> str:
    """Our instruction as a KramaBench query: everything but the sentence on writing answer.json."""
    return "\n".join(line for line in instruction.splitlines() if line != ANSWER_NOTE).strip()


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
                target.write_bytes(release.store.read_bytes(f"{release.prefix}/files/{task.id}/{f.name}"))
                sources.append(f"{task.id}/{f.name}")
            entries.append(_entry(release, task, WORKLOAD, sources, sides.get(task.id)))
            report.tasks.append(task.id)
            report.subtasks += len(task.subtasks)
        path = workload_file(folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entries, indent=2, ensure_ascii=False) + "\n")
        return report


def _answer(release, task: Task, name: str) -> Any:
    key = f"{release.private_prefix}/answers/{task.id}/{name}"
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
                "query": sub.question,
                "answer": sub_answer,
                "answer_type": sub_kind,
                "data_sources": sources,
            }
        )
    return {
        "id": ident,
        "query": krama_query(task.instruction),
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
