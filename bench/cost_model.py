"""The cost model (dareforge/plan.py) measured end to end, and checked against a real refresh.

Measures, in this run, `dareforge run --until release` (crawl to published release; the LLM stages are left out:
their cost is the token bill) as a fresh process on two catalogs:
- the default catalog (`make run`'s): CPU seconds per accepted task end to end, the process and every process it
  reaped (per-source workers, reference workers), against issue 29's 2.0 measured before the per-source stages
  ran in kept worker processes (target 1.0);
- a seeded sample of the whole catalog the plan is for (`SAMPLE_RDATASETS` R datasets and, when present, the
  dev-kaggle mirror), asked for as many tasks per source as `make catalog` asks (`dareforge.catalog.yaml`'s
  `generate`): the per-stage CPU per task the plan projects with, and dollars per verified task at
  `VCPU_HOUR_USD`.
Also: a mapped task instance's start-up (a process parsing the DAG, importing its stage and starting its
reference workers) and tokens per probe attempt, trajectory and judgement against the scripted server. Prints
the plan for 10,000 tasks and keeps the measurement in the default store (`reports/costs/measured.json`), where
the release report shows it.

The check: the model's projection on the cluster's shape (two workers of two slots sharing this machine's cores)
against the wall time of the last `make cluster-refresh` (its figures in data/cluster/reports/); they should agree
within 25%. Without a cluster run the check is skipped and says how to get one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from bench.common import bench_config
from bench.probe_throughput import _reply as probe_reply
from bench.trajectory_throughput import MAJORITY_CODE
from dareforge.config import Config, EndpointConfig
from dareforge.context import RunContext
from dareforge.families.registry import family_of
from dareforge.instance_cost import instance_start_cpu
from dareforge.judge import CRITERION_FIELDS
from dareforge.plan import MAPPED, SERIAL, Measured, Shape, plan_lines, project
from dareforge.run_record import RUNS
from dareforge.schema import Task
from dareforge.store import Store
from tests.llm_server import LLMServer

REPO = Path(__file__).resolve().parents[1]
TOKEN_TASKS = 6  # tasks probed, sampled and judged for the token figures
AGREEMENT = 0.25
BEFORE_CPU_PER_ACCEPTED = 2.0
"""Issue 29's measurement on the default catalog: a fresh process per source and stage, validate serial."""
TARGET_CPU_PER_ACCEPTED = 1.0
SAMPLE_RDATASETS = 60
DEV_KAGGLE_MIRROR = REPO.parent / "shared" / "dev-kaggle" / "mirror"
CATALOG_PROFILE = REPO / "dareforge.catalog.yaml"
VERDICT = json.dumps(
    {
        **dict.fromkeys(CRITERION_FIELDS, 4),
        "rationale": "Reads the data and predicts the majority class: a baseline.",
    }
)


def process_cpu(command: list[str], env: dict[str, str]) -> float:
    """CPU seconds of a child process and every descendant it reaped (from wait4, not the clock)."""
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"{command[-2:]} failed with exit code {child.returncode}")
    return usage.ru_utime + usage.ru_stime


def catalog_config(tmp: str, name: str, sample: bool) -> Config:
    """The default catalog (as make run builds it), or the seeded sample of the whole catalog with the tasks per
    source the whole catalog asks for (`dareforge.catalog.yaml`'s `generate`); no model."""
    cfg = bench_config(f"{tmp}/{name}")
    cfg.builtin.rdatasets = SAMPLE_RDATASETS if sample else Config().builtin.rdatasets
    if sample:
        profile = yaml.safe_load(CATALOG_PROFILE.read_text()).get("generate", {})
        cfg.generate = cfg.generate.model_copy(update=profile)
    if sample and DEV_KAGGLE_MIRROR.is_dir():
        cfg.mirror.paths = [str(DEV_KAGGLE_MIRROR)]
    cfg.llm.local.enabled = False  # the LLM stages are the token bill's, not the CPU's
    return cfg


