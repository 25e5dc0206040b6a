"""deploy/: the Helm values and image for Kubernetes, checked against what can run here (no cluster, no chart).

What these tests hold the paper to: every Airflow option the values set exists in the pinned Airflow; the
dareforge settings they pass load as a dareforge configuration; the image, the values and the constraints name
one Airflow version; the pools step calls commands that exist.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from dareforge.config_loader import load_config

REPO = Path(__file__).resolve().parents[1]
VALUES = yaml.safe_load((REPO / "deploy" / "values.yaml").read_text())
DOCKERFILE = (REPO / "deploy" / "Dockerfile").read_text()
AIRFLOW_OPTIONS = """
import json, sys
from airflow.configuration import conf
print(json.dumps([[s, k, conf.has_option(s, k)] for s, k in json.loads(sys.argv[1])]))
"""


def _airflow_env(tmp_path) -> dict[str, str]:
    return {
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW_CONFIG": str(REPO / "airflow.cfg"),
        "PATH": "",
    }


def test_every_airflow_option_the_values_set_exists_in_the_pinned_airflow(tmp_path):
    import json

    wanted = [[section, key] for section, options in VALUES["config"].items() for key in options]
    out = subprocess.run(
        [sys.executable, "-c", AIRFLOW_OPTIONS, json.dumps(wanted)],
        env=_airflow_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    unknown = [f"{s}.{k}" for s, k, known in json.loads(out.strip().splitlines()[-1]) if not known]
    assert unknown == []


def test_the_executors_are_airflows_own():
    executors = VALUES["executor"].split(",")
    assert set(executors) <= {"LocalExecutor", "CeleryExecutor", "KubernetesExecutor"}


def test_the_dareforge_settings_the_pods_get_load_as_a_configuration(tmp_path):
    environ = {e["name"]: e["value"] for e in VALUES["env"] if e["name"].startswith("DAREFORGE_")}
    (tmp_path / "dareforge.yaml").write_text("{}\n")  # the pods have no file: env vars only
    config = load_config(tmp_path / "dareforge.yaml", environ=environ)
    assert config.store.root == environ["DAREFORGE_STORE__ROOT"]
    assert config.store.root.startswith("s3://")  # object storage through fsspec: s3fs is in the image
    assert "s3fs" in DOCKERFILE


def test_image_values_and_constraints_name_one_airflow_version():
    pinned = re.search(r"^apache-airflow==(\S+)$", (REPO / "constraints.txt").read_text(), re.M).group(1)
    base = re.search(r"^FROM apache/airflow:(\S+)-python(\S+)$", DOCKERFILE, re.M)
    assert base.group(1) == pinned == VALUES["airflowVersion"] == VALUES["defaultAirflowTag"]
    assert base.group(2) == f"{sys.version_info.major}.{sys.version_info.minor}"  # the Python CI tests with


def test_the_pools_step_runs_commands_that_exist(tmp_path):
    (init,) = VALUES["scheduler"]["extraInitContainers"]
    image = VALUES["images"]["airflow"]
    assert init["image"] == f"{image['repository']}:{image['tag']}"
    command = init["args"][0]
    assert "python -m dareforge.orchestration pools" in command
    flag = re.search(r"airflow db check-migrations (--[a-z-]+)", command).group(1)
    helped = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "check-migrations", "--help"],
        env=_airflow_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert flag in helped
    from dareforge import orchestration

    assert set(orchestration.POOLS) == {"kaggle_api", "llm", "sandbox"}
