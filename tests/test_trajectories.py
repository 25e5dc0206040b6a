"""Gold and sampled trajectories, on a store holding the sklearn-iris and sklearn-diabetes tasks (two Class-IF, two
Reg-IF, one Class-MM, one Reg-MM; the release puts one source in train and the other in test).

Everything runs for real: gold trajectories are played by the agent loop in the bubblewrap sandbox, sampled ones
come from the real `openai` client talking to a local scripted server (tests/llm_server.py). The scripted "model"
knows the answers only as a test author does: it sends the reference code read from the private store on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from dareforge.agents import trajectory_id
from dareforge.agents.loop import run_agent
from dareforge.agents.protocol import parse_reply, truncate
from dareforge.config import Config, EndpointConfig, SandboxConfig
from dareforge.context import RunContext
from dareforge.errors import ConfigError
from dareforge.families.registry import pass_bars
from dareforge.publish.release import build_release, load_release
from dareforge.reference_solutions.reference_code import (
    SECTION_KINDS,
    if_reference_code,
    if_reference_sections,
)
from dareforge.reference_solutions.spec import IFSpec, RangeFilter
from dareforge.sandbox import KernelPool, Sandbox, probe
from dareforge.sandbox.environment import SandboxFactory
from dareforge.schema import Task, TaskLimits, Trajectory
from dareforge.store import Store
from dareforge.trajectories import (
    GOLD_ENDPOINT,
    GoldClient,
    SynthesisError,
    gold_replies,
    gold_trajectories,
    is_valid,
    regrade,
    render_table,
    synthesize,
)
from dareforge.trajectories.synthesize import task_set
from tests.llm_server import Fault
from tests.stores import generate_tasks, prediction_only, store_config

needs_sandbox = pytest.mark.skipif(not probe().available, reason=f"no sandbox here: {probe().reason}")

# Specs sampled from the built-in sources, with the sha256 of the reference script the generator wrote for them
# before the script was split into sections (every branch: date parts, category filters, no numeric feature,
# each scaler and encoder, classification and regression); the three with categorical features again when
# GENERATOR_VERSION 5 read categories as text.
CERTIFIED = {
    "4099d8b2a8ecea57eab8145f6a75e803670ee315fde204d40ef904c206eef4a0": (
        '{"task_type":"regression","id_column":"row_id","target":"Miles_per_Gallon",'
        '"filters":[{"kind":"range","column":"Cylinders","low":3.0,"high":8.0},{"kind":"range",'
        '"column":"Displacement","low":68.0,"high":455.0},{"kind":"category","column":"Origin",'
        '"allowed":["Europe","Japan","USA"]}],"numeric":["Weight_in_lbs","Cylinders","Horsepower",'
        '"Displacement"],"categorical":["Origin"],"date_parts":{"column":"Year","parts":["month",'
        '"dayofweek"]},"numeric_imputer":"mean","categorical_imputer":"constant","scaler":"standard",'
        '"encoder":"onehot","model":{"name":"GradientBoostingRegressor","module":"sklearn.ensemble",'
        '"params":{"max_depth":2,"n_estimators":60,"random_state":931}},"seed":0}'
    ),
    "b70baf980409445ac98426ddea3dfad025f2e3cbf915f07fc9220c96159a807a": (
        '{"task_type":"regression","id_column":"row_id","target":"yield","filters":[{"kind":"category",'
        '"column":"site","allowed":["Crookston","Duluth","Grand Rapids","Morris","University Farm",'
        '"Waseca"]}],"numeric":[],"categorical":["variety","site"],"date_parts":null,'
        '"numeric_imputer":"mean","categorical_imputer":"most_frequent","scaler":"none",'
        '"encoder":"ordinal","model":{"name":"Ridge","module":"sklearn.linear_model",'
        '"params":{"alpha":10.0}},"seed":49}'
    ),
    "8b5dc99c1600f43adc9be3719b899460705cc5d52cae6e0710e763f5d7ce1806": (
        '{"task_type":"regression","id_column":"row_id","target":"invest","filters":[{"kind":"range",'
        '"column":"capital","low":0.8,"high":2226.3},{"kind":"category","column":"firm",'
        '"allowed":["American Steel","Atlantic Refining","Chrysler","Diamond Match","General Electric",'
        '"General Motors","Goodyear","IBM","US Steel","Union Oil","Westinghouse"]}],'
        '"numeric":["capital"],"categorical":["firm"],"date_parts":null,"numeric_imputer":"median",'
        '"categorical_imputer":"constant","scaler":"minmax","encoder":"onehot",'
        '"model":{"name":"RandomForestRegressor","module":"sklearn.ensemble","params":{"max_depth":8,'
        '"n_estimators":25,"n_jobs":1,"random_state":734}},"seed":3}'
    ),
    "6ba764c5e7d19cf31728d9fe90b52f02974dcdf59dea708d0182e583693b2d30": (
        '{"task_type":"regression","id_column":"row_id","target":"disease_progression",'
        '"filters":[{"kind":"range","column":"s1","low":-0.12678066991651324,"high":0.15391371315651542},'
        '{"kind":"range","column":"s2","low":-0.11279472982329314,"high":0.1558866503921278},'
        '{"kind":"range","column":"sex","low":-0.044641636506989144,"high":0.05068011873981862}],'
        '"numeric":["s1","s2","age","s3","bp","sex"],"categorical":[],"date_parts":null,'
        '"numeric_imputer":"mean","categorical_imputer":"constant","scaler":"none","encoder":"onehot",'
        '"model":{"name":"KNeighborsRegressor","module":"sklearn.neighbors","params":{"n_neighbors":5}},'
        '"seed":5}'
    ),
    "e61f9a56907dfefe059828e3754e69ea131bca073cbb66ecbbcf41cdfb578b34": (
        '{"task_type":"classification","id_column":"row_id","target":"vote","filters":[{"kind":"range",'
        '"column":"popul","low":0.0,"high":7300.0}],"numeric":["PID","popul"],"categorical":[],'
        '"date_parts":null,"numeric_imputer":"median","categorical_imputer":"most_frequent",'
        '"scaler":"none","encoder":"onehot","model":{"name":"LogisticRegression",'
        '"module":"sklearn.linear_model","params":{"C":1.0,"max_iter":2000,"random_state":651}},'
        '"seed":57}'
    ),
}


# -- fixtures -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Config:
    """An iris + diabetes store with a release (no validation run: every candidate task is released)."""
    root = tmp_path_factory.mktemp("trajectories")
    cfg = prediction_only(store_config(root, ["sklearn-iris", "sklearn-diabetes"]))
    build_release(generate_tasks(RunContext.from_config(cfg, show_progress=False)), "dareforge")
    return cfg


def make_ctx(cfg: Config, root: str | None = None, **changes) -> RunContext:
    cfg = cfg.model_copy(deep=True)
    if root is not None:
        cfg.store.root = root
    for section, values in changes.items():
        for key, value in values.items():
            setattr(getattr(cfg, section), key, value)
    return RunContext(config=cfg, store=Store(cfg.store.root), show_progress=False)


@pytest.fixture(scope="module")
def tasks(built) -> dict[str, Task]:
    return {t.id: t for t in load_release(make_ctx(built), "dareforge").tasks()}


@pytest.fixture(scope="module")
def splits(built) -> dict[str, str]:
    return load_release(make_ctx(built), "dareforge").splits


def if_tasks(tasks: dict[str, Task]) -> list[Task]:
    return sorted((t for t in tasks.values() if t.family.endswith("-IF")), key=lambda t: t.id)


def task_file(cfg: Config, task: Task, side: str, name: str) -> Path:
    return Path(cfg.store.root) / "tasks" / task.id / side / name


# Wall-clock limits only a hung run reaches. Agent code runs at `sandbox.nice` 10, so on a busy machine a healthy
# kernel may take minutes to start or to fit a model; with the production limits (a 60 s start, the task's 200 s
# per execution) a slow run became an `execution-limit` and a verdict here depended on the machine's load. No test
# in this module is about a time limit firing (tests/test_agents.py proves that with an endless loop); the
# CPU-time limit (`sandbox.cpu_seconds`) still binds.
HUNG_S = 3600.0


def cold_sandboxes(inputs: Path, workspace: Path, seconds: float) -> Sandbox:
    return Sandbox(inputs, workspace, SandboxConfig(), HUNG_S, start_timeout_s=HUNG_S)


@contextlib.contextmanager
def patient_pool(size: int) -> Iterator[SandboxFactory]:
    """Pooled sandboxes, as in production, with `HUNG_S` for a kernel's start and each execution."""
    pool = KernelPool(SandboxConfig(), size, seconds_per_execution=HUNG_S, start_timeout_s=HUNG_S)
    try:
        yield lambda inputs, workspace, seconds: pool.acquire(inputs, workspace, seconds_per_execution=HUNG_S)
    finally:
        pool.close()