def run_catalog(cfg: Config) -> tuple[RunContext, dict, float, dict[str, str]]:
    """`dareforge run --until release` on `cfg` in a fresh process: its run record, its CPU seconds and every
    process it reaped, and the environment it ran with."""
    config = Path(cfg.store.root).parent / "dareforge.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json", by_alias=True, exclude_defaults=True)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAREFORGE_")}
    env["DAREFORGE_CONFIG"] = str(config)
    cpu = process_cpu([sys.executable, "-m", "dareforge.cli", "-q", "run", "--until", "release"], env)
    ctx = RunContext.from_config(cfg, show_progress=False)
    (key,) = ctx.store.list(f"{RUNS}/")
    return ctx, ctx.store.read_json(key), cpu, env


def measure(tmp: str) -> tuple[RunContext, Measured]:
    print("cost model: dareforge run --until release on the default catalog, then on a seeded catalog sample")
    _, default, default_cpu, _ = run_catalog(catalog_config(tmp, "default", sample=False))
    per_accepted = default_cpu / max(default["accepted"], 1)
    print(
        f"  default catalog, end to end: {default_cpu:,.0f} CPU-s for {default['accepted']} accepted tasks "
        f"({default['tasks']} generated) on {default['jobs']} workers in {default['wall_s']:.0f} s: "
        f"{per_accepted:.2f} CPU-s per accepted task; ratio to issue 29's {BEFORE_CPU_PER_ACCEPTED:.1f}: "
        f"{per_accepted / BEFORE_CPU_PER_ACCEPTED:.2f} "
        f"({'OK' if per_accepted <= TARGET_CPU_PER_ACCEPTED else 'MISSED'}: target {TARGET_CPU_PER_ACCEPTED:.1f})"
    )
    ctx, sample, sample_cpu, env = run_catalog(catalog_config(tmp, "sample", sample=True))
    sources = ctx.store.connect().sql("select count(distinct source_id) from tasks").fetchall()[0][0]
    print(
        f"  catalog sample ({SAMPLE_RDATASETS} R datasets"
        + (", the dev-kaggle mirror" if DEV_KAGGLE_MIRROR.is_dir() else "")
        + f"): {sample_cpu:,.0f} CPU-s for {sample['accepted']} accepted of {sample['tasks']} tasks from "
        f"{sources} sources: {sample_cpu / max(sample['accepted'], 1):.2f} CPU-s per accepted task; "
        f"peak memory {sample['peak_rss_bytes'] / 1024**3:.2f} GiB"
    )
    dag = REPO / "dags" / "dare_refresh.py"
    starts = [instance_start_cpu(name, env, dag) for name in MAPPED]
    stage_cpu = {name: figures["cpu_seconds"] for name, figures in sample["stages"].items()}
    # What the stages did not count themselves (pool start-up, helpers reaped at exit): spread by stage share.
    unaccounted = max(sample_cpu - sum(stage_cpu.values()), 0.0)
    counted = sum(stage_cpu[name] for name in (*MAPPED, *SERIAL) if name in stage_cpu) or 1.0
    measured = Measured(
        tasks=sample["tasks"],
        sources=sources,
        stage_cpu_s={
            name: round(stage_cpu[name] * (1 + unaccounted / counted), 3)
            for name in (*MAPPED, *SERIAL)
            if name in stage_cpu
        },
        task_instance_cpu_s=round(sum(starts) / len(starts), 3),
        tokens=measure_tokens(ctx),
        token_counter="the scripted server (whitespace words; a BPE tokenizer counts more)",
        accepted=sample["accepted"],
    )
    return ctx, measured


