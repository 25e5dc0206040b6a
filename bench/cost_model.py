"""The cost model (dareforge/plan.py) measured on the builtin catalog and checked against a real refresh.

Measures, in this run: CPU seconds per task of each refresh stage on the whole default catalog (as `make run`
and `make cluster-refresh` build it), each stage run the way the refresh DAG runs it (a fresh process per task
instance: per source for the mapped stages, which is where most of their CPU goes, in imports and reference
workers started per process), Airflow's CPU to parse the DAG per task instance, and tokens per probe attempt,
trajectory and judgement against the scripted server. Prints the plan for 10,000 tasks a week and keeps the measurement in
the default store (`reports/costs/measured.json`), where the release report shows it.

The check: the model's projection for the catalog on the cluster's shape (two workers of two slots sharing this
machine's cores) against the wall time of the last `make cluster-refresh` (its figures in
data/cluster/reports/); they should agree within 25%. Without a cluster run the check is skipped and says how to
get one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from bench.common import bench_config
from bench.probe_throughput import _reply as probe_reply
from bench.trajectory_throughput import MAJORITY_CODE
from dareforge.config import Config, EndpointConfig
from dareforge.context import RunContext
from dareforge.families.registry import family_of
from dareforge.judge import CRITERION_FIELDS
from dareforge.plan import MAPPED, SERIAL, Measured, Shape, plan_lines, project
from dareforge.queries import accepted_source_ids, framed_source_ids
from dareforge.schema import Task
from dareforge.store import Store
from tests.llm_server import LLMServer

REPO = Path(__file__).resolve().parents[1]
TOKEN_TASKS = 6  # tasks probed, sampled and judged for the token figures
AGREEMENT = 0.25
VERDICT = json.dumps(
    {
        **dict.fromkeys(CRITERION_FIELDS, 4),
        "rationale": "Reads the data and predicts the majority class: a baseline.",
    }
)
STAGE_PROCESS = """
import sys
from dareforge.orchestration import run_stage
run_stage(sys.argv[1], sys.argv[2:] or None)
"""
"""One task instance's stage work, as `dags/dare_refresh.py` runs it: a fresh process that imports what the stage
needs, runs it on its sources (all, for a serial stage) and reaps its reference workers."""
DAG_PARSE = """
import runpy, sys, time
import airflow.sdk  # a Celery worker forks task processes with Airflow loaded: not counted
started = time.process_time()
runpy.run_path(sys.argv[1])
print(time.process_time() - started)
"""


def dag_parse_cpu(env: dict[str, str]) -> float:
    """CPU seconds a task process spends parsing the DAG file (Airflow's own share of a task instance)."""
    done = subprocess.run(
        [sys.executable, "-c", DAG_PARSE, str(REPO / "dags" / "dare_refresh.py")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def process_cpu(command: list[str], env: dict[str, str]) -> float:
    """CPU seconds of a child process and every descendant it reaped (from wait4, not the clock)."""
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"{command[-2:]} failed with exit code {child.returncode}")
    return usage.ru_utime + usage.ru_stime


def measure_stages(tmp: str) -> tuple[RunContext, dict[str, float], float]:
    """CPU seconds of each stage over the catalog, one process per task instance (serial stages once, mapped
    ones per source, two at a time as a two-core worker would), and the DAG parse per instance."""
    cfg = bench_config(tmp)
    cfg.builtin.rdatasets = (
        Config().builtin.rdatasets
    )  # the default catalog, as make run and the cluster build it
    config = Path(tmp) / "dareforge.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json", by_alias=True, exclude_defaults=True)))
    env = {**os.environ, "DAREFORGE_CONFIG": str(config)}
    env = {k: v for k, v in env.items() if not k.startswith("DAREFORGE_") or k == "DAREFORGE_CONFIG"}
    ctx = RunContext.from_config(cfg, show_progress=False)
    spent: dict[str, float] = {}
    for name in (*SERIAL[:2], *MAPPED, *SERIAL[2:]):
        if name in MAPPED:
            sources = framed_source_ids(ctx) if name != "understand" else accepted_source_ids(ctx)
            commands = [[sys.executable, "-c", STAGE_PROCESS, name, source] for source in sources]
        else:
            commands = [[sys.executable, "-c", STAGE_PROCESS, name]]
        with ThreadPoolExecutor(2) as pool:
            spent[name] = sum(pool.map(lambda command: process_cpu(command, env), commands))
        print(f"  {name}: {spent[name]:.1f} CPU-s in {len(commands)} processes", flush=True)
    return ctx, spent, dag_parse_cpu(env)


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
        print("cost model: measuring every refresh stage on the default catalog")
        ctx, spent, parse = measure_stages(tmp)
        tasks = ctx.store.read_records(Task)
        measured = Measured(
            tasks=len(tasks),
            sources=len({t.source_id for t in tasks}),
            stage_cpu_s={k: round(v, 3) for k, v in spent.items()},
            task_instance_cpu_s=round(parse, 3),
            tokens=measure_tokens(ctx),
            token_counter="the scripted server (whitespace words; a BPE tokenizer counts more)",
        )
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