@pytest.fixture(scope="module")
def gold(built):
    """The gold trajectories of every IF task of the release (both splits), played once for the module."""
    with patient_pool(2) as sandboxes:
        return gold_trajectories(make_ctx(built), split="all", workers=2, sandbox_factory=sandboxes)


# -- the reference script as sections ---------------------------------------------------------------------------
def test_reference_sections_join_to_the_certified_code(built, tasks):
    for digest, text in CERTIFIED.items():
        spec = IFSpec.model_validate_json(text)
        sections = if_reference_sections(spec)
        code = if_reference_code(spec)
        assert "".join(s.code for s in sections) == code
        assert hashlib.sha256(code.encode()).hexdigest() == digest, (
            f"reference code changed for {spec.target}"
        )
        kinds = [s.kind for s in sections]
        assert kinds == sorted(kinds, key=SECTION_KINDS.index) and kinds.count("filter") == len(spec.filters)
        assert all(s.title and s.code.endswith("\n") for s in sections)
    for task in if_tasks(tasks):  # what generate stored, and certified, is the joined sections
        stored = task_file(built, task, "private", "reference.py").read_text()
        assert "".join(s.code for s in if_reference_sections(IFSpec.model_validate_json(task.spec))) == stored


# -- gold trajectories --------------------------------------------------------------------------------------------
def _number_after(text: str, label: str) -> int:
    match = re.search(re.escape(label) + r"\s*(\d+)", text)
    assert match, f"{label!r} not in output:\n{text}"
    return int(match.group(1))


