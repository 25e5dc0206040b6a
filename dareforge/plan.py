"""The cost model: from what one catalog run measured, the wall time, workers, token bill and dollars of a
weekly refresh at any scale (10,000 tasks by default).

What is measured (`Measured`, by `bench/cost_model.py` on a seeded sample of the whole catalog, kept at
`reports/costs/measured.json` in the store it is given, and shown in the release report):
- CPU seconds per task of each refresh stage, as `dareforge run` spends them (per-source stages in worker
  processes kept across sources), and how many of the tasks were accepted;
- a mapped task instance's own start-up: parsing the DAG files, importing its stage, starting its reference
  workers (a process per batch of `SOURCES_PER_INSTANCE[stage]` sources pays it once);
- LLM tokens per probe attempt, per trajectory and per judgement, as the endpoint counted them.

How the refresh spends them (`project`), following `dags/dare_refresh.py`: crawl, filter, validate, probe, gate
and publish run as one task instance each, so their CPU is serial on one core; understand, prepare, generate and
check are mapped over batches of sources and spread over min(slots, cores) of the cluster, as is the instances'
start-up. Dollars per verified task: the refresh's CPU at `VCPU_HOUR_USD` plus the token bill, over the accepted
tasks. Not modelled: the scheduler's latency between dependent tasks (seconds per hop, not per task), network
time of crawling and publishing, and the LLM's latency (the probe and sampling are bounded by the endpoint's
throughput, which the bill's tokens divided by the endpoint's tokens per second gives)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from dareforge.store import Store

MAPPED = ("understand", "prepare", "generate", "check")
"""Stages the refresh maps over sources: they spread over the cluster's slots."""
SERIAL = ("crawl", "filter", "validate", "gate", "release")
"""Stages the refresh runs as one task instance: they use one core whatever the cluster's size."""
SERIAL_INSTANCES = 9
"""accepted_sources, crawl, filter, generate_batches, validate, probe, gate, publish, the run's own start."""
SOURCES_PER_INSTANCE = {"understand": 96, "prepare": 96, "generate": 16, "check": 16}
"""Sources per mapped task instance of the refresh, by stage. Each instance is a process that spends about 5
CPU-s starting (parsing the DAG, importing its stage, starting its reference workers) before its first source,
and it should be at most a tenth of the stage's work: understanding a source takes about 2 s and preparing one
1 s (the whole catalog on a cluster of four slots on two cores), so those two take many sources to an
instance; generating one takes about 20 s and checking one about 6 s, so those take fewer, which keeps the
last instances of the stage short enough for the slots to finish together. Generate and check share their
batches, as understand and prepare do (the refresh re-batches once, between prepare and generate)."""
MAX_MAPPED_INSTANCES = 512
"""Instances a mapped stage of the refresh gets at most: beyond, sources go in batches (one instance each), so a
catalog of any size stays under Airflow's `max_map_length` (1024 by default) and the scheduler's load stays
bounded."""
MEASURED_KEY = "reports/costs/measured.json"
WEEK_HOURS = 168.0
VCPU_HOUR_USD = 0.0425
"""A stated cloud price: one vCPU-hour of a general-purpose on-demand VM (about half of a 2-vCPU c7i.large's
$0.085/h list price in us-east-1, late 2025); pass your own to `dollars_per_verified`."""


