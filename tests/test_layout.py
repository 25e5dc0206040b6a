"""The package's shape: no import cycle, no import from a lower floor to a higher one, and one stage list that
`dareforge run` and the refresh DAG both follow (adding a stage touches its module, the list and its test)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dareforge
from dareforge import pipeline
from dareforge.pipeline import STAGES, Run, Stage, run_pipeline
from dareforge.report import StageReport

PACKAGE = Path(dareforge.__file__).parent

FLOORS: dict[str, int] = {
    # 0: the ground floor: records, errors, config, the store, the report every stage returns and the helpers
    # every stage shares
    **dict.fromkeys(
        [
            "errors",
            "hashing",
            "minhash",
            "describe",
            "schema",
            "config",
            "locking",
            "scratch",
            "store",
            "context",
            "queries",
            "table_views",
            "report",
        ],
        0,
    ),
    # 1: building blocks the stages use (models, sandbox, references and their graders), the cost model
    **dict.fromkeys(["llm", "sandbox", "reference_solutions", "plan", "confined_sql"], 1),
    # 2 and up: the stages, each above what it uses (understand reads tables with prepare's DuckDB engine;
    # evaluate and audit read releases)
    "crawlers": 2,
    "generators": 3,
    "understand": 4,
    "validators": 5,
    "publish": 5,
    "agents": 6,
    "probes": 7,
    "judge": 7,
    "exports": 8,
    "trajectories": 9,
    "inspect_eval": 10,
    # the top: what wires the stages together
    "pipeline": 11,
    "orchestration": 12,
    "cluster": 12,
    "cli": 12,
}
"""Every top-level module or package of dareforge and its floor: a module may import its own floor and below."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str) -> set[str]:
    """The dareforge modules `name` imports, anywhere in its code except under `if TYPE_CHECKING:`."""
    path = MODULES[name]
    found: set[str] = set()

    def add(target: str) -> None:
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for alias in node.names:
                add(f"{base}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m.startswith("dareforge")}


GRAPH = {name: _imports(name) for name in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                strong(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return found


def _top(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_module_imports_itself_through_others():
    assert _cycles(GRAPH) == []


def test_no_package_imports_itself_through_others():
    packages: dict[str, set[str]] = {}
    for name, targets in GRAPH.items():
        packages.setdefault(_top(name), set()).update(_top(t) for t in targets if _top(t) != _top(name))
    assert _cycles(packages) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    planted = {**GRAPH, "dareforge.schema": GRAPH["dareforge.schema"] | {"dareforge.cli.app"}}
    assert any("dareforge.schema" in c and "dareforge.cli.app" in c for c in _cycles(planted))


def test_every_module_imports_only_its_floor_and_below():
    tops = {_top(name) for name in MODULES} - {""}
    assert tops <= set(FLOORS), f"give these a floor in FLOORS: {sorted(tops - set(FLOORS))}"
    upward = [
        f"{name} (floor {FLOORS[_top(name)]}) imports {target} (floor {FLOORS[_top(target)]})"
        for name, targets in GRAPH.items()
        if _top(name)
        for target in targets
        if _top(target) and FLOORS[_top(target)] > FLOORS[_top(name)]
    ]
    assert upward == []


# -- one stage list ----------------------------------------------------------------------------------------------
def test_the_refresh_dag_runs_the_list_s_stages_in_its_order(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(PACKAGE.parent / "dags" / "dare_refresh.py")).dags["dare_refresh"]
    order = [t.task_id for t in dag.topological_sort()]
    staged = [s.dag_task for s in STAGES if s.dag_task]
    assert [t for t in order if t in staged] == staged
    mapped = {t.task_id for t in dag.tasks if getattr(t, "is_mapped", False)}
    assert mapped == {s.dag_task for s in STAGES if s.per_source}
    wiring = set(order) - set(staged)
    assert wiring == {"accepted_sources"}, "a DAG task that is no stage of the list"
    source = (PACKAGE.parent / "dags" / "dare_refresh.py").read_text()
    for s in STAGES:
        if s.dag_task and s.name not in ("probe", "release"):  # those two use Airflow's skip and asset events
            assert f'run_stage("{s.name}"' in source, f"the {s.dag_task} task must run stage {s.name!r}"


def test_dareforge_run_walks_the_stage_list_and_a_new_stage_joins_with_one_entry(tmp_path):
    """A stage added to a copy of the list runs in its place, with the models up when it asks for them, and the
    lines of its report are what the run prints: nothing else needs to know about it."""
    from dareforge.config import Config
    from dareforge.context import RunContext

    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(tmp_path / "store"), str(tmp_path / "work")
    ctx = RunContext.from_config(cfg, show_progress=False)
    seen: list[str] = []

    def stub(name: str, needs_models: bool = False) -> Stage:
        def call(run: Run, ids) -> StageReport:
            seen.append(f"{name}:{'models' if run.models is not None else 'none'}")
            return StageReport(name, lines=[f"{name} ran"])

        return Stage(name, (), (), call, needs_models=needs_models)

    stages = (stub("first"), stub("new", needs_models=True), stub("last"))
    reports = list(run_pipeline(Run(ctx), stages))
    assert seen == ["first:none", "new:models", "last:models"]
    assert [r.lines for r in reports] == [["first ran"], ["new ran"], ["last ran"]]
    assert all(isinstance(r, StageReport) and r.seconds >= 0 for r in reports)
    assert [s.name for s in STAGES] == [
        "crawl",
        "filter",
        "understand",
        "prepare",
        "generate",
        "validate",
        "probe",
        "gate",
        "release",
        "trajectories",
        "corpus",
    ]
    with pytest.raises(KeyError, match="the stages are crawl, filter"):
        pipeline.stage("nope")


def test_the_bubblewrap_sandbox_is_a_sandbox_environment():
    """The engine asks only for `SandboxEnvironment`: a second backend implements the same three methods."""
    from typing import get_type_hints

    from dareforge.sandbox import Sandbox, SandboxEnvironment
    from dareforge.sandbox.execution import Execution

    assert issubclass(Sandbox, SandboxEnvironment)
    assert get_type_hints(Sandbox.execute)["return"] is Execution


def test_a_stage_task_without_models_does_not_import_the_model_stack(tmp_path):
    """A refresh task is a fresh process per source: importing openai, the graders and sklearn's metrics for a
    stage that needs no model cost each one about 4 CPU-seconds (measured by bench/cost_model.py)."""
    import subprocess
    import sys

    (tmp_path / "dareforge.yaml").write_text(f"store:\n  root: {tmp_path / 'store'}\n")
    code = (
        "import sys\nfrom dareforge.orchestration import run_stage\nrun_stage('filter')\n"
        "print(sorted(m for m in ('openai', 'dareforge.trajectories', 'dareforge.agents') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"DAREFORGE_CONFIG": str(tmp_path / "dareforge.yaml"), "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"