@needs_sandbox
def test_gold_trajectories_are_verified_with_real_outputs(built, tasks, gold):
    expected = if_tasks(tasks)
    assert len(expected) == 4 and {t.family for t in expected} == {"Class-IF", "Reg-IF"}
    assert (gold.tasks, len(gold.verified), gold.failed, gold.skipped) == (4, 4, {}, {})
    assert (gold.ran, gold.reused, gold.partition) == (4, 0, "gold--dareforge") and gold.per_minute > 0
    by_task = {t.task_id: t for t in gold.trajectories}
    for task in expected:
        t = by_task[task.id]
        assert (t.outcome, t.score, t.passed) == ("graded", 1.0, True), t.detail
        assert (t.endpoint, t.model) == (GOLD_ENDPOINT.name, GOLD_ENDPOINT.model)
        assert t.id == trajectory_id(task.id, "gold", GOLD_ENDPOINT.model, 0.0, 0, "gold")
        executions = [s for s in t.steps if s.role == "execution"]
        assert len(executions) >= 4 and all(s.content.strip() and s.error is None for s in executions)
        assert [f.name for f in t.files] == ["predictions.csv"]
        # what the kernel printed is what pandas says on the host
        spec = IFSpec.model_validate_json(task.spec)
        train = pd.read_csv(task_file(built, task, "public", "train.csv"))
        test = pd.read_csv(task_file(built, task, "public", "test.csv"))
        look, cleaning, fitting, check = (s.content for s in executions[:4])
        assert f"train.csv: {len(train)} rows, {train.shape[1]} columns; test.csv: {len(test)} rows" in look
        assert _number_after(cleaning, "training rows before filtering:") == len(train)
        for f in spec.filters:
            values = train[f.column]
            if isinstance(f, RangeFilter):
                keep = values.between(f.low, f.high)
            else:
                keep = values.astype(str).isin(f.allowed)
            train = train[values.isna() | keep]
            assert _number_after(cleaning, f"rows left after the {f.column} filter:") == len(train)
        assert len(train) < _number_after(cleaning, "training rows before filtering:")  # the noise went
        assert f"X: ({len(train)}, {len(spec.numeric_features) + len(spec.categorical)})" in fitting
        assert spec.model.name in fitting
        assert f"predictions.csv: ({len(test)}, 2)" in check and "missing predictions: 0" in check
        # each observation went back to the model, and every reply follows the protocol
        observations = [s.content for s in t.steps if s.role == "user"][1:]
        assert all(truncate(e.content) in o for e, o in zip(executions, observations, strict=True))
        replies = [s for s in t.steps if s.role == "assistant"]
        assert all(parse_reply(s.content).reasoning for s in replies)
        assert parse_reply(replies[-1].content).answer and replies[-1].code is None
    stored = make_ctx(built).store.read_partition(Trajectory, "gold--dareforge")
    assert {t.id for t in stored} == {t.id for t in gold.trajectories}