@dataclass(frozen=True)
class Measured:
    tasks: int
    sources: int
    stage_cpu_s: dict[str, float]
    """CPU seconds of each stage over the whole measured catalog."""
    task_instance_cpu_s: float
    tokens: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per unit ("probe attempt", "trajectory", "judgement"): mean (prompt, completion) tokens."""
    token_counter: str = ""
    """Who counted the tokens (the endpoint's usage; the scripted server counts whitespace words)."""
    accepted: int = 0
    """Of `tasks`, those the gate accepted (verified tasks)."""

    @property
    def accepted_share(self) -> float:
        return self.accepted / max(self.tasks, 1) if self.accepted else 1.0

    def cpu_per_task(self, stage: str) -> float:
        return self.stage_cpu_s.get(stage, 0.0) / max(self.tasks, 1)

    def cpu_per_accepted(self) -> float:
        """CPU seconds of every stage per accepted task."""
        return sum(self.stage_cpu_s.values()) / max(self.accepted or self.tasks, 1)

    @property
    def tasks_per_source(self) -> float:
        return self.tasks / max(self.sources, 1)

    @classmethod
    def load(cls, store: Store) -> Measured | None:
        if not store.exists(MEASURED_KEY):
            return None
        raw = store.read_json(MEASURED_KEY)
        raw["tokens"] = {k: tuple(v) for k, v in raw.get("tokens", {}).items()}
        return cls(**raw)

    def save(self, store: Store) -> str:
        store.write_json(MEASURED_KEY, asdict(self))
        return MEASURED_KEY


@dataclass(frozen=True)
class Shape:
    """A cluster: workers, task slots per worker (Celery concurrency) and the cores each worker has."""

    workers: int
    slots_per_worker: int = 2
    cores_per_worker: float = 2.0

    @property
    def parallel(self) -> float:
        return min(self.workers * self.slots_per_worker, self.workers * self.cores_per_worker)

    def describe(self) -> str:
        return f"{self.workers} x ({self.slots_per_worker} slots, {self.cores_per_worker:g} cores)"


@dataclass(frozen=True)
class Projection:
    tasks: int
    shape: Shape
    serial_s: float
    mapped_s: float
    airflow_s: float

    @property
    def wall_s(self) -> float:
        return self.serial_s + self.mapped_s + self.airflow_s


def project(measured: Measured, tasks: int, shape: Shape) -> Projection:
    """The refresh's wall time for `tasks` tasks on `shape`; see the module doc."""
    sources = math.ceil(tasks / measured.tasks_per_source)
    serial = tasks * sum(measured.cpu_per_task(s) for s in SERIAL)
    mapped = tasks * sum(measured.cpu_per_task(s) for s in MAPPED) / shape.parallel
    instances = SERIAL_INSTANCES + sum(
        min(math.ceil(sources / SOURCES_PER_INSTANCE[stage]), MAX_MAPPED_INSTANCES) for stage in MAPPED
    )
    airflow = instances * measured.task_instance_cpu_s / shape.parallel
    return Projection(tasks, shape, serial, mapped, airflow)


def workers_for(
    measured: Measured, tasks: int, hours: float, slots: int = 2, cores: float = 2.0
) -> int | None:
    """The fewest workers that finish `tasks` within `hours`; None when the serial stages alone take longer."""
    one = Shape(1, slots, cores)
    if project(measured, tasks, Shape(10**6, slots, cores)).wall_s > hours * 3600:
        return None
    workers = 1
    while (
        project(measured, tasks, Shape(workers, one.slots_per_worker, one.cores_per_worker)).wall_s
        > hours * 3600
    ):
        workers += 1
    return workers


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens of one model."""

    model: str
    prompt: float
    completion: float


DEFAULT_PRICES = (Price("small (0.15/0.60)", 0.15, 0.60), Price("large (2.50/10.00)", 2.50, 10.00))
"""Illustrative list prices per million input/output tokens of a small and a large hosted model; pass your own."""


@dataclass(frozen=True)
class Bill:
    units: dict[str, int]
    tokens: dict[str, tuple[float, float]]
    dollars: dict[str, float]


def token_bill(
    measured: Measured,
    tasks: int,
    probe_models: int,
    probe_samples: int,
    k: int,
    train_share: float,
    prices: tuple[Price, ...] = DEFAULT_PRICES,
) -> Bill:
    """Tokens and dollars of one refresh: every task probed by `probe_models` x `probe_samples`, K trajectories
    per train task, one judgement per trajectory (each call priced at every model in `prices`)."""
    trajectories = round(tasks * train_share) * k
    units = {
        "probe attempt": tasks * probe_models * probe_samples,
        "trajectory": trajectories,
        "judgement": trajectories,
    }
    tokens = {
        unit: (n * measured.tokens.get(unit, (0.0, 0.0))[0], n * measured.tokens.get(unit, (0.0, 0.0))[1])
        for unit, n in units.items()
    }
    prompt = sum(p for p, _ in tokens.values())
    completion = sum(c for _, c in tokens.values())
    dollars = {p.model: (prompt * p.prompt + completion * p.completion) / 1e6 for p in prices}
    return Bill(units, tokens, dollars)


def dollars_per_verified(measured: Measured, vcpu_hour_usd: float = VCPU_HOUR_USD) -> float:
    """The refresh's CPU (crawl to release) per verified task, in dollars at `vcpu_hour_usd`."""
    return measured.cpu_per_accepted() * vcpu_hour_usd / 3600


def plan_lines(measured: Measured, tasks: int = 10_000, hours: float = WEEK_HOURS, k: int = 8) -> list[str]:
    """The cost model as plain lines: per-task CPU by stage, wall time by cluster size, workers, token bill."""
    lines = [
        f"measured on {measured.sources} sources, {measured.tasks} tasks "
        f"({measured.tasks_per_source:.1f} tasks per source); Airflow {measured.task_instance_cpu_s:.2f} CPU-s "
        "per task instance",
        "CPU seconds per task: "
        + ", ".join(f"{s} {measured.cpu_per_task(s):.3f}" for s in (*SERIAL[:2], *MAPPED, *SERIAL[2:])),
    ]
    for workers in (1, 2, 4, 8, 16):
        p = project(measured, tasks, Shape(workers))
        lines.append(
            f"{tasks:,} tasks on {p.shape.describe()}: {p.wall_s / 3600:.2f} h "
            f"(serial stages {p.serial_s / 3600:.2f} h, mapped {p.mapped_s / 3600:.2f} h, "
            f"Airflow {p.airflow_s / 3600:.2f} h)"
        )
    for window in (hours, 24.0, 6.0, 2.0):
        needed = workers_for(measured, tasks, window)
        lines.append(
            f"workers (2 slots, 2 cores each) to finish {tasks:,} tasks within {window:g} h: "
            + (str(needed) if needed else "none suffice: the serial stages alone take longer")
        )
    bill = token_bill(measured, tasks, probe_models=3, probe_samples=1, k=k, train_share=0.5)
    verified = tasks * measured.accepted_share
    cpu_usd = dollars_per_verified(measured)
    lines.append(
        f"CPU per verified task: {measured.cpu_per_accepted():.2f} CPU-s = ${cpu_usd:.6f} at "
        f"${VCPU_HOUR_USD}/vCPU-hour; with the token bill below: "
        + ", ".join(f"{model} ${cpu_usd + d / verified:.4f}" for model, d in bill.dollars.items())
        + " per verified task"
    )
    for unit, n in bill.units.items():
        prompt, completion = bill.tokens[unit]
        lines.append(
            f"{unit}: {n:,} x {measured.tokens.get(unit, (0, 0))[0]:,.0f}+"
            f"{measured.tokens.get(unit, (0, 0))[1]:,.0f} tokens = {prompt + completion:,.0f} tokens"
        )
    lines.append(
        f"token bill (3 probe models x 1 sample, K={k} on half the tasks, one judgement each; tokens as "
        f"{measured.token_counter or 'the endpoint'} counted them): "
        + ", ".join(f"{model} ${dollars:,.0f}" for model, dollars in bill.dollars.items())
    )
    return lines
