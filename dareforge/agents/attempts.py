"""Play many agent episodes at once and store them: the engine under evaluation, probes and synthesis.

An `Attempt` is one (task, sample) with a way to find its files: the public folder the agent gets and the
host-only answers it is graded against. `run_attempts` plays every attempt that is not already stored in the
`trajectories` partition, `workers` at a time, stores finished trajectories as it goes (`Checkpoints`: an
interrupted run resumes where its last save stopped) and returns them in attempt order.

Trajectory ids hash task, endpoint, model, temperature, sample, the attempt's `kind` (empty for plain
evaluation, e.g. "no-data" for a shortcut probe) and the endpoint's protocol (when not `tags`), so the same task
played in another way is another record.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dareforge.agents.grading import PASS_BARS, answers_file
from dareforge.agents.loop import SandboxFactory, endpoint_protocol, run_agent, trajectory_id
from dareforge.config import EndpointConfig
from dareforge.context import RunContext
from dareforge.errors import DareforgeError
from dareforge.generators.questions.scripts import subtask_file
from dareforge.publish.release import Release
from dareforge.schema import Task, Trajectory
from dareforge.scratch import temp_root
from dareforge.store import Store

log = logging.getLogger(__name__)

Materializer = Callable[[Path], tuple[Path, Path | None]]
"""`materialize(tmp)` -> (public folder, answers file or None); may download into `tmp` (removed afterwards)."""


@dataclass(frozen=True)
class Attempt:
    task: Task
    sample: int
    materialize: Materializer
    kind: str = ""

    def trajectory_id(self, endpoint: str, model: str, temperature: float, protocol: str = "tags") -> str:
        return trajectory_id(self.task.id, endpoint, model, temperature, self.sample, self.kind, protocol)


@dataclass
class Checkpoints:
    """When `run_attempts` rewrites its partition (one file holding all of its trajectories): once the unsaved
    trajectories reach `share` of the partition, or some are unsaved and `seconds` have passed since the last
    save (longer when saving is slow, so at most 1/`slow_factor` of the time goes to saving), and at the end.

    Rewriting after every attempt made n attempts cost O(n^2) rows written: 24 attempts are nothing, the 40,000
    trajectories of 10,000 tasks at K=4 would be 800 million rows. Growing by `share` keeps the rows written
    within 1/`share` + 1 times the partition's final size; a crash loses at most `seconds` of finished
    attempts, which the LLM cache then replays without asking the model again."""

    share: float = 0.05
    seconds: float = 60.0
    slow_factor: float = 20.0
    unsaved: int = 0
    saved_at: float = 0.0
    save_seconds: float = 0.0

    def due(self, size: int, now: float) -> bool:
        """Whether to save a partition of `size` trajectories (the unsaved included) at monotonic time `now`."""
        if self.unsaved == 0:
            return False
        waited = now - self.saved_at
        return self.unsaved >= self.share * size or waited >= max(
            self.seconds, self.slow_factor * self.save_seconds
        )

    def saved(self, started: float, now: float) -> None:
        self.unsaved, self.saved_at, self.save_seconds = 0, now, now - started


@dataclass
class Played:
    trajectories: list[Trajectory]
    ran: int
    reused: int


def store_task_files(store: Store, task: Task) -> Materializer:
    """Files of a generated task in the store (`tasks/<id>/public/`, `tasks/<id>/private/`)."""
    return _files_under(
        store, task, f"tasks/{task.id}/public", f"tasks/{task.id}/private/{answers_file(task)}"
    )


def release_task_files(release: Release, task: Task) -> Materializer:
    """Files of a task in a release: its public folder, answers from the private half."""
    answers = f"{release.answers_dir(task.id)}/{answers_file(task)}"
    return _files_under(release.store, task, release.files_dir(task.id), answers)


def release_subtask_files(release: Release, parent: Task, sub_id: str) -> Materializer:
    """A Lake task's files in a release, graded against one sub-task's certified answer."""
    answers = f"{release.answers_dir(parent.id)}/{subtask_file(sub_id)}"
    return _files_under(release.store, parent, release.files_dir(parent.id), answers)


def _files_under(store: Store, task: Task, public_prefix: str, answers_key: str) -> Materializer:
    def materialize(tmp: Path) -> tuple[Path, Path]:
        if not store.exists(answers_key):
            raise DareforgeError(
                f"{answers_key} is missing: task {task.id} has no private answers in this store; rebuild it "
                "(dareforge generate, or release build) or copy its private files here"
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
        answers = private_dir / Path(answers_key).name
        answers.write_bytes(store.read_bytes(answers_key))
        return public_dir, answers

    return materialize


def episode_workers(endpoint: EndpointConfig, concurrency: int | None = None) -> int:
    """Episodes at once: `concurrency`, else the endpoint's `max_concurrency`. Not capped by the CPU count: an
    episode mostly waits for the model, and the pool preloads kernels during that wait (measured: 4 episodes
    at once on 2 cores reach 0.92 of the concurrency-bound ideal, 2 at once 0.48)."""
    return max(1, concurrency or endpoint.max_concurrency)


def make_client(ctx: RunContext, endpoint: EndpointConfig, purpose: str) -> Any:
    """The LLM client of one run, with usage written under `runs/<purpose>-<time>-<endpoint>/`."""
    from dareforge.llm import LLMClient

    run_id = f"{purpose}-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-{endpoint.name}"
    return LLMClient(endpoint, ctx.store, run_id, cache=ctx.config.llm.cache)


def default_sandbox_factory(
    ctx: RunContext, workers: int, episodes: int | None = None
) -> tuple[SandboxFactory, Callable[[], None]]:
    """Sandboxes from a `KernelPool` of `sandbox.pool_size` kernels (at most `workers`, and never more than the
    `episodes` still to come, when known); cold starts when 0.

    Returns the factory and the function that closes the pool.
    """
    from dareforge.sandbox import KernelPool, Sandbox

    config = ctx.config.sandbox
    size = min(config.pool_size, workers)
    if size <= 0:

        def cold(inputs: Path, workspace: Path, seconds: float) -> Any:
            return Sandbox(inputs, workspace, config, seconds)

        return cold, lambda: None
    pool = KernelPool(config, size, demand=episodes)

    def pooled(inputs: Path, workspace: Path, seconds: float) -> Any:
        return pool.acquire(inputs, workspace, seconds_per_execution=seconds)

    return pooled, pool.close


@dataclass(frozen=True)
class AttemptSettings:
    """How one batch of attempts is played, the same for every caller (evaluate, synthesize, probes, gold):
    the trajectory partition it is stored in, episodes at once, sampling temperature and token cap, the pass
    bars, whether stored `llm-error` attempts are played again, the sandbox factory (default: a kernel pool of
    `sandbox.pool_size`) and the progress bar's label."""

    partition: str
    workers: int
    temperature: float = 0.0
    pass_bars: Mapping[str, float] = field(default_factory=lambda: dict(PASS_BARS))
    rerun_llm_errors: bool = False
    max_tokens: int | None = None
    sandbox_factory: SandboxFactory | None = None
    label: str = "agent"