@needs_sandbox
def test_every_gold_trajectory_regrades_to_one(built, tasks, gold):
    """Replayed in fresh sandboxes, each trajectory's code writes predictions that grade 1.0 and have the recorded
    sha256; one record with a forged checksum is caught (its code still grades 1.0, but not to what it claims)."""
    ctx = make_ctx(built)
    found = task_set(ctx, "dareforge", "all")
    first, *rest = gold.trajectories
    forged = first.model_copy(
        update={"files": [f.model_copy(update={"sha256": "0" * 64}) for f in first.files]}
    )

    def replay(t: Trajectory):
        return regrade(ctx, t, tasks[t.task_id], found.files(tasks[t.task_id]), cold_sandboxes)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(replay, [forged, *rest]))
    assert all(r.score == 1.0 for r in results), results
    assert [r.ok for r in results] == [False] + [True] * len(rest)
    assert not results[0].same_predictions and all(r.same_predictions for r in results[1:])
    nothing = regrade(
        ctx, first.model_copy(update={"files": []}), tasks[first.task_id], found.files(tasks[first.task_id])
    )
    assert not nothing.ok and "no predictions.csv" in nothing.detail


@needs_sandbox
def test_gold_rerun_reuses_everything_and_defaults_to_the_train_split(built, gold, splits):
    again = gold_trajectories(make_ctx(built), split="all")
    assert (again.ran, again.reused, len(again.verified)) == (0, 4, 4)
    assert [t.id for t in again.trajectories] == [t.id for t in gold.trajectories]
    train = gold_trajectories(make_ctx(built))  # default split: train
    train_ids = {t.task_id for t in train.trajectories}
    assert train_ids and all(splits[i] == "train" for i in train_ids)
    assert (train.ran, train.tasks) == (0, sum(splits[t.task_id] == "train" for t in gold.trajectories))


@needs_sandbox
def test_gold_fits_a_smaller_turn_limit(built, tasks):
    task = if_tasks(tasks)[0].model_copy(update={"limits": TaskLimits(turns=2, seconds_per_execution=60)})
    replies = gold_replies(task)
    assert len(replies) == 3 and parse_reply(replies[-1]).answer
    answers = task_file(built, task, "private", "reference_predictions.csv")
    t = asyncio.run(
        run_agent(
            task,
            task_file(built, task, "public", "train.csv").parent,
            GoldClient.for_tasks([task]),
            cold_sandboxes,
            answers=answers,
        )
    )
    assert (t.outcome, t.score, t.passed) == ("graded", 1.0, True), t.detail
    assert sum(s.role == "execution" for s in t.steps) == 2


