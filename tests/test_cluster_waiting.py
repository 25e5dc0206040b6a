"""What a waiter on a cluster refresh says when the cluster goes away under it (no cluster needed)."""

from __future__ import annotations

import socket

import pytest

from dareforge import cluster as cluster_module
from dareforge.cluster import Cluster, ClusterError


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_waiter_whose_cluster_stopped_says_so_and_how_to_go_on(tmp_path, monkeypatch):
    """`make cluster-stop` in another terminal used to end `make cluster-refresh` in a psql traceback."""
    monkeypatch.setattr(cluster_module, "PG_PORT", _unused_port())
    cluster = Cluster(tmp_path, tmp_path / "store", home=tmp_path / "cluster")
    with pytest.raises(ClusterError, match=r"(?s)(did not answer|psql is not installed).*make cluster"):
        cluster.wait("dare_refresh", "manual__x")