def measure_tokens(ctx: RunContext) -> dict[str, tuple[float, float]]:
    """Mean (prompt, completion) tokens per probe attempt, trajectory and judgement, from the usage files."""
    from dareforge.judge import judge_trajectories
    from dareforge.probes import probe_shortcuts
    from dareforge.publish.release import load_release
    from dareforge.trajectories import synthesize

    released = set(load_release(ctx, "dareforge").task_ids)
    tasks = sorted(
        t.id for t in ctx.store.read_records(Task) if t.id in released and not family_of(t).asks_question
    )
    chosen = tasks[:TOKEN_TASKS]
    with LLMServer() as server:
        ctx.config.llm.endpoints = [EndpointConfig(name="bench", base_url=server.url, model="scripted")]
        ctx.config.judge.endpoint = "bench"
        server.script(probe_reply)
        probed = probe_shortcuts(ctx, task_ids=chosen)
        server.script(
            lambda r: "<answer>predictions.csv is written</answer>" if len(r.messages) > 2 else MAJORITY_CODE
        )
        sampled = synthesize(ctx, "dareforge", samples=1, split="all", task_ids=chosen)
        server.script(VERDICT)
        judged = judge_trajectories(ctx)
    counts = {"probe": probed.counts["played"], "synthesize": sampled.ran, "judge": judged.judged}
    units = {"probe": "probe attempt", "synthesize": "trajectory", "judge": "judgement"}
    tokens = {}
    for purpose, n in counts.items():
        prompt = completion = 0
        for key in ctx.store.list("runs/"):
            if Path(key).parent.name.startswith(f"{purpose}-") and key.endswith("llm-usage.json"):
                totals = ctx.store.read_json(key)["totals"]
                prompt, completion = (
                    prompt + totals["prompt_tokens"],
                    completion + totals["completion_tokens"],
                )
        tokens[units[purpose]] = (prompt / max(n, 1), completion / max(n, 1))
    return tokens


def last_cluster_refresh() -> dict | None:
    reports = sorted((REPO / "data" / "cluster" / "reports").glob("*.json"), key=lambda p: p.stat().st_mtime)
    done = [json.loads(p.read_text()) for p in reports]
    # A full refresh: undisturbed, successful, on a store that held no task before it.
    done = [
        r
        for r in done
        if r.get("state") == "success"
        and r.get("how") == "refresh"
        and r.get("tasks_before") == 0
        and r["tasks"]
    ]
    return done[-1] if done else None


def check_lines(measured: Measured, refresh: dict) -> list[str]:
    """The projection against a measured full refresh: on its catalog, and for 10,000 tasks scaled by task
    count, on the cluster's shape (its workers share this machine's cores)."""
    workers = refresh["workers"]
    shape = Shape(workers, refresh["slots"] // workers, refresh["cores"] / workers)
    lines = []
    for tasks in (refresh["tasks"], 10_000):
        projected = project(measured, tasks, shape).wall_s
        measured_s = refresh["wall_s"] * tasks / refresh["tasks"]
        ratio = projected / measured_s
        lines.append(
            f"check: {tasks:,} tasks on the cluster's shape {shape.describe()}: projected {projected / 3600:.2f} h, "
            f"measured {measured_s / 3600:.2f} h (run {refresh['run_id']}"
            + (", scaled by task count" if tasks != refresh["tasks"] else "")
            + f"): ratio {ratio:.2f} ({'OK' if abs(ratio - 1) <= AGREEMENT else 'MISSED'}: within {AGREEMENT:.0%})"
        )
    return lines


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _, measured = measure(tmp)
    for line in plan_lines(measured):
        print(f"  {line}")
    refresh = last_cluster_refresh()
    if refresh is None:
        print(
            "  check against a cluster run: skipped (no full refresh recorded: `make cluster` on a fresh store, "
            "then `make cluster-refresh`)"
        )
    else:
        for line in check_lines(measured, refresh):
            print(f"  {line}")
    store = Store(os.environ.get("DAREFORGE_STORE__ROOT", str(REPO / Config().store.root)))
    print(f"  kept in {store.path(measured.save(store))} (the release report shows it)")


if __name__ == "__main__":
    main()
