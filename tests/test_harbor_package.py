"""Harbor's own code judges the export: its loader (`harbor.models.task.task.Task`, `TaskConfig`) reads every
exported task, its verifier-mode resolution puts the verifier apart from the agent, and `harbor lint` with its
default rules finds nothing.

Harbor needs Python >= 3.12 and dareforge runs on 3.11, so the package lives in a venv of its own, made on
first use and kept in `~/.cache/dareforge/harbor-<version>` (`DAREFORGE_CACHE` moves it): an interpreter >= 3.12
from pyenv's versions, `uv python find`, or `python3.13`/`python3.12` on PATH, then `harbor==HARBOR_VERSION`
from the package index (about 5 s with uv). Where there is no such interpreter or the package cannot be
installed, the tests skip and say which.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dareforge.sandbox import probe
from tests.test_harbor import HARBOR_FIELDS

pytestmark = pytest.mark.skipif(not probe().available, reason="the harbor export needs bubblewrap")

HARBOR_VERSION = "0.25.0"
MIN_PYTHON = (3, 12)
QUERY_SECONDS = 60
INSTALL_SECONDS = 900
"""Deadlines far above what the step needs (creating the venv and installing Harbor took about 30 s here): a
hung child fails or skips the test instead of holding the suite."""
HARBOR_SECONDS = 300

INSPECT = """
import json, sys
from pathlib import Path
from harbor.models.task.config import AgentConfig, EnvironmentConfig, PackageInfo, TaskConfig, VerifierConfig
from harbor.models.task.task import Task
from harbor.models.task.verifier_mode import resolve_task_verifier_mode, task_has_any_shared_verifier

models = {"": TaskConfig, "task": PackageInfo, "verifier": VerifierConfig, "agent": AgentConfig,
          "environment": EnvironmentConfig}
out = {"fields": {k: sorted(m.model_fields) for k, m in models.items()}, "tasks": {}}
for folder in map(Path, sys.argv[1:]):
    task = Task(folder)
    config = TaskConfig.model_validate_toml((folder / "task.toml").read_text())
    out["tasks"][folder.name] = {
        "name": task.name,
        "mode": resolve_task_verifier_mode(config).value,
        "shared": task_has_any_shared_verifier(config),
        "artifacts": [a if isinstance(a, str) else a.source for a in config.artifacts],
        "verifier_timeout": config.verifier.timeout_sec,
        "agent_timeout": config.agent.timeout_sec,
    }