def run_attempts(
    ctx: RunContext, client: Any, attempts: Sequence[Attempt], settings: AttemptSettings
) -> Played:
    """Play `attempts` with `client` (closed afterwards when it is an async context manager); see the module doc."""
    if settings.workers < 1:
        raise DareforgeError(f"concurrency must be at least 1, got {settings.workers}")
    # The partition is read once and rewritten after every attempt: another process playing into it meanwhile
    # would lose its rows. So one player per partition; a second one waits, then reuses what the first stored.
    with ctx.store.partition_lock(Trajectory, settings.partition):
        return asyncio.run(_run(ctx, client, list(attempts), settings))


async def _run(ctx: RunContext, client: Any, attempts: list[Attempt], settings: AttemptSettings) -> Played:
    partition, workers, temperature = settings.partition, settings.workers, settings.temperature
    sandbox_factory = settings.sandbox_factory
    store = ctx.store
    endpoint = getattr(client.endpoint, "name", str(client.endpoint))
    model = getattr(client.endpoint, "model", "")
    protocol = endpoint_protocol(client.endpoint)
    stored = {t.id: t for t in await asyncio.to_thread(store.read_partition, Trajectory, partition)}
    todo: list[Attempt] = []
    for attempt in attempts:
        old = stored.get(attempt.trajectory_id(endpoint, model, temperature, protocol))
        if old is None or (settings.rerun_llm_errors and old.outcome == "llm-error"):
            todo.append(attempt)
    write_lock = asyncio.Lock()
    # `workers` conversations at once (model calls and sandboxes); each attempt's files are copied in and its
    # result graded outside its conversation, for at most as many attempts again (bounded temporary files).
    conversations = asyncio.Semaphore(workers)
    admitted = asyncio.Semaphore(2 * workers)
    checkpoints = Checkpoints(saved_at=time.monotonic())
    writes: list[asyncio.Future] = []

    async def save() -> None:
        started = time.monotonic()
        records = sorted(stored.values(), key=lambda t: t.id)
        write = asyncio.ensure_future(asyncio.to_thread(store.write_records, partition, records))
        writes.append(write)
        # Shielded: a sibling's failure cancels this task but not its thread, and the final save must come
        # after this one, or this older copy would replace it.
        await asyncio.shield(write)
        checkpoints.saved(started, time.monotonic())

    async def one(attempt: Attempt, executor: ThreadPoolExecutor, progress: Any, bar: Any) -> None:
        async with admitted:
            with tempfile.TemporaryDirectory(prefix="dareforge-attempt-", dir=temp_root()) as tmp:
                public_dir, answers = await asyncio.to_thread(attempt.materialize, Path(tmp))
                trajectory = await run_agent(
                    attempt.task,
                    public_dir,
                    client,
                    sandbox_factory,
                    temperature=temperature,
                    sample=attempt.sample,
                    answers=answers,
                    pass_bars=settings.pass_bars,
                    max_tokens=settings.max_tokens,
                    executor=executor,
                    kind=attempt.kind,
                    conversation=conversations,
                )
        async with write_lock:
            stored[trajectory.id] = trajectory
            checkpoints.unsaved += 1
            if checkpoints.due(len(stored), time.monotonic()):
                await save()
        progress.update(bar, advance=1, item=f"{attempt.task.family} {attempt.task.id}: {trajectory.outcome}")

    close_pool: Callable[[], None] | None = None
    if sandbox_factory is None and todo:
        sandbox_factory, close_pool = default_sandbox_factory(ctx, workers, len(todo))
    with (
        ThreadPoolExecutor(max_workers=2 * workers, thread_name_prefix="dareforge-sandbox") as executor,
        ctx.progress() as progress,
    ):
        bar = progress.add_task(f"{settings.label} {endpoint}", total=len(todo), item="")
        try:
            async with asyncio.TaskGroup() as group:
                for attempt in todo:
                    group.create_task(one(attempt, executor, progress, bar))
        except ExceptionGroup as errors:
            # Finished trajectories are stored; the first failure (a sandbox that cannot start, missing
            # files...) is what the caller needs to see, not a group of them.
            raise first_error(errors) from None
        finally:
            await asyncio.gather(*writes, return_exceptions=True)
            if checkpoints.unsaved:
                await save()
            if hasattr(client, "__aexit__"):
                await client.__aexit__(None, None, None)
            if close_pool is not None:
                await asyncio.to_thread(close_pool)
    ordered = [stored[a.trajectory_id(endpoint, model, temperature, protocol)] for a in attempts]
    return Played(ordered, ran=len(todo), reused=len(attempts) - len(todo))


def first_error(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def attempts_for(tasks: Iterable[Task], samples: int, files: Callable[[Task], Materializer], kind: str = ""):
    """`samples` attempts (sample 0..samples-1) at each task, in task order."""
    if samples < 1:
        raise DareforgeError(f"samples must be at least 1, got {samples}")
    return [Attempt(task, sample, files(task), kind) for task in tasks for sample in range(samples)]
