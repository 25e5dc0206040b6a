"""Evaluate an LLM endpoint as a data-science agent on a release's tasks, DARE-bench style.

`evaluate` plays every (task, sample) of the chosen split with `run_agent`, grades the predictions on the host
against the private half of the release, stores each trajectory in the `trajectories` table (partition
`<endpoint>--<release>`, so endpoints can be compared with SQL) and returns an `EvaluationReport`: per family the
share of attempts that passed and the mean score, and counts of every outcome.

It is idempotent: a trajectory's id hashes task id, endpoint, model, temperature and sample, and a stored id is
not played again (pass `rerun_llm_errors=True` to replay attempts the endpoint failed). Each finished trajectory
is written at once, so an interrupted evaluation resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import tempfile
import typing
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from dareforge.agents.grading import PASS_BARS, answers_file
from dareforge.agents.loop import SandboxFactory, run_agent, trajectory_id
from dareforge.config import EndpointConfig
from dareforge.context import RunContext
from dareforge.errors import ConfigError, DareforgeError
from dareforge.publish.release import Release, load_release
from dareforge.schema import Outcome, Task, Trajectory
from dareforge.store import Store

log = logging.getLogger(__name__)

FAMILY_COLUMNS: Mapping[str, str] = {
    "Class-IF": "Class-IF",
    "Class-MM": "Class-MM",
    "Reg-IF": "Reg-IF",
    "Reg-MM": "Reg-MM",
    "TS-XF": "Time-XF",
    "TS-CF": "Time-CF",
}
"""Task family -> the column DARE-bench's tables call it."""
COLUMNS = (*FAMILY_COLUMNS.values(), "total")
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
        cells = {c: Cell() for c in COLUMNS}
        for t in self.trajectories:
            score = t.score if t.score is not None and t.score == t.score else 0.0
            for column in (FAMILY_COLUMNS.get(t.family, t.family), "total"):
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
    for column in COLUMNS:
        table.add_column(column, justify="right")
    for outcome in OUTCOMES:
        table.add_column(outcome, justify="right")
    for report in reports:
        cells = report.cells
        outcomes = report.outcomes
        table.add_row(
            f"{report.endpoint}\n[dim]{report.model}[/]",
            *(_cell_text(cells[c]) for c in COLUMNS),
            *(str(outcomes[o]) for o in OUTCOMES),
        )
    return table


def _cell_text(cell: Cell) -> str:
    if not cell.attempts:
        return "-"
    return f"{cell.pass_rate:.0%} · {cell.mean_score:.3f} ({cell.attempts})"


def find_endpoint(ctx: RunContext, name: str) -> EndpointConfig:
    endpoints = ctx.config.llm.endpoints
    if not endpoints:
        raise ConfigError(
            "no LLM endpoints are configured; add one under `llm.endpoints` in dareforge.yaml "
            "(name, base_url, model; api_key_env for hosted APIs)"
        )
    for endpoint in endpoints:
        if endpoint.name == name:
            return endpoint
    known = ", ".join(repr(e.name) for e in endpoints)
    raise ConfigError(f"no endpoint named {name!r} under `llm.endpoints` (configured: {known})")


