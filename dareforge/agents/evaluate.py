"""Evaluate an LLM endpoint as a data-science agent on a release's tasks, DARE-bench style.

`evaluate` plays every (task, sample) of the chosen split with `run_agent`, grades the predictions on the host
against the private half of the release, stores each trajectory in the `trajectories` table (partition
`<endpoint>--<release>`, so endpoints can be compared with SQL) and returns an `EvaluationReport`: per family the
share of attempts that passed and the mean score, and counts of every outcome. With `subtasks=True` each Lake
task's sub-tasks are also played as tasks of their own (id `<task>-<sub-task>`, KramaBench's sub-task setting)
and reported in their own column, `Lake-sub`.

It is idempotent: a trajectory's id hashes task id, endpoint, model, temperature and sample, and a stored id is
not played again (pass `rerun_llm_errors=True` to replay attempts the endpoint failed). Each finished trajectory
is written at once, so an interrupted evaluation resumes where it stopped.
"""

from __future__ import annotations

import logging
import typing
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from dareforge.agents.attempts import (
    Attempt,
    AttemptSettings,
    attempts_for,
    episode_workers,
    make_client,
    release_subtask_files,
    release_task_files,
    run_attempts,
)
from dareforge.agents.grading import PASS_BARS
from dareforge.agents.loop import SandboxFactory
from dareforge.config import EndpointConfig
from dareforge.context import RunContext
from dareforge.errors import DareforgeError
from dareforge.families.registry import families, family_named
from dareforge.generators.questions.build import is_subtask_id, subtask_task
from dareforge.llm.endpoints import find_endpoint
from dareforge.publish.release import Release, load_release
from dareforge.queries import partition_name
from dareforge.schema import Outcome, Task, Trajectory
from dareforge.store import Store

log = logging.getLogger(__name__)

SUBTASK_COLUMN = "Lake-sub"


def columns() -> tuple[str, ...]:
    """The result table's columns: each family as DARE-bench's tables call it (QA and Lake are ours), a Lake's
    sub-tasks, and the total."""
    return (*(f.column for f in families()), SUBTASK_COLUMN, "total")


OUTCOMES = typing.get_args(Outcome)
SPLIT_CHOICES = ("train", "test", "all")


class EvaluationError(DareforgeError):
    pass


@dataclass(frozen=True)
class Cell:
    """One family's results: attempts, how many passed, and the mean score (failures count as 0)."""

    attempts: int = 0
    passed: int = 0
    score_sum: float = 0.0

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.attempts if self.attempts else None

    @property
    def mean_score(self) -> float | None:
        return self.score_sum / self.attempts if self.attempts else None


@dataclass
class EvaluationReport:
    endpoint: str
    model: str
    release: str
    version: str
    split: str
    samples: int
    temperature: float
    partition: str
    trajectories: list[Trajectory]
    ran: int = 0
    reused: int = 0
    pass_bars: Mapping[str, float] = field(default_factory=lambda: dict(PASS_BARS))

    @property
    def cells(self) -> dict[str, Cell]:
        """Column name (Class-IF ... Time-CF, total) -> Cell; families without tasks have 0 attempts."""
        cells = {c: Cell() for c in columns()}
        for t in self.trajectories:
            score = t.score if t.score is not None and t.score == t.score else 0.0
            family = SUBTASK_COLUMN if is_subtask_id(t.task_id) else family_named(t.family).column
            for column in (family, "total"):
                old = cells.get(column, Cell())
                cells[column] = Cell(
                    old.attempts + 1, old.passed + int(bool(t.passed)), old.score_sum + score
                )
        return cells

    @property
    def outcomes(self) -> Counter:
        """Outcome -> count, every outcome present (zeros included)."""
        counts = Counter({o: 0 for o in OUTCOMES})
        counts.update(t.outcome for t in self.trajectories)
        return counts

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_tokens for t in self.trajectories)

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens for t in self.trajectories)

    def row(self) -> dict[str, Any]:
        """One flat row (for CSV/JSON): `<column> pass`, `<column> score`, `<column> n`, outcome counts."""
        row: dict[str, Any] = {"endpoint": self.endpoint, "model": self.model}
        for column, cell in self.cells.items():
            row[f"{column} pass"] = cell.pass_rate
            row[f"{column} score"] = cell.mean_score
            row[f"{column} n"] = cell.attempts
        row.update(self.outcomes)
        row.update(prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens)
        return row


