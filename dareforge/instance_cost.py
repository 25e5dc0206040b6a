"""What a mapped task instance of the refresh costs: its start-up against its work.

Every task instance is a process that parses the DAG file, imports its stage and starts its helpers (reference
workers) before its first source; a mapped stage's batches (`plan.SOURCES_PER_INSTANCE`) are sized so that this
start-up is a small share of the stage. Each instance logs its whole process tree's CPU seconds when its stage
ends (`orchestration.INSTANCE_CPU`); `start_up_shares` reads those from a run's task logs and weighs them
against one start-up measured as a fresh instance on no source (`INSTANCE_START`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from dareforge.child_python import python_argv

INSTANCE_START = """
import runpy
import sys

import airflow.sdk  # a Celery worker forks task processes with Airflow loaded: not counted

from dareforge.report import process_tree_cpu_seconds

before = process_tree_cpu_seconds()
runpy.run_path(sys.argv[1])
from dareforge.orchestration import run_stage

run_stage(sys.argv[2], [])
print(process_tree_cpu_seconds() - before)
"""
"""A mapped task instance's start-up as one pays it: a fresh process parses the DAG file, then runs the stage on
no source (it imports the stage and starts its helpers); prints its CPU seconds, the helpers' included."""


def instance_start_cpu(stage: str, env: dict[str, str], dag: Path) -> float:
    """CPU seconds a task instance of `stage` spends before its first source (`INSTANCE_START`)."""
    done = subprocess.run(
        python_argv("-c", INSTANCE_START, str(dag), stage),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def instance_cpu(task_logs: Path, dag_id: str, run_id: str) -> dict[str, tuple[float, int]]:
    """Per task of the run: the CPU seconds its instances logged (every attempt's) and how many attempts logged
    them, read from Airflow's task logs under `task_logs` (`dag_id=.../run_id=.../task_id=.../attempt=N.log`)."""
    from dareforge.orchestration import INSTANCE_CPU

    logged = re.compile(re.escape(INSTANCE_CPU) + r" ([0-9.]+)")
    run = task_logs / f"dag_id={dag_id}" / f"run_id={run_id}"
    out: dict[str, tuple[float, int]] = {}
    for log in sorted(run.glob("task_id=*/**/attempt=*.log")):
        task = log.relative_to(run).parts[0].removeprefix("task_id=")
        found = logged.findall(log.read_text(errors="replace"))
        if found:
            cpu, count = out.get(task, (0.0, 0))
            out[task] = (cpu + float(found[-1]), count + 1)
    return out


def start_up_shares(
    task_logs: Path, env: dict[str, str], dags: Path, dag_id: str, run_id: str
) -> dict[str, dict[str, float]]:
    """Each mapped stage of the run: its instances, their CPU seconds (logged), one start-up's CPU seconds
    (measured now with `env`, as a fresh instance on no source) and the share of the stage start-ups took."""
    from dareforge.plan import MAPPED

    logged = instance_cpu(task_logs, dag_id, run_id)
    out = {}
    for stage in MAPPED:
        cpu, instances = logged.get(stage, (0.0, 0))
        if not instances:
            continue
        start = instance_start_cpu(stage, env, dags / f"{dag_id}.py")
        out[stage] = {
            "instances": instances,
            "cpu_s": round(cpu, 1),
            "start_cpu_s": round(start, 2),
            "start_share": round(instances * start / cpu, 3) if cpu else None,
        }
    return out