def partition_name(endpoint: str, release: str) -> str:
    """The `trajectories` partition of one endpoint on one release (a safe file name)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{endpoint}--{release}")


def stored_trajectories(store: Store, partition: str) -> list[Trajectory]:
    return store.read_partition(Trajectory, partition)


def default_sandbox_factory(ctx: RunContext, workers: int) -> tuple[SandboxFactory, Callable[[], None]]:
    """Sandboxes from a `KernelPool` of `sandbox.pool_size` kernels (at most `workers`); cold starts when 0.

    Returns the factory and the function that closes the pool.
    """
    from dareforge.sandbox import KernelPool, Sandbox

    config = ctx.config.sandbox
    size = min(config.pool_size, workers)
    if size <= 0:

        def cold(inputs: Path, workspace: Path, seconds: float) -> Any:
            return Sandbox(inputs, workspace, config, seconds)

        return cold, lambda: None
    pool = KernelPool(config, size)

    def pooled(inputs: Path, workspace: Path, seconds: float) -> Any:
        return pool.acquire(inputs, workspace, seconds_per_execution=seconds)

    return pooled, pool.close


def select_tasks(release: Release, split: str) -> list[Task]:
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
) -> EvaluationReport:
    """Run `endpoint_name` on the `split` tasks of `release` (latest version unless `version`); see the module doc.

    `samples` attempts per task (sample index 0..samples-1; use a temperature above 0 for them to differ);
    `concurrency` episodes at once (default: the endpoint's `max_concurrency`, at most the CPU count).
    """
    if samples < 1:
        raise EvaluationError(f"samples must be at least 1, got {samples}")
    endpoint = find_endpoint(ctx, endpoint_name)
    rel = load_release(ctx, release, version)
    tasks = select_tasks(rel, split)
    if task_ids is not None:
        wanted = set(task_ids)
        tasks = [t for t in tasks if t.id in wanted]
    if not tasks:
        raise EvaluationError(f"release {rel.name}@{rel.version} has no {split} tasks to evaluate")
    workers = concurrency or min(endpoint.max_concurrency, os.cpu_count() or 1)
    if workers < 1:
        raise EvaluationError(f"concurrency must be at least 1, got {workers}")
    partition = partition_name(endpoint.name, rel.name)
    report = asyncio.run(
        _evaluate(
            ctx,
            endpoint,
            rel,
            tasks,
            split=split,
            samples=samples,
            workers=workers,
            temperature=temperature,
            pass_bars=pass_bars,
            rerun_llm_errors=rerun_llm_errors,
            max_tokens=max_tokens,
            partition=partition,
            sandbox_factory=sandbox_factory,
            client_factory=client_factory,
        )
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


async def _evaluate(
    ctx: RunContext,
    endpoint: EndpointConfig,
    release: Release,
    tasks: list[Task],
    *,
    split: str,
    samples: int,
    workers: int,
    temperature: float,
    pass_bars: Mapping[str, float],
    rerun_llm_errors: bool,
    max_tokens: int | None,
    partition: str,
    sandbox_factory: SandboxFactory | None,
    client_factory: Callable[[EndpointConfig], Any] | None,
) -> EvaluationReport:
    store = ctx.store
    stored = {t.id: t for t in await asyncio.to_thread(stored_trajectories, store, partition)}
    todo: list[tuple[Task, int]] = []
    results: dict[str, Trajectory] = {}
    for task in tasks:
        for sample in range(samples):
            tid = trajectory_id(task.id, endpoint.name, endpoint.model, temperature, sample)
            old = stored.get(tid)
            if old is not None and not (rerun_llm_errors and old.outcome == "llm-error"):
                results[tid] = old
            else:
                todo.append((task, sample))
    reused = len(results)
    write_lock = asyncio.Lock()
    limit = asyncio.Semaphore(workers)
    if client_factory is not None:
        client = client_factory(endpoint)
    else:
        from dareforge.llm import LLMClient

        run_id = f"evaluate-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-{endpoint.name}"
        client = LLMClient(endpoint, store, run_id, cache=ctx.config.llm.cache)

    async def one(task: Task, sample: int, executor: ThreadPoolExecutor, progress: Any, bar: Any) -> None:
        async with limit:
            with tempfile.TemporaryDirectory(prefix="dareforge-eval-") as tmp:
                public_dir, answers = await asyncio.to_thread(_materialize, store, release, task, Path(tmp))
                trajectory = await run_agent(
                    task,
                    public_dir,
                    client,
                    sandbox_factory,
                    temperature=temperature,
                    sample=sample,
                    answers=answers,
                    pass_bars=pass_bars,
                    max_tokens=max_tokens,
                    executor=executor,
                )
        async with write_lock:
            stored[trajectory.id] = trajectory
            results[trajectory.id] = trajectory
            records = sorted(stored.values(), key=lambda t: t.id)
            await asyncio.to_thread(store.write_records, partition, records)
        progress.update(bar, advance=1, item=f"{task.family} {task.id}: {trajectory.outcome}")

    close_pool: Callable[[], None] | None = None
    if sandbox_factory is None and todo:
        sandbox_factory, close_pool = default_sandbox_factory(ctx, workers)
    with (
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dareforge-sandbox") as executor,
        ctx.progress() as progress,
    ):
        bar = progress.add_task(f"evaluate {endpoint.name}", total=len(todo), item="")
        try:
            async with asyncio.TaskGroup() as group:
                for task, sample in todo:
                    group.create_task(one(task, sample, executor, progress, bar))
        except ExceptionGroup as errors:
            # Finished trajectories are stored; the first failure (a sandbox that cannot start, a damaged
            # release...) is what the caller needs to see, not a group of them.
            raise _first(errors) from None
        finally:
            if hasattr(client, "__aexit__"):
                await client.__aexit__(None, None, None)
            if close_pool is not None:
                await asyncio.to_thread(close_pool)
    order = {t.id: i for i, t in enumerate(tasks)}
    trajectories = sorted(results.values(), key=lambda t: (order.get(t.task_id, 0), t.sample))
    return EvaluationReport(
        endpoint=endpoint.name,
        model=endpoint.model,
        release=release.name,
        version=release.version,
        split=split,
        samples=samples,
        temperature=float(temperature),
        partition=partition,
        trajectories=trajectories,
        ran=len(todo),
        reused=reused,
        pass_bars=dict(pass_bars),
    )


def _first(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _materialize(store: Store, release: Release, task: Task, tmp: Path) -> tuple[Path, Path]:
    """Host paths of the task's public files and of its private answers file (never under the sandbox's dirs).

    A local store's files are used in place; a remote store's are downloaded into `tmp` (public/ and private/).
    """
    public_prefix = f"{release.prefix}/files/{task.id}"
    answers_key = f"{release.private_prefix}/answers/{task.id}/{answers_file(task)}"
    if not store.exists(answers_key):
        raise EvaluationError(
            f"{answers_key} is missing: the private half of {release.name}@{release.version} lacks the answers "
            f"of task {task.id}; rebuild the release or copy its private half into this store"
        )
    if store.is_local:
        return store.local_path(public_prefix), store.local_path(answers_key)
    public_dir = tmp / "public"
    public_dir.mkdir()
    for f in task.public_files:
        with store.open(f"{public_prefix}/{f.name}") as src, open(public_dir / f.name, "wb") as dst:
            shutil.copyfileobj(src, dst)
    private_dir = tmp / "private"
    private_dir.mkdir(mode=0o700)
    answers = private_dir / answers_file(task)
    answers.write_bytes(store.read_bytes(answers_key))
    return public_dir, answers