print(json.dumps(out))
"""


def _is_new_enough(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", f"import sys; sys.exit(0 if sys.version_info[:2] >= {MIN_PYTHON} else 1)"],
            capture_output=True,
            timeout=QUERY_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _uv() -> str | None:
    local = Path(sys.prefix) / "bin" / "uv"
    return str(local) if local.exists() else shutil.which("uv")


def find_python() -> str | None:
    """An interpreter >= 3.12: pyenv's installed versions (newest first; its shims answer only for the selected
    version), then uv's search, then the PATH."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob("3.*/bin/python3"), key=lambda p: _version_key(p.parent.parent.name))[::-1]
    found = [str(p) for p in candidates]
    uv = _uv()
    if uv:
        done = subprocess.run(
            [uv, "python", "find", "--no-python-downloads", f">={MIN_PYTHON[0]}.{MIN_PYTHON[1]}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=QUERY_SECONDS,
        )
        if done.returncode == 0 and done.stdout.strip():
            found.append(done.stdout.strip())
    found += [p for name in ("python3.13", "python3.12") if (p := shutil.which(name))]
    return next((p for p in found if _is_new_enough(p)), None)


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def harbor_venv() -> Path:
    """The venv holding Harbor (made once, under a lock so concurrent runs do not build it twice); skips the
    calling test, saying why, when it cannot be made."""
    cache = Path(os.environ.get("DAREFORGE_CACHE", Path.home() / ".cache" / "dareforge"))
    venv = cache / f"harbor-{HARBOR_VERSION}"
    stamp = venv / ".installed"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"harbor-{HARBOR_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():
            return venv
        python = find_python()
        if python is None:
            pytest.skip(
                f"Harbor {HARBOR_VERSION} needs Python >= 3.12 and none was found (pyenv's versions, `uv python "
                "find`, python3.13/python3.12 on PATH): install one, e.g. `uv python install 3.12`"
            )
        shutil.rmtree(venv, ignore_errors=True)
        steps = [[python, "-m", "venv", str(venv)]]
        uv = _uv()
        if uv:
            steps.append([uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), _pin()])
        else:
            steps.append([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", _pin()])
        for step in steps:
            try:
                done = subprocess.run(
                    step, capture_output=True, text=True, check=False, timeout=INSTALL_SECONDS
                )
            except subprocess.TimeoutExpired:
                shutil.rmtree(venv, ignore_errors=True)
                pytest.skip(
                    f"installing {_pin()} did not finish within {INSTALL_SECONDS} s ({' '.join(step[:3])})"
                )
            if done.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                pytest.skip(
                    f"could not install {_pin()} into a Python >= 3.12 venv ({' '.join(step[:3])}): {last[0]}"
                )
        stamp.write_text(_pin() + "\n")
    return venv


def _pin() -> str:
    return f"harbor=={HARBOR_VERSION}"


@pytest.fixture(scope="module")
def harbor() -> Path:
    return harbor_venv()


@pytest.fixture(scope="module")
def export(harbor_export) -> tuple[list[Path], dict[str, str]]:
    """Every task of the small release exported (conftest's `harbor_export`, without control runs: test_harbor.py
    has those); folder name -> the task's graded output."""
    _, report = harbor_export
    folders = [report.dest / name for name in sorted(report.tasks)]
    outputs = {f.name: json.loads((f / "tests" / "grading.json").read_text())["output"] for f in folders}
    return folders, outputs


def _lint(harbor: Path, folders: list[Path]) -> tuple[int, list[dict]]:
    done = subprocess.run(
        [str(harbor / "bin" / "harbor"), "lint", "--json", *map(str, folders)],
        capture_output=True,
        text=True,
        check=False,
        timeout=HARBOR_SECONDS,
    )
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"harbor lint did not print JSON (exit {done.returncode}): {done.stderr[-2000:]}")


def test_harbors_loader_reads_every_task_with_the_verifier_apart(harbor, export):
    folders, outputs = export
    assert {f.name.split("-")[0] for f in folders} >= {"class", "ts", "qa", "lake"}
    done = subprocess.run(
        [str(harbor / "bin" / "python"), "-c", INSPECT, *map(str, folders)],
        capture_output=True,
        text=True,
        check=False,
        timeout=HARBOR_SECONDS,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert set(seen["tasks"]) == {f.name for f in folders}
    for name, task in seen["tasks"].items():
        assert task["name"] == f"dareforge/{name}"
        assert task["mode"] == "separate" and task["shared"] is False, (name, task)
        assert task["artifacts"] == [f"/app/{outputs[name]}"], (name, task)
        assert task["verifier_timeout"] > 0 and task["agent_timeout"] > 0
    # test_harbor.py checks task.toml against these fields without Harbor installed: they must be Harbor's.
    declared = {None if k == "" else k: set(v) for k, v in seen["fields"].items()}
    assert declared == HARBOR_FIELDS


def test_harbor_lint_with_its_default_rules_is_clean_on_every_task(harbor, export):
    folders, _ = export
    for folder in folders:  # Harbor's defaults: no task selects or ignores a rule (`metadata.harbor.lint`)
        assert "harbor" not in tomllib.loads((folder / "task.toml").read_text())["metadata"]
    code, findings = _lint(harbor, folders)
    assert findings == [] and code == 0, findings


def test_harbor_lint_catches_a_shared_verifier_on_a_task_that_has_one(harbor, export, tmp_path):
    # The lint above can fail: the same task without `environment_mode` is the finding.
    folders, _ = export
    shared = tmp_path / folders[0].name
    shutil.copytree(folders[0], shared)
    config = shared / "task.toml"
    config.write_text(config.read_text().replace('environment_mode = "separate"\n', ""))
    code, findings = _lint(harbor, [shared])
    assert code != 0 and [f["rule"] for f in findings] == ["shared-verifier"], findings
