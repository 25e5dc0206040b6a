"""The LLM judge: score stored trajectories on DSGym's six criteria and store one `Judgement` per trajectory.

`judge_trajectories` reads `trajectories` partitions (default: every `gold--*` and `sampled--*` one), asks the
judge endpoint about each trajectory (prompt and parsing in `dareforge.judge.prompt`), and writes the
judgements of trajectory partition P to the `judgements` partition `<judge endpoint>--P`. Scores are stored;
thresholds are applied later by selection (`dareforge.trajectories.select`), so changing them costs no call.

Each trajectory ends in one of three statuses:
- `scored`: the reply parsed; `overall` is the mean of the six criteria.
- `malformed`: every one of `judge.max_attempts` replies was unusable. Each retry appends the bad reply and a
  correction to the conversation, so the request (and its cache key) differs and the model is really asked
  again. The detail lists what was wrong with each reply.
- `llm-error`: the client failed (after its own retries for transient errors); the next run tries again.

Idempotent: a trajectory with a `scored` or `malformed` judgement from the same endpoint, model and
`JUDGE_VERSION` is not judged again. Trajectories whose own agent endpoint failed (outcome `llm-error`) hold
no work to judge and are skipped. Judgements are written every few seconds and at the end, so an interrupted
run keeps what it finished (and the LLM cache makes re-asking the rest free).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dareforge.agents.attempts import first_error, make_client
from dareforge.config import EndpointConfig, JudgeConfig
from dareforge.context import RunContext
from dareforge.errors import ConfigError, DareforgeError
from dareforge.judge.prompt import MalformedReply, build_messages, correction, parse_reply
from dareforge.llm.endpoints import find_endpoint
from dareforge.queries import partition_name
from dareforge.schema import Judgement, Task, Trajectory
from dareforge.store import TABLES, Store

log = logging.getLogger(__name__)

JUDGE_VERSION = "dsgym6-v1"
"""Bump when the prompt, rubric or parsing changes: stored judgements of another version are redone."""
DEFAULT_PREFIXES = ("gold--", "sampled--")
FINAL_STATUSES = frozenset({"scored", "malformed"})
JSON_MODE = {"type": "json_object"}
FLUSH_SECONDS = 2.0


class JudgeError(DareforgeError):
    pass


@dataclass
class JudgeReport:
    """What a judge run did. `judgements` holds every judgement now stored for the judged partitions."""

    endpoint: str
    model: str
    partitions: dict[str, str] = field(default_factory=dict)  # trajectory partition -> judgements partition
    judgements: list[Judgement] = field(default_factory=list)
    judged: int = 0  # trajectories sent to the judge in this run
    reused: int = 0  # already judged with a final status
    skipped: int = 0  # the agent's endpoint failed: nothing to judge

    @property
    def statuses(self) -> Counter:
        return Counter(j.status for j in self.judgements)

    def summary(self) -> str:
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items())) or "none"
        return (
            f"judge {self.endpoint} ({self.model}): {self.judged} judged, {self.reused} reused, "
            f"{self.skipped} skipped (agent llm-error) in {len(self.partitions)} partition(s); "
            f"judgements: {statuses}"
        )


def judgement_partition(endpoint: str, trajectory_partition: str) -> str:
    """The `judgements` partition holding one judge endpoint's verdicts on one trajectory partition."""
    return partition_name(endpoint, trajectory_partition)


def trajectory_partitions(store: Store, prefixes: Sequence[str] = DEFAULT_PREFIXES) -> list[str]:
    """Names of the stored `trajectories` partitions starting with one of `prefixes`, sorted."""
    names = [
        key.rsplit("/", 1)[-1].removesuffix(".parquet")
        for key in store.list(f"{TABLES}/{Trajectory.table}")
        if key.endswith(".parquet")
    ]
    return sorted(n for n in names if n.startswith(tuple(prefixes)))


