"""The package's shape: no import cycle (type-only imports included), no import from a lower floor to a higher
one, no module over `MAX_LINES`, and one stage list that `dareforge run` and the refresh DAG both follow (adding a
stage touches its module, the list and its test)."""

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
            "arrow_types",
            "schema",
            "config",
            "config_loader",
            "config_limits",
            "validate_config",
            "locking",
            "scratch",
            "store",
            "context",
            "queries",
            "table_views",
            "report",
            "kept",
            "run_record",
            "child_python",
            "reviews",
        ],
        0,
    ),
    # 1: building blocks the stages use (models, sandbox, references and their graders), the cost model
    **dict.fromkeys(["llm", "sandbox", "reference_solutions", "plan", "confined_sql"], 1),
    # 2 and up: the stages, each above what it uses (understand reads tables with prepare's DuckDB engine;
    # evaluate and audit read releases)
    "crawlers": 2,
    "generators": 3,
    "families": 4,
    "understand": 4,
    "validators": 5,
    "publish": 5,
    "agents": 6,
    "probes": 7,
    "judge": 7,
    "exports": 8,
    "trajectories": 9,
    "inspect_eval": 10,
    "teach": 10,  # trains a proxy on an export (torch in child processes only) and evaluates it
    # the top: what wires the stages together
    "source_pool": 11,  # runs a stage's own function in worker processes (handed in, never imported)
    "stage_ledger": 11,  # which sources a per-source stage finished under the same inputs
    "pipeline": 11,
    "orchestration": 12,
    "cluster": 12,
    "instance_cost": 12,  # a refresh task instance's start-up against its work, read from the task logs
    "cli": 12,
    "browse": 12,  # the auditor's workbench: pages over the store, beside the CLI that starts it
}
"""Every top-level module or package of dareforge and its floor: a module may import its own floor and below."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, with_types: bool = False) -> set[str]:
    """The dareforge modules `name` imports, anywhere in its code (in functions too); those under
    `if TYPE_CHECKING:` only `with_types`."""
    path = MODULES[name]
    found: set[str] = set()

    def add(target: str) -> None:
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    def visit(node: ast.AST) -> None:
        if not with_types and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
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
"""What each module imports to run: the floors bind these."""
GRAPH_WITH_TYPES = {name: _imports(name, with_types=True) for name in MODULES}
"""Type-only imports too: a cycle through one still ties the modules together (each must be read, and changed,
with the other)."""


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


def _loop(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One way round a cycle's component, as files: its first module, the modules it imports on the way back to
    it, and it again."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                return [str(MODULES[m].relative_to(PACKAGE.parent)) for m in [*paths[node], start]]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                todo.append(nxt)
    raise AssertionError(f"{component} is not a cycle")


def test_no_module_imports_itself_through_others_not_even_for_types():
    loops = [" -> ".join(_loop(GRAPH_WITH_TYPES, c)) for c in _cycles(GRAPH_WITH_TYPES)]
    assert loops == [], "import cycles (move what both modules need to the lower one):\n" + "\n".join(loops)


def test_no_package_imports_itself_through_others():
    packages: dict[str, set[str]] = {}
    for name, targets in GRAPH_WITH_TYPES.items():
        packages.setdefault(_top(name), set()).update(_top(t) for t in targets if _top(t) != _top(name))
    assert _cycles(packages) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    planted = {**GRAPH, "dareforge.schema": GRAPH["dareforge.schema"] | {"dareforge.cli.app"}}
    assert any("dareforge.schema" in c and "dareforge.cli.app" in c for c in _cycles(planted))


def test_a_type_only_import_and_an_import_in_a_function_close_a_cycle(tmp_path, monkeypatch):
    module = tmp_path / "hidden.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dareforge.store import Store\n"
        "def f():\n    from dareforge.locking import hold\n"
    )
    monkeypatch.setitem(MODULES, "dareforge.hidden", module)
    assert _imports("dareforge.hidden") == {"dareforge.locking"}
    assert _imports("dareforge.hidden", with_types=True) == {"dareforge.locking", "dareforge.store"}
    planted = {
        **GRAPH_WITH_TYPES,
        "dareforge.errors": GRAPH_WITH_TYPES["dareforge.errors"] | {"dareforge.locking"},
    }
    (component,) = [c for c in _cycles(planted) if "dareforge.errors" in c]
    assert _loop(planted, component) == ["dareforge/errors.py", "dareforge/locking.py", "dareforge/errors.py"]


def test_every_module_imports_only_its_floor_and_below():
    tops = {_top(name) for name in MODULES} - {""}
    assert tops <= set(FLOORS), f"give these a floor in FLOORS: {sorted(tops - set(FLOORS))}"
    upward = [
        f"{name} (floor {FLOORS[_top(name)]}) imports {target} (floor {FLOORS[_top(target)]})"
        for name, targets in GRAPH_WITH_TYPES.items()
        if _top(name)
        for target in targets
        if _top(target) and FLOORS[_top(target)] > FLOORS[_top(name)]
    ]
    assert upward == []


# -- one home per family -----------------------------------------------------------------------------------------
def _family_literals(path: Path, names: set[str]) -> list[str]:
    """Where `path` writes a family's name, or a piece of one ("-IF", "TS-"), as a string (docstrings aside);
    also a quoted name inside a longer string (SQL such as `family = 'QA'`)."""
    pieces = {n[:i] for n in names for i, c in enumerate(n, 1) if c == "-"}
    pieces |= {n[i:] for n in names for i, c in enumerate(n) if c == "-"}
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    where = path.relative_to(PACKAGE.parent) if PACKAGE.parent in path.parents else path
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            if text in names | pieces or any(f"'{n}'" in text for n in names):
                found.append(f"{where}:{node.lineno}: {text[:60]!r}")
    return found


def test_no_code_outside_the_families_asks_which_family_a_task_is():
    """Code that needs a family's behaviour asks its `Family` object: a name compared with a literal (or a
    mapping keyed by names) is a second home that a new family would have to find."""
    from dareforge.families.registry import REGISTERED

    names = set(REGISTERED)
    families_dir = PACKAGE / "families"
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if families_dir not in p.parents]
    paths += sorted((PACKAGE.parent / "dags").glob("*.py"))
    found = [hit for p in paths for hit in _family_literals(p, names)]
    assert found == []


def test_the_family_literal_finder_finds_planted_ones(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        '"""Class-IF in a docstring is words."""\n'
        'a = task.family == "QA"\n'
        'b = family.endswith("-IF")\n'
        "c = \"select * from tasks where family = 'Lake'\"\n"
    )
    hits = _family_literals(planted, {"Class-IF", "QA", "Lake", "Reg-IF"})
    assert sorted(h.split(":")[-2] for h in hits) == ["2", "3", "4"]


MAX_LINES = 600
"""A module longer than this does more than one job: split it by job."""


def test_no_module_is_over_max_lines():
    lines = {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines()) for p in MODULES.values()}
    over = {path: n for path, n in lines.items() if n > MAX_LINES}
    assert over == {}, f"split these by job, to at most {MAX_LINES} lines each"


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
    # the batching of sources: for understand and prepare, then again for generate and check
    assert wiring == {"accepted_sources", "generate_batches"}, "a DAG task that is no stage of the list"
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
        "check",
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