@needs_sandbox
def test_unverified_gold_is_kept_and_reported_with_why(built, tasks, tmp_path):
    """Store tasks (no release): a reference run that no longer matches its code is reported, not hidden."""
    root = tmp_path / "store"
    shutil.copytree(built.store.root, root)
    task = if_tasks(tasks)[0]
    answers = root / "tasks" / task.id / "private" / "reference_predictions.csv"
    frame = pd.read_csv(answers)
    target = task.metric.target_columns[0]
    if pd.api.types.is_numeric_dtype(frame[target]):
        frame.loc[0, target] = frame.loc[0, target] + 1.0
    else:
        other = sorted(set(frame[target]) - {frame.loc[0, target]})[0]
        frame.loc[0, target] = other
    frame.to_csv(answers, index=False)
    ctx = make_ctx(built, str(root))
    report = gold_trajectories(
        ctx, release=None, task_ids=[task.id], workers=1, sandbox_factory=cold_sandboxes
    )
    assert (report.source, report.partition, report.tasks, report.verified) == ("store", "gold--store", 1, [])
    assert report.failed[task.id].startswith("instruction-non-adherence: ")
    (stored,) = ctx.store.read_partition(Trajectory, "gold--store")
    assert stored.passed is False and stored.score is not None and stored.score < 1.0
    with pytest.raises(SynthesisError, match="not-a-task"):
        gold_trajectories(ctx, release=None, task_ids=["not-a-task"])


def test_gold_client_never_makes_up_a_reply():
    client = GoldClient({"the task": ["<reasoning>r</reasoning><answer>a</answer>"]})
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "another task"}]
    assert asyncio.run(client.chat(messages)).error
    messages[1]["content"] = "the task"
    assert asyncio.run(client.chat(messages)).text.endswith("</answer>")
    messages.append({"role": "assistant", "content": "x"})
    assert "1 replies" in asyncio.run(client.chat(messages)).error


# -- sampled trajectories -------------------------------------------------------------------------------------
def reply(code: str | None = None, answer: str | None = None) -> str:
    text = "<reasoning>Next step.</reasoning>\n"
    if code is not None:
        text += f"<code>\n{code}\n</code>\n"
    if answer is not None:
        text += f"<answer>{answer}</answer>"
    return text


MAJORITY = (
    "import pandas as pd\n"
    "train, test = pd.read_csv('train.csv'), pd.read_csv('test.csv')\n"
    "target = [c for c in train.columns if c not in test.columns][0]\n"
    "pd.DataFrame({test.columns[0]: test[test.columns[0]], target: train[target].mode()[0]})"
    ".to_csv('predictions.csv', index=False)"
)


ANSWER_AT_ONCE = reply(answer="predictions.csv is written.")  # no code: no kernel starts, no-code


def sampling_script(plans: dict[str, tuple[str, str]], good_per_task: int):
    """Per (model, task), the first `good_per_task` episodes of "good-model" get the good first reply, its others
    the bad one; "bad-model" answers at once. After its first execution an episode answers."""
    started: dict[tuple[str, str], int] = {}
    lock = threading.Lock()

    def script(request):
        prompt = request.messages[1]["content"]
        for instruction, (good, bad) in plans.items():
            if instruction not in prompt:
                continue
            if request.body["model"] != "good-model" or any(
                m["role"] == "assistant" for m in request.messages
            ):
                return ANSWER_AT_ONCE
            with lock:
                n = started[instruction] = started.get(instruction, 0) + 1
            return good if n <= good_per_task else bad
        return Fault(status=400, message="no script for this task")

    return script