def is_final(judgement: Judgement | None, endpoint: EndpointConfig) -> bool:
    return (
        judgement is not None
        and judgement.status in FINAL_STATUSES
        and judgement.judge_endpoint == endpoint.name
        and judgement.judge_model == endpoint.model
        and judgement.judge_version == JUDGE_VERSION
    )


@dataclass
class _Partition:
    name: str  # trajectories partition
    target: str  # judgements partition
    trajectories: list[Trajectory]
    stored: dict[str, Judgement]  # trajectory id -> judgement
    todo: list[Trajectory]
    dirty: bool = False
    flushed: float = 0.0


def judge_trajectories(
    ctx: RunContext,
    partitions: list[str] | None = None,
    endpoint: str | None = None,
    client_factory: Callable[[EndpointConfig], Any] | None = None,
    concurrency: int | None = None,
) -> JudgeReport:
    """Judge every trajectory of `partitions` with `endpoint` (default `judge.endpoint`); see the module doc.

    `concurrency` bounds the judge calls in flight (default: the endpoint's `max_concurrency`).
    """
    name = endpoint or ctx.config.judge.endpoint
    if not name:
        raise ConfigError(
            "no judge endpoint: set `judge.endpoint` in dareforge.yaml to a name from `llm.endpoints` "
            "(or pass the endpoint explicitly)"
        )
    judge_endpoint = find_endpoint(ctx, name)
    workers = concurrency if concurrency is not None else judge_endpoint.max_concurrency
    if workers < 1:
        raise JudgeError(f"concurrency must be at least 1, got {workers}")
    # Each judgements partition is read, merged and rewritten: one judging process per judge endpoint.
    with ctx.store.lock(f"judge/{judge_endpoint.name}"):
        return _judge_locked(ctx, partitions, judge_endpoint, client_factory, workers)


def _judge_locked(
    ctx: RunContext,
    partitions: list[str] | None,
    judge_endpoint: EndpointConfig,
    client_factory: Callable[[EndpointConfig], Any] | None,
    workers: int,
) -> JudgeReport:
    store = ctx.store
    available = trajectory_partitions(store, prefixes=("",))
    if partitions is None:
        names = trajectory_partitions(store)
    else:
        unknown = sorted(set(partitions) - set(available))
        if unknown:
            raise JudgeError(
                f"no trajectories partition {', '.join(map(repr, unknown))} in the store "
                f"(stored: {', '.join(available) or 'none'}); run the synthesis first or fix the name"
            )
        names = sorted(set(partitions))
    work = [_load(store, p, judge_endpoint) for p in names]
    skipped = sum(t.outcome == "llm-error" for w in work for t in w.trajectories)
    report = JudgeReport(
        endpoint=judge_endpoint.name,
        model=judge_endpoint.model,
        partitions={w.name: w.target for w in work},
        reused=sum(len(w.trajectories) - len(w.todo) for w in work) - skipped,
        skipped=skipped,
    )
    todo = sum(len(w.todo) for w in work)
    if todo:
        tasks = {t.id: t for t in store.read_records(Task)}
        client = (
            client_factory(judge_endpoint)
            if client_factory is not None
            else make_client(ctx, judge_endpoint, "judge")
        )
        asyncio.run(_judge_all(ctx, client, judge_endpoint, ctx.config.judge, work, tasks, workers))
        report.judged = todo
    for part in work:  # nothing to judge, but judgements of deleted trajectories to drop
        if part.dirty and part.stored:
            store.write_records(part.target, sorted(part.stored.values(), key=lambda j: j.trajectory_id))
    report.judgements = sorted(
        (j for w in work for j in w.stored.values()), key=lambda j: (j.task_id, j.trajectory_id)
    )
    log.info("%s", report.summary())
    return report


