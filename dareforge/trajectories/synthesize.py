"""Sampled trajectories: K attempts per task and endpoint, the raw material of SFT and RL data.

`synthesize` plays every task of a release split (`synthesize.split`, train by default, so training data stays
off the benchmark's test tasks) `synthesize.samples` times per endpoint at `synthesize.temperature`, through
the same engine as evaluation (`dareforge.agents.attempts`), with attempt kind "sample" so the ids differ from
an evaluation of the same endpoint. Each endpoint's trajectories go to partition `sampled--<endpoint>--<release>`
of the `trajectories` table; a re-run plays only what is missing.

A trajectory is **valid** when it is verified by execution: an IF attempt whose predictions all match the
reference run, an MM/TS attempt whose score reaches its family's bar (`synthesize.pass_bars`, DARE-bench's by
default). Validity is recomputed from the stored score under the bars in force, so changing a bar re-decides
stored trajectories without playing them again. Choosing among valid trajectories and judging them happen
downstream (selection, judge).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from dareforge.agents.attempts import (
    AttemptSettings,
    Materializer,
    attempts_for,
    episode_workers,
    make_client,
    release_task_files,
    run_attempts,
    store_task_files,
)
from dareforge.agents.evaluate import OUTCOMES, split_tasks
from dareforge.agents.grading import passed
from dareforge.agents.loop import SandboxFactory
from dareforge.config import EndpointConfig
from dareforge.context import RunContext
from dareforge.errors import DareforgeError
from dareforge.families.registry import pass_bars
from dareforge.generators.taskio import originals
from dareforge.llm.endpoints import endpoints_for
from dareforge.publish.release import load_release
from dareforge.queries import partition_name
from dareforge.schema import Task, Trajectory

log = logging.getLogger(__name__)

SAMPLE_KIND = "sample"


class SynthesisError(DareforgeError):
    pass


@dataclass(frozen=True)
class TaskSet:
    """Tasks to play and where their files are: a release split, or (release None) the store's tasks."""

    name: str  # the release name, or "store"
    version: str | None
    split: str
    tasks: list[Task]
    files: Callable[[Task], Materializer]

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version} {self.split}" if self.version else self.name


def task_set(
    ctx: RunContext,
    release: str | None,
    split: str,
    version: str | None = None,
    task_ids: Iterable[str] | None = None,
) -> TaskSet:
    """The `split` tasks of `release` (latest version unless `version`), or every candidate task in the store
    when `release` is None; only `task_ids` when given (an id that is not there is an error)."""
    store = ctx.store
    if release is None:
        tasks = sorted(originals(ctx), key=lambda t: (t.family, t.id))
        found = TaskSet("store", None, "all", tasks, lambda t: store_task_files(store, t))
    else:
        rel = load_release(ctx, release, version)
        found = TaskSet(
            rel.name,
            rel.version,
            split,
            split_tasks(rel, split),
            lambda t: release_task_files(rel, t),
        )
    if task_ids is None:
        return found
    wanted = set(task_ids)
    missing = sorted(wanted - {t.id for t in found.tasks})
    if missing:
        raise SynthesisError(
            f"task ids not among the {found.label} tasks: {', '.join(missing)}; check the release and split"
        )
    return TaskSet(
        found.name, found.version, found.split, [t for t in found.tasks if t.id in wanted], found.files
    )


def own_bars(tasks: Iterable[Task]) -> dict[str, float]:
    """Task id -> the task's own bar, of the tasks that carry one (`Task.pass_bar`)."""
    return {t.id: t.pass_bar for t in tasks if t.pass_bar is not None}


def is_valid(
    trajectory: Trajectory, pass_bars: Mapping[str, float], task_bars: Mapping[str, float] | None = None
) -> bool:
    """Verified by execution under `pass_bars`: IF needs a score of 1.0, MM/TS their family's bar, or the task's
    own bar where it carries one (`task_bars`, from `own_bars`: the bar its instruction states)."""
    # Recomputed from the score (not `Trajectory.passed`, fixed when it was played) so bars can change later.
    if trajectory.outcome != "graded":
        return False
    own = (task_bars or {}).get(trajectory.task_id)
    if own is not None:
        return trajectory.score is not None and trajectory.score >= own
    return passed(trajectory.family, trajectory.score, pass_bars)


@dataclass(frozen=True)
class FamilyCounts:
    attempts: int = 0
    valid: int = 0
    outcomes: Counter = field(default_factory=Counter)


@dataclass
class EndpointSamples:
    """One endpoint's sampled trajectories (in task, then sample order) and what this run played."""

    endpoint: str
    model: str
    partition: str
    trajectories: list[Trajectory]
    ran: int
    reused: int


