"""Every Python child runs the installed code, and no read from a reference worker waits forever (issue 43).

An operator ran a newer `dareforge` from an older clone's folder: the reference workers, started with `python -m`,
ran the clone's `dareforge/` (the working folder comes first on `sys.path`), never said the new ready line, and
the run hung. Here: a walk of the package finds every place that starts a Python interpreter and requires the
`-P`/`-I` flag; generate from a folder holding a planted `dareforge/` never runs it and gives the same tasks;
and a worker that never answers fails its script with the reason, after one restart, while the stage goes on.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dareforge
from dareforge.child_python import ISOLATED, SAFE_PATH, child_env, python_argv
from dareforge.context import RunContext
from dareforge.families.generate import generate
from dareforge.reference_solutions.reference_runner import ReferenceRunner
from dareforge.schema import Task
from tests.processes import alive, waited
from tests.stores import prediction_only, prepared_store, store_config

PACKAGE = Path(dareforge.__file__).parent
FLAGS = {SAFE_PATH, ISOLATED}
LOCATION_CALLS = {"Path", "realpath", "dirname", "resolve"}
"""Calls that take `sys.executable` as a place (the venv's bin folder), not as a program to run."""


def _interpreter(node: ast.AST) -> bool:
    """An expression naming a Python interpreter: `sys.executable`, a name or attribute spelled with `python`
    (`model.python`, `PYTHON`, `LLM_PYTHON`, also inside `str(...)`), or a path string ending in `python3.11`-like."""
    if isinstance(node, ast.Call) and _called(node) == "str" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and re.search(r"(^|/)python[0-9.]*$", node.value) is not None
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name == "executable" or re.fullmatch(r"(\w+_)?python[0-9]*", name.lower()) is not None


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def launch_problems(source: str, where: str) -> list[str]:
    """Places in `source` that start a Python interpreter without `-P`/`-I` right after it."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    problems = []
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.List | ast.Tuple) and node.elts and _interpreter(node.elts[0]):
            flag = node.elts[1] if len(node.elts) > 1 else None
            if not (isinstance(flag, ast.Constant) and flag.value in FLAGS):
                problems.append(f"{line}: {ast.unparse(node)[:80]} starts Python without -P or -I")
        is_executable = ast.unparse(node) == "sys.executable" and isinstance(node, ast.Attribute)
        if is_executable:
            parent = parents.get(node)
            first_of_list = isinstance(parent, ast.List | ast.Tuple) and parent.elts[0] is node
            as_place = isinstance(parent, ast.Call) and _called(parent) in LOCATION_CALLS
            if not (first_of_list or as_place):
                problems.append(f"{line}: sys.executable used outside a checked command line")
    return problems


def test_every_python_child_the_package_starts_runs_the_installed_code():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "child_python.py":  # the one home of the rule
            continue
        problems += launch_problems(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    assert problems == []


def test_the_walk_finds_each_shape_of_an_unsafe_launch():
    """The check can fail: each way of starting Python without the flag is named, the safe ones are not."""
    unsafe = textwrap.dedent(
        """
        subprocess.Popen([sys.executable, "-m", "dareforge.reference_solutions.worker"])
        subprocess.run([str(model.python), "-c", CODE])
        subprocess.run((PYTHON, "-m", "x"))
        os.execv(sys.executable, ["python", "-m", "x"])
        command = sys.executable + " -m x"
        """
    )
    assert len(launch_problems(unsafe, "x.py")) == 6
    safe = textwrap.dedent(
        """
        subprocess.run([sys.executable, "-P", "-m", "x"])
        subprocess.run([sys.executable, "-I", "-S", "-c", CODE])
        subprocess.run(python_argv("-m", "x"))
        subprocess.run(["bash", "-c", "true"])
        bin_dir = Path(sys.executable).parent
        """
    )
    assert launch_problems(safe, "x.py") == []


def test_a_child_command_line_and_environment_name_no_working_folder(monkeypatch, tmp_path):
    assert python_argv("-m", "x") == [sys.executable, "-P", "-m", "x"]
    assert python_argv("-c", "1", python=tmp_path / "py", isolated=True) == [
        str(tmp_path / "py"),
        "-I",
        "-c",
        "1",
    ]
    # An empty or relative PYTHONPATH entry is read against the child's working folder.
    monkeypatch.setenv("PYTHONPATH", f":rel:{tmp_path}")
    assert child_env({"A": "1"})["PYTHONPATH"] == str(tmp_path)
    assert "PYTHONPATH" not in child_env(base={"PYTHONPATH": "::."})


# -- reference workers: deadlines ----------------------------------------------------------------------------------
SLEEPER = (
    "import pathlib, sys, time\nwith open(sys.argv[1], 'a') as f: f.write('started\\n')\ntime.sleep(3600)"
)


class Sleeper(ReferenceRunner):
    """A worker that never says it is ready (an older dareforge's, a hung start-up): it notes each start."""

    def __init__(self, starts: Path, **limits):
        super().__init__(1, **limits)
        self.starts = starts

    def command(self) -> list[str]:
        return python_argv("-c", SLEEPER, str(self.starts))


def test_a_worker_that_never_says_it_is_ready_is_started_again_once_then_the_script_fails(tmp_path):
    starts = tmp_path / "starts"
    with Sleeper(starts, timeout_s=1, ready_timeout_s=1) as runner:
        outcome = runner.run("x = 1", tmp_path)
    assert not outcome.ok
    assert outcome.error == (
        "the reference worker did not say it was ready within 1s; started again: "
        "the reference worker did not say it was ready within 1s"
    )
    assert starts.read_text().splitlines() == ["started", "started"]


def test_a_worker_that_dies_is_started_again_once_and_then_the_script_fails_with_why(tmp_path):
    with ReferenceRunner(1, timeout_s=60) as runner:
        outcome = runner.run("import os\nos._exit(3)", tmp_path)
        assert not outcome.ok
        assert outcome.error == (
            "the reference worker process died (exit status 3); started again, it ran the script again: "
            "the reference worker process died (exit status 3)"
        )
        assert runner.run("x = 1", tmp_path).ok  # the next script gets a fresh worker


def test_a_worker_that_says_another_ready_line_fails_its_script_naming_it(tmp_path):
    class Stranger(ReferenceRunner):
        def command(self) -> list[str]:
            return python_argv("-c", "print('READY', flush=True)\nimport time\ntime.sleep(3600)")

    with Stranger(1, timeout_s=1, ready_timeout_s=60) as runner:
        outcome = runner.run("x = 1", tmp_path)
    assert not outcome.ok and outcome.error.startswith(
        "the reference worker said 'READY' instead of its ready line"
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent's pidfd is Linux's")
def test_a_worker_ends_with_the_run_that_started_it_even_mid_script(tmp_path):
    """A run killed while its worker fits a script: the worker, which reads its next request only after the
    script, ends now instead of fitting on as init's child (found after a stopped catalog run, one worker still
    on a script 11 minutes in)."""
    pid_file = tmp_path / "worker.pid"
    script = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(3600)"
    code = (
        "from pathlib import Path\n"
        "from dareforge.reference_solutions.reference_runner import ReferenceRunner\n"
        f"ReferenceRunner(1, timeout_s=3600).run({script!r}, Path({str(tmp_path)!r}))\n"
    )
    run = subprocess.Popen(python_argv("-c", code), env=child_env({}), cwd=tmp_path)
    try:
        waited(
            lambda: (pid_file.exists() and pid_file.read_text() != "") or run.poll() is not None,
            "no script ran",
        )
        assert run.poll() is None, "the run ended before its worker held its script"
        worker = int(pid_file.read_text())
        assert alive(worker)
        run.kill()
        run.wait()
        waited(lambda: not alive(worker), "the worker outlived its run")
    finally:
        run.kill()
        if pid_file.exists() and pid_file.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


# -- generate from a folder holding another dareforge ------------------------------------------------------------
PLANTED = {
    "dareforge/__init__.py": "import pathlib\npathlib.Path({marker!r}).write_text('package')\n",
    "dareforge/orchestration.py": "import pathlib\npathlib.Path({marker!r}).write_text('orchestration')\n",
    "dareforge/reference_solutions/__init__.py": "",
    "dareforge/reference_solutions/worker.py": (
        "import pathlib, time\npathlib.Path({marker!r}).write_text('worker')\ntime.sleep(3600)\n"
    ),
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> RunContext:
    return prepared_store(_context(tmp_path_factory.mktemp("prepared")))


def _context(root: Path, **generate_limits) -> RunContext:
    cfg = prediction_only(store_config(root, ["sklearn-iris"]))
    # Goal tasks only: each IF task is one more reference run per generate here (and one more hung worker's
    # ready timeout in the hung-worker test), and what is tested is where every reference worker comes from.
    cfg.generate.if_variants = 0
    for key, value in generate_limits.items():
        setattr(cfg.generate, key, value)
    return RunContext.from_config(cfg, show_progress=False)


def _copy(prepared: RunContext, root: Path, **generate_limits) -> RunContext:
    shutil.copytree(prepared.config.store.root, root / "store")
    return _context(root, **generate_limits)


def test_generate_from_a_folder_holding_another_dareforge_never_runs_it(prepared, tmp_path, monkeypatch):
    """The planted worker writes a marker and sleeps: run from that folder, it would hang every reference.

    Each run gets ready limits of its own: the reference workers a process keeps are keyed by their limits, and
    the planted run must start its own workers from the planted folder."""
    clean = generate(_copy(prepared, tmp_path / "clean", reference_ready_timeout_s=299))
    marker = tmp_path / "marker"
    folder = tmp_path / "folder"
    for name, text in PLANTED.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text.format(marker=str(marker)))
    monkeypatch.chdir(folder)
    planted_ctx = _copy(prepared, tmp_path / "planted", reference_ready_timeout_s=300)
    planted = generate(planted_ctx)
    assert not marker.exists()
    assert planted.failures == clean.failures == {}
    assert planted.counts == clean.counts and sum(clean.counts.values()) > 0
    tasks = sorted((t.id, t.status) for t in planted_ctx.store.read_records(Task))
    assert tasks == sorted((t.id, t.status) for t in _context(tmp_path / "clean").store.read_records(Task))


def test_generate_with_workers_that_never_answer_fails_their_tasks_with_why_and_goes_on(
    prepared, tmp_path, monkeypatch
):
    starts = tmp_path / "starts"
    monkeypatch.setattr(ReferenceRunner, "command", lambda self: python_argv("-c", SLEEPER, str(starts)))
    ctx = _copy(prepared, tmp_path / "hung", reference_timeout_s=1, reference_ready_timeout_s=1)
    report = generate(ctx)  # returns: the stage goes on past every hung worker
    reasons = [*report.failures.values(), *report.outcomes.get("rejected", {}).values()]
    assert reasons and all("did not say it was ready within 1s" in str(r) for r in reasons), reasons
    assert ctx.store.read_records(Task) == [] or all(
        t.status != "candidate" for t in ctx.store.read_records(Task)
    )
    monkeypatch.undo()
    again = generate(_context(tmp_path / "hung", reference_ready_timeout_s=298))
    assert again.failures == {} and sum(again.counts.values()) > 0