def render_table(reports: EvaluationReport | Sequence[EvaluationReport]) -> Table:
    """Rows = endpoints; each family cell is "pass% · mean score (n)"; then one column per outcome."""
    reports = [reports] if isinstance(reports, EvaluationReport) else list(reports)
    first = reports[0] if reports else None
    title = f"{first.release}@{first.version} {first.split}" if first else "evaluation"
    table = Table(title=title, caption="pass rate · mean score (attempts); failures score 0")
    table.add_column("endpoint", style="bold")
    for column in columns():
        table.add_column(column, justify="right")
    for outcome in OUTCOMES:
        table.add_column(outcome, justify="right")
    for report in reports:
        cells = report.cells
        outcomes = report.outcomes
        table.add_row(
            f"{report.endpoint}\n[dim]{report.model}[/]",
            *(_cell_text(cells[c]) for c in columns()),
            *(str(outcomes[o]) for o in OUTCOMES),
        )
    return table


def _cell_text(cell: Cell) -> str:
    if not cell.attempts:
        return "-"
    return f"{cell.pass_rate:.0%} · {cell.mean_score:.3f} ({cell.attempts})"


def stored_trajectories(store: Store, partition: str) -> list[Trajectory]:
    return store.read_partition(Trajectory, partition)


def split_tasks(release: Release, split: str) -> list[Task]:
    if split not in SPLIT_CHOICES:
        raise EvaluationError(f"split must be one of {', '.join(SPLIT_CHOICES)}, got {split!r}")
    sides = release.splits
    tasks = [t for t in release.tasks() if split == "all" or sides.get(t.id) == split]
    return sorted(tasks, key=lambda t: (t.family, t.id))


def evaluate(
    ctx: RunContext,
    endpoint_name: str,
    release: str = "dareforge",
    split: str = "test",
    samples: int = 1,
    concurrency: int | None = None,
    *,
    version: str | None = None,
    temperature: float = 0.0,
    pass_bars: Mapping[str, float] = PASS_BARS,
    rerun_llm_errors: bool = False,
    max_tokens: int | None = None,
    task_ids: Iterable[str] | None = None,
    sandbox_factory: SandboxFactory | None = None,
    client_factory: Callable[[EndpointConfig], Any] | None = None,
    subtasks: bool = False,
) -> EvaluationReport:
    """Run `endpoint_name` on the `split` tasks of `release` (latest version unless `version`); see the module doc.

    `samples` attempts per task (sample index 0..samples-1; use a temperature above 0 for them to differ);
    `concurrency` episodes at once (default: the endpoint's `max_concurrency`, at most the CPU count).
    """
    if samples < 1:
        raise EvaluationError(f"samples must be at least 1, got {samples}")
    endpoint = find_endpoint(ctx, endpoint_name)
    rel = load_release(ctx, release, version)
    tasks = split_tasks(rel, split)
    if task_ids is not None:
        wanted = set(task_ids)
        tasks = [t for t in tasks if t.id in wanted]
    if not tasks:
        raise EvaluationError(f"release {rel.name}@{rel.version} has no {split} tasks to evaluate")
    if concurrency is not None and concurrency < 1:
        raise EvaluationError(f"concurrency must be at least 1, got {concurrency}")
    workers = episode_workers(endpoint, concurrency)
    partition = partition_name(endpoint.name, rel.name)
    client = (
        client_factory(endpoint) if client_factory is not None else make_client(ctx, endpoint, "evaluate")
    )
    attempts = attempts_for(tasks, samples, lambda t: release_task_files(rel, t))
    if subtasks:
        attempts += subtask_attempts(ctx.store, rel, tasks, samples)
    settings = AttemptSettings(
        partition,
        workers,
        temperature,
        pass_bars,
        rerun_llm_errors,
        max_tokens,
        sandbox_factory,
        label="evaluate",
    )
    played = run_attempts(ctx, client, attempts, settings)
    report = EvaluationReport(
        endpoint=endpoint.name,
        model=endpoint.model,
        release=rel.name,
        version=rel.version,
        split=split,
        samples=samples,
        temperature=float(temperature),
        partition=partition,
        trajectories=played.trajectories,
        ran=played.ran,
        reused=played.reused,
        pass_bars=dict(pass_bars),
    )
    log.info(
        "evaluate %s on %s@%s %s: %d run, %d reused",
        endpoint.name,
        rel.name,
        rel.version,
        split,
        report.ran,
        report.reused,
    )
    return report


def subtask_attempts(store: Store, release: Release, tasks: Iterable[Task], samples: int) -> list[Attempt]:
    """Each sub-task of each Lake task as an attempt of its own, graded against its certified answer."""
    return [
        Attempt(
            subtask_task(task, sub),
            sample,
            release_subtask_files(release, task, sub.id),
        )
        for task in tasks
        for sub in task.subtasks
        for sample in range(samples)
    ]