@needs_sandbox
def test_synthesize_samples_k_per_task_and_endpoint_and_counts_valid(built, tasks, splits, server):
    server.reset()
    fields = {"base_url": server.url, "backoff_s": 0.01, "max_concurrency": 2}
    endpoints = [
        EndpointConfig(name="alpha", model="good-model", **fields),
        EndpointConfig(name="beta", model="bad-model", **fields),
    ]
    ctx = make_ctx(built, llm={"endpoints": endpoints}, synthesize={"temperature": 0.9, "samples": 2})
    train = [t for t in tasks.values() if splits[t.id] == "train"]
    chosen = [
        next(t for t in train if t.family.endswith("-IF")),
        next(t for t in train if t.family.endswith("-MM")),
    ]
    if_task, mm_task = chosen
    assert (
        mm_task.scores.strong > pass_bars(ctx.config.synthesize.pass_bars)[mm_task.family]
    )  # its strong code passes
    plans = {
        if_task.instruction.strip(): (
            reply(task_file(built, if_task, "private", "reference.py").read_text()),
            ANSWER_AT_ONCE,
        ),
        mm_task.instruction.strip(): (
            reply(task_file(built, mm_task, "private", "strong_reference.py").read_text()),
            reply(MAJORITY),
        ),
    }
    server.script(sampling_script(plans, good_per_task=1))

    with patient_pool(2) as sandboxes:  # pooled sandboxes, as in production
        report = synthesize(ctx, task_ids=[t.id for t in chosen], sandbox_factory=sandboxes)

    assert (report.release, report.split, report.samples, report.temperature) == (
        "dareforge",
        "train",
        2,
        0.9,
    )
    assert [e.endpoint for e in report.endpoints] == ["alpha", "beta"] and report.ran == 8
    alpha, beta = report.families("alpha"), report.families("beta")
    assert {f: (c.attempts, c.valid) for f, c in alpha.items()} == {
        if_task.family: (2, 1),
        mm_task.family: (2, 1),
    }
    assert alpha[if_task.family].outcomes == {"graded": 1, "no-code": 1}
    assert alpha[mm_task.family].outcomes == {"graded": 2}  # the majority vote is graded, below the bar
    assert {f: (c.attempts, c.valid) for f, c in beta.items()} == {
        if_task.family: (2, 0),
        mm_task.family: (2, 0),
    }
    assert len(report.valid()) == len(report.valid("alpha")) == 2
    assert all(c.outcomes == {"no-code": 2} for c in beta.values())
    for samples in report.endpoints:
        assert samples.partition == f"sampled--{samples.endpoint}--dareforge"
        stored = ctx.store.read_partition(Trajectory, samples.partition)
        assert {t.id for t in stored} == {t.id for t in samples.trajectories}
        for t in samples.trajectories:
            assert t.temperature == 0.9
            assert t.id == trajectory_id(t.task_id, samples.endpoint, samples.model, 0.9, t.sample, "sample")
            assert t.passed == is_valid(t, report.pass_bars, report.task_bars)
        assert sorted((t.task_id, t.sample) for t in samples.trajectories) == sorted(
            (task.id, s) for task in chosen for s in range(2)
        )
    ids = [t.id for e in report.endpoints for t in e.trajectories]
    assert len(set(ids)) == 8  # samples and endpoints all differ
    assert {r.body["temperature"] for r in server.requests} == {0.9}

    console = Console(width=240, record=True)
    console.print(render_table(report))
    table = console.export_text()
    assert re.search(rf"alpha\s.*{mm_task.family}\s.*\b2\b.*\b1\b", table) and "no-code" in table

    # validity follows the configured bars, recomputed from stored scores
    report.pass_bars = {**report.pass_bars, mm_task.family: 1.01}
    assert report.families("alpha")[mm_task.family].valid == 0

    asked = server.count
    again = synthesize(ctx, task_ids=[t.id for t in chosen], sandbox_factory=cold_sandboxes)
    assert (again.ran, again.reused, server.count) == (0, 8, asked)
    assert {f: c.valid for f, c in again.families("alpha").items()} == {if_task.family: 1, mm_task.family: 1}


def test_synthesize_refuses_an_unknown_endpoint_by_name(built, server):
    asked = server.count
    ctx = make_ctx(built, llm={"endpoints": [EndpointConfig(name="alpha", base_url=server.url, model="m")]})
    with pytest.raises(ConfigError, match=r"no endpoint named 'nope'.*'alpha'"):
        synthesize(ctx, endpoints=["alpha", "nope"])
    ctx = make_ctx(built, synthesize={"endpoints": ["missing"]}, llm={"endpoints": ctx.config.llm.endpoints})
    with pytest.raises(ConfigError, match="'missing'"):
        synthesize(ctx)
    with pytest.raises(ConfigError, match=r"llm\.endpoints"):
        synthesize(make_ctx(built))
    assert server.count == asked  # names are checked before anything is played