def _load(store: Store, partition: str, endpoint: EndpointConfig) -> _Partition:
    target = judgement_partition(endpoint.name, partition)
    trajectories = sorted(store.read_partition(Trajectory, partition), key=lambda t: (t.task_id, t.id))
    ids = {t.id for t in trajectories}
    # Judgements of trajectories no longer stored are dropped: the partition mirrors its trajectories.
    old = store.read_partition(Judgement, target)
    stored = {j.trajectory_id: j for j in old if j.trajectory_id in ids}
    todo = [t for t in trajectories if t.outcome != "llm-error" and not is_final(stored.get(t.id), endpoint)]
    return _Partition(partition, target, trajectories, stored, todo, dirty=len(stored) < len(old))


async def _judge_all(
    ctx: RunContext,
    client: Any,
    endpoint: EndpointConfig,
    config: JudgeConfig,
    work: list[_Partition],
    tasks: dict[str, Task],
    workers: int,
) -> None:
    limit = asyncio.Semaphore(workers)
    write_lock = asyncio.Lock()

    async def flush(part: _Partition, force: bool = False) -> None:
        async with write_lock:
            if part.dirty and part.stored and (force or time.monotonic() - part.flushed >= FLUSH_SECONDS):
                # Cleared before the write: a judgement finishing meanwhile marks the partition dirty again.
                part.dirty, part.flushed = False, time.monotonic()
                records = sorted(part.stored.values(), key=lambda j: j.trajectory_id)
                await asyncio.to_thread(ctx.store.write_records, part.target, records)

    async def one(part: _Partition, trajectory: Trajectory, progress: Any, bar: Any) -> None:
        async with limit:
            judgement = await judge_one(client, endpoint, config, trajectory, tasks.get(trajectory.task_id))
        part.stored[trajectory.id] = judgement
        part.dirty = True
        await flush(part)
        progress.update(bar, advance=1, item=f"{trajectory.task_id}: {judgement.status}")

    with ctx.progress() as progress:
        bar = progress.add_task(f"judge {endpoint.name}", total=sum(len(w.todo) for w in work), item="")
        try:
            async with asyncio.TaskGroup() as group:
                for part in work:
                    for trajectory in part.todo:
                        group.create_task(one(part, trajectory, progress, bar))
        except ExceptionGroup as errors:
            raise first_error(errors) from None
        finally:
            for part in work:
                await flush(part, force=True)
            if hasattr(client, "__aexit__"):
                await client.__aexit__(None, None, None)


async def judge_one(
    client: Any, endpoint: EndpointConfig, config: JudgeConfig, trajectory: Trajectory, task: Task | None
) -> Judgement:
    """Ask the judge about one trajectory until a reply parses or `config.max_attempts` replies did not."""
    if config.max_attempts < 1:
        raise ConfigError(f"judge.max_attempts must be at least 1, got {config.max_attempts}")
    messages = build_messages(trajectory, task)
    response_format: dict[str, str] | None = JSON_MODE
    calls = 0
    problems: list[str] = []

    def record(status: str, **fields: Any) -> Judgement:
        return Judgement(
            trajectory_id=trajectory.id,
            task_id=trajectory.task_id,
            judge_endpoint=endpoint.name,
            judge_model=endpoint.model,
            status=status,
            attempts=calls,
            judge_version=JUDGE_VERSION,
            **fields,
        )

    while len(problems) < config.max_attempts:
        result = await client.chat(
            messages, temperature=0.0, max_tokens=config.max_tokens, response_format=response_format
        )
        calls += 1
        if not result.ok:
            if response_format is not None and result.error_kind == "bad_request":
                # Some servers reject JSON mode; the prompt asks for JSON anyway, so ask once without it.
                response_format = None
                continue
            return record("llm-error", detail=result.error)
        try:
            scores = parse_reply(result.text)
        except MalformedReply as exc:
            problems.append(str(exc))
            messages = [
                *messages,
                {"role": "assistant", "content": result.text},
                {"role": "user", "content": correction(str(exc))},
            ]
            continue
        return record("scored", **scores.criteria, overall=scores.overall, rationale=scores.rationale)
    detail = "; ".join(f"reply {i}: {p}" for i, p in enumerate(problems, 1))
    return record("malformed", detail=detail)
