"""The cost model (dareforge/plan.py) measured on the builtin catalog and checked against a real refresh.

Measures, in this run: CPU seconds per task of each refresh stage on the whole default catalog (as `make run`
and `make cluster-refresh` build it), Airflow's CPU per task instance, and tokens per probe attempt, trajectory
and judgement against the scripted server. Prints the plan for 10,000 tasks a week and keeps the measurement in
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
from pathlib import Path

from bench.common import bench_config
from bench.probe_throughput import _reply as probe_reply
from bench.trajectory_throughput import MAJORITY_CODE
from dareforge.config import Config, EndpointConfig
from dareforge.context import RunContext
from dareforge.judge import CRITERION_FIELDS
from dareforge.pipeline import Run, stage
from dareforge.plan import MAPPED, SERIAL, Measured, Shape, plan_lines, project
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
TASK_INSTANCE = """
import runpy, sys
from airflow.sdk import dag, task
runpy.run_path(sys.argv[1])
from dareforge.orchestration import context, run_stage
import dareforge.generators.generate, dareforge.understand.stage, dareforge.validators.validate
context()
"""
"""What a task instance's fresh process does before its stage starts: the task runtime, the DAG file parsed,
the orchestration and stage modules imported, the configuration read."""


def task_instance_cpu() -> float:
    before = os.times()
    subprocess.run([sys.executable, "-c", TASK_INSTANCE, str(REPO / "dags" / "dare_refresh.py")], check=True)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def measure_stages(tmp: str) -> tuple[RunContext, dict[str, float]]:
    cfg = bench_config(tmp)
    cfg.builtin.rdatasets = (
        Config().builtin.rdatasets
    )  # the default catalog, as make run and the cluster build it
    ctx = RunContext.from_config(cfg, show_progress=False)
    run, spent = Run(ctx, release="bench"), {}
    for name in (*SERIAL[:2], *MAPPED, *SERIAL[2:]):
        report = stage(name).run(run)
        spent[name] = report.cpu_seconds
        print(f"  {name}: {report.cpu_seconds:.1f} CPU-s, {report.seconds:.1f} s wall", flush=True)
    return ctx, spent


def measure_tokens(ctx: RunContext) -> dict[str, tuple[float, float]]:
    """Mean (prompt, completion) tokens per probe attempt, trajectory and judgement, from the usage files."""
    from dareforge.judge import judge_trajectories
    from dareforge.probes import probe_shortcuts
    from dareforge.publish.release import load_release
    from dareforge.trajectories import synthesize

    released = set(load_release(ctx, "bench").task_ids)
    tasks = sorted(t.id for t in ctx.store.read_records(Task) if t.id in released and not t.is_question)
    chosen = tasks[:TOKEN_TASKS]
    with LLMServer() as server:
        ctx.config.llm.endpoints = [EndpointConfig(name="bench", base_url=server.url, model="scripted")]
        ctx.config.judge.endpoint = "bench"
        server.script(probe_reply)
        probed = probe_shortcuts(ctx, task_ids=chosen)
        server.script(
            lambda r: "<answer>predictions.csv is written</answer>" if len(r.messages) > 2 else MAJORITY_CODE
        )
        sampled = synthesize(ctx, "bench", samples=1, split="all", task_ids=chosen)
        server.script(VERDICT)
        judged = judge_trajectories(ctx)
    counts = {"probe": probed.ran, "synthesize": sampled.ran, "judge": judged.judged}
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
    done = [r for r in done if r.get("state") == "success" and r.get("how") == "refresh" and r.get("tasks")]
    return done[-1] if done else None


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print("cost model: measuring every refresh stage on the default catalog")
        ctx, spent = measure_stages(tmp)
        tasks = ctx.store.read_records(Task)
        measured = Measured(
            tasks=len(tasks),
            sources=len({t.source_id for t in tasks}),
            stage_cpu_s={k: round(v, 3) for k, v in spent.items()},
            task_instance_cpu_s=round(task_instance_cpu(), 3),
            tokens=measure_tokens(ctx),
            token_counter="the scripted server (whitespace words; a BPE tokenizer counts more)",
        )
    for line in plan_lines(measured):
        print(f"  {line}")
    refresh = last_cluster_refresh()
    if refresh is None:
        print("  check against a cluster run: skipped (run `make cluster` then `make cluster-refresh` first)")
    else:
        workers = refresh["workers"]
        shape = Shape(
            workers, refresh["slots"] // workers, refresh["cores"] / workers
        )  # they share the machine
        predicted = project(measured, refresh["tasks"], shape).wall_s
        ratio = predicted / refresh["wall_s"]
        print(
            f"  check: {refresh['tasks']} tasks on the cluster's shape {shape.describe()} projected {predicted:.0f}s, "
            f"measured {refresh['wall_s']:.0f}s (run {refresh['run_id']}): ratio {ratio:.2f} "
            f"({'OK' if abs(ratio - 1) <= AGREEMENT else 'MISSED'}: within {AGREEMENT:.0%})"
        )
    store = Store(os.environ.get("DAREFORGE_STORE__ROOT", str(REPO / Config().store.root)))
    print(f"  kept in {store.path(measured.save(store))} (the release report shows it)")


if __name__ == "__main__":
    main()