@dataclass
class SynthesisReport:
    release: str
    version: str | None
    split: str
    samples: int
    temperature: float
    pass_bars: Mapping[str, float]
    endpoints: list[EndpointSamples]
    task_bars: Mapping[str, float] = field(default_factory=dict)
    """The own bars of the sampled tasks that carry one (`own_bars`)."""

    def families(self, endpoint: str) -> dict[str, FamilyCounts]:
        """Family -> attempts, valid ones and outcome counts, for one endpoint (sorted by family)."""
        (samples,) = [e for e in self.endpoints if e.endpoint == endpoint]
        counts: dict[str, FamilyCounts] = {}
        for t in samples.trajectories:
            old = counts.get(t.family, FamilyCounts())
            counts[t.family] = FamilyCounts(
                old.attempts + 1,
                old.valid + is_valid(t, self.pass_bars, self.task_bars),
                old.outcomes + Counter([t.outcome]),
            )
        return dict(sorted(counts.items()))

    def valid(self, endpoint: str | None = None) -> list[Trajectory]:
        """The valid trajectories (of one endpoint, or all)."""
        return [
            t
            for e in self.endpoints
            if endpoint is None or e.endpoint == endpoint
            for t in e.trajectories
            if is_valid(t, self.pass_bars, self.task_bars)
        ]

    @property
    def ran(self) -> int:
        return sum(e.ran for e in self.endpoints)

    @property
    def reused(self) -> int:
        return sum(e.reused for e in self.endpoints)

    def summary(self) -> str:
        total = sum(len(e.trajectories) for e in self.endpoints)
        names = ", ".join(e.endpoint for e in self.endpoints)
        return (
            f"sampled {total} trajectories ({names}; K={self.samples}): {len(self.valid())} valid; "
            f"{self.ran} played, {self.reused} reused"
        )


def render_table(report: SynthesisReport) -> Table:
    """One row per endpoint and family: attempts, valid, and every outcome's count."""
    table = Table(
        title=f"sampled on {report.release}@{report.version} {report.split}",
        caption=f"K={report.samples} at temperature {report.temperature:g}; valid = verified by execution",
    )
    for name in ("endpoint", "family", "attempts", "valid", *OUTCOMES):
        table.add_column(name, justify="left" if name in ("endpoint", "family") else "right")
    for samples in report.endpoints:
        for family, counts in report.families(samples.endpoint).items():
            table.add_row(
                samples.endpoint,
                family,
                str(counts.attempts),
                str(counts.valid),
                *(str(counts.outcomes[o]) for o in OUTCOMES),
            )
    return table


def endpoints_to_sample(ctx: RunContext, names: Iterable[str] | None) -> list[EndpointConfig]:
    return endpoints_for(ctx, names, "synthesize")


def synthesize(
    ctx: RunContext,
    release: str = "dareforge",
    endpoints: Iterable[str] | None = None,
    samples: int | None = None,
    temperature: float | None = None,
    split: str | None = None,
    version: str | None = None,
    task_ids: Iterable[str] | None = None,
    client_factory: Callable[[EndpointConfig], Any] | None = None,
    sandbox_factory: SandboxFactory | None = None,
    *,
    rerun_llm_errors: bool = False,
    concurrency: int | None = None,
) -> SynthesisReport:
    """Sample K trajectories per task and endpoint; every None argument comes from `synthesize:` in the config."""
    config = ctx.config.synthesize
    chosen = endpoints_to_sample(ctx, endpoints)
    samples = config.samples if samples is None else samples
    temperature = config.temperature if temperature is None else temperature
    if samples > 1 and temperature <= 0:
        log.warning("%d samples at temperature %g are likely to be identical", samples, temperature)
    tasks = task_set(ctx, release, split or config.split, version, task_ids)
    if not tasks.tasks:
        raise SynthesisError(f"{tasks.label} has no tasks to sample")
    attempts = attempts_for(tasks.tasks, samples, tasks.files, kind=SAMPLE_KIND)
    report = SynthesisReport(
        tasks.name,
        tasks.version,
        tasks.split,
        samples,
        float(temperature),
        pass_bars(config.pass_bars),
        [],
        own_bars(tasks.tasks),
    )
    for endpoint in chosen:
        partition = partition_name(f"sampled--{endpoint.name}", tasks.name)
        client = (
            client_factory(endpoint)
            if client_factory is not None
            else make_client(ctx, endpoint, "synthesize")
        )
        settings = AttemptSettings(
            partition,
            episode_workers(endpoint, concurrency),
            temperature,
            pass_bars(config.pass_bars),
            rerun_llm_errors,
            config.max_tokens,
            sandbox_factory,
            label="synthesize",
        )
        played = run_attempts(ctx, client, attempts, settings)
        report.endpoints.append(
            EndpointSamples(
                endpoint.name, endpoint.model, partition, played.trajectories, played.ran, played.reused
            )
        )
        log.info(
            "synthesize %s on %s: %d run, %d reused, %d valid",
            endpoint.name,
            tasks.label,
            played.ran,
            played.reused,
            len(report.valid(endpoint.name)),
        )
    return report
