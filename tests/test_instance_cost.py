"""What a mapped task instance of the refresh costs, as the cluster's figures weigh it: the whole process tree's
CPU (its live reference workers included), each instance's logged figure, and a start-up measured as one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dareforge.child_python import child_env
from dareforge.instance_cost import instance_cpu, instance_start_cpu
from dareforge.orchestration import INSTANCE_CPU
from dareforge.report import cpu_seconds, process_tree_cpu_seconds

REPO = Path(__file__).resolve().parents[1]

BURN_THEN_WAIT = """
import sys, time
end = time.process_time() + 0.5
while time.process_time() < end:
    pass
print(time.process_time(), flush=True)
sys.stdin.read()
"""


def test_the_process_tree_counts_a_live_child_that_was_not_reaped():
    before_tree, before_own = process_tree_cpu_seconds(), cpu_seconds()
    child = subprocess.Popen(
        [sys.executable, "-c", BURN_THEN_WAIT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        burnt = float(child.stdout.readline())  # the child's own CPU, once it is spent
        tree = process_tree_cpu_seconds() - before_tree
        own = cpu_seconds() - before_own
    finally:
        child.communicate("")
    assert burnt >= 0.5
    assert tree - own >= burnt - 0.02  # clock ticks of 10 ms each, read from /proc
    assert own < burnt  # not reaped yet: resource's children figure does not have it


def _log(path: Path, *events: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"event": e, "level": "info"}) + "\n" for e in events))


def test_the_instances_cpu_is_read_from_the_run_s_task_logs(tmp_path):
    logs = tmp_path / "logs" / "tasks"
    run_id = "manual__2026-12-07T10:00:00+00:00"
    run = logs / "dag_id=dare_refresh" / f"run_id={run_id}"
    _log(
        run / "task_id=generate" / "map_index=0" / "attempt=1.log",
        "generate: 3 tasks",
        f"{INSTANCE_CPU} 40.50",
    )
    # a retried instance: both attempts cost CPU
    _log(run / "task_id=generate" / "map_index=1" / "attempt=1.log", f"{INSTANCE_CPU} 10.00")
    _log(run / "task_id=generate" / "map_index=1" / "attempt=2.log", f"{INSTANCE_CPU} 30.25")
    _log(run / "task_id=check" / "map_index=0" / "attempt=1.log", "killed before it logged its figure")
    _log(run / "task_id=validate" / "attempt=1.log", f"{INSTANCE_CPU} 7.00")
    other = logs / "dag_id=dare_refresh" / "run_id=scheduled__2026-11-29T00:00:00+00:00"
    _log(other / "task_id=generate" / "map_index=0" / "attempt=1.log", f"{INSTANCE_CPU} 999.0")

    assert instance_cpu(logs, "dare_refresh", run_id) == {"generate": (80.75, 3), "validate": (7.0, 1)}


def test_a_start_up_is_measured_as_a_fresh_instance_on_no_source(tmp_path):
    env = child_env(
        {
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "DAREFORGE_STORE__ROOT": str(tmp_path / "store"),
            "DAREFORGE_STORE__WORK_DIR": str(tmp_path / "work"),
        }
    )
    start = instance_start_cpu("understand", env, REPO / "dags" / "dare_refresh.py")
    assert start > 0.1  # parsing the DAG file and importing the stage are not free
    assert not list((tmp_path / "store").glob("tables/*/*.parquet"))  # no source: nothing written
