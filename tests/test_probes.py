"""The shortcut probe, obscured variants and the memorization probe: the real `openai` client over real HTTP
(tests/llm_server.py), the real bubblewrap sandbox, and real reference runs, on an iris-only store (one
Class-IF and one Class-MM task).

The scripted "models" know what a test author tells them: a model that "knows" a task writes its true answers
as literals (read on the host from the private store), one that does not writes a constant; a "pipeline" model
runs the task's reference code, adapted to an obscured variant through the variant's map.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dareforge.agents import PASS_BARS, answers_file
from dareforge.config import Config, EndpointConfig, ObscureConfig
from dareforge.context import RunContext
from dareforge.errors import ConfigError
from dareforge.probes.memorization import probe_memorization
from dareforge.probes.obscure import (
    VariantWriter,
    apply_map,
    build_map,
    load_map,
    obscure_spec,
    obscure_tasks,
    settings_key,
    variants_of,
)
from dareforge.probes.shortcut import CHECKS_VERSION, TEST_IDS, probe_shortcuts, shortcut_candidates
from dareforge.publish.release import select_tasks
from dareforge.reference_solutions.graders import grade
from dareforge.reference_solutions.reference_code import if_reference_code
from dareforge.reference_solutions.spec import IFSpec
from dareforge.sandbox import probe
from dareforge.schema import (
    ColumnKind,
    ColumnProfile,
    PreparedSource,
    ProbeResult,
    Task,
    TaskType,
    Trajectory,
    Validation,
    Verdict,
)
from dareforge.store import Store
from dareforge.validators.gate import gate
from tests.llm_server import LLMServer
from tests.stores import generate_tasks, prediction_only, store_config

pytestmark = pytest.mark.skipif(not probe().available, reason=f"no sandbox here: {probe().reason}")

DONE = "<reasoning>The predictions are written.</reasoning>\n<answer>predictions.csv is written.</answer>"


# -- fixtures -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """An iris-only store with its tasks generated (no validation: the gate has never run)."""
    root = tmp_path_factory.mktemp("probes")
    cfg = prediction_only(store_config(root, ["sklearn-iris"]))
    cfg.generate.if_variants = 1
    generate_tasks(RunContext.from_config(cfg, show_progress=False))
    return root


@pytest.fixture(scope="module")
def obscured(built, tmp_path_factory):
    """A copy of the store with every task's obscured variant, and the first run's report."""
    root = copy_store(built, tmp_path_factory.mktemp("obscured"))
    ctx = make_ctx(root)
    return root, obscure_tasks(ctx)


def copy_store(built: Path, to: Path) -> Path:
    shutil.copytree(built / "store", to / "store")
    return to


def make_ctx(root: Path, server: LLMServer | None = None, models: tuple[str, ...] = ()) -> RunContext:
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    if server is not None:
        cfg.llm.endpoints = [
            EndpointConfig(name=m, base_url=server.url, model=m, backoff_s=0.01, max_concurrency=2)
            for m in models
        ]
    return RunContext(config=cfg, store=Store(cfg.store.root), show_progress=False)


def originals(ctx: RunContext) -> dict[str, Task]:
    """Family -> the original (not a variant) task."""
    return {t.family: t for t in ctx.store.iter_records(Task) if t.variant_of is None}


def private(ctx: RunContext, task: Task, name: str) -> str:
    return ctx.store.read_bytes(f"tasks/{task.id}/private/{name}").decode()


def code_reply(code: str) -> str:
    return f"<reasoning>Write the predictions.</reasoning>\n<code>\n{code}\n</code>"


def literal_code(text: str) -> str:
    """Code writing `text` as predictions.csv: what a model that memorized the answers could write."""
    return f"open('predictions.csv', 'w').write({text!r})\nprint('recalled')"


def constant_code(task: Task, source: str) -> str:
    """Predict one constant label for every row of `source` (test_ids.csv when the data is withheld)."""
    (target,) = task.metric.target_columns
    return (
        "import os\nimport pandas as pd\n"
        f"rows = pd.read_csv({source!r})[{task.metric.key_columns!r}]\n"
        f"rows[{target!r}] = 'versicolor'\n"
        "rows.to_csv('predictions.csv', index=False)\n"
        "print('FILES', sorted(os.listdir('.')))"
    )


def scripted(plans: dict[str, dict[str, str]]):
    """A server script: per model, instruction text -> the code of its first reply; then it answers."""

    def reply(request):
        if any(m["role"] == "assistant" for m in request.messages):
            return DONE
        prompt = request.messages[1]["content"]
        plan = plans[request.body["model"]]
        return code_reply(plan[max((text for text in plan if text in prompt), key=len)])

    return reply


# -- shortcut probe ---------------------------------------------------------------------------------------------
def test_the_run_s_probe_stage_probes_the_tasks_it_is_given(built, server, tmp_path):
    """The stage's task ids reach the probe whether or not the run caps the tasks its models get."""
    from dareforge.trajectories.models import RunModels
    from dareforge.trajectories.run_stages import probe_with

    ctx = make_ctx(copy_store(built, tmp_path), server, ("knows",))
    server.reset()
    server.script(scripted(shortcut_plans(ctx, "knows", ())))
    unknown = originals(ctx)["Class-MM"]
    report = probe_with(ctx, RunModels(["knows"], local=False, why="configured"), [unknown.id])
    assert report.labels("probed") == [unknown.id]


def shortcut_plans(ctx: RunContext, knower: str, guessers: tuple[str, ...]) -> dict[str, dict[str, str]]:
    tasks = originals(ctx)
    known = tasks["Class-IF"]
    guesses = {t.instruction.strip(): constant_code(t, TEST_IDS) for t in tasks.values()}
    recall = {**guesses, known.instruction.strip(): literal_code(private(ctx, known, answers_file(known)))}
    return {knower: recall, **{g: guesses for g in guessers}}


def test_the_probe_flags_a_task_a_model_knows_and_keeps_one_it_does_not(built, server, tmp_path):
    root = copy_store(built, tmp_path)
    ctx = make_ctx(root, server, ("knows",))
    server.reset()
    server.script(scripted(shortcut_plans(ctx, "knows", ())))
    tasks = originals(ctx)
    known, unknown = tasks["Class-IF"], tasks["Class-MM"]

    report = probe_shortcuts(ctx)

    assert (report.counts["played"], report.reused) == (2, 0) and "by knows:" in report.lines[0]
    assert report.labels("flagged") == [known.id]
    findings = {f.task_id: f for f in ctx.store.iter_records(Validation) if f.check == "shortcut"}
    assert findings[known.id].score == 1.0 and findings[unknown.id].score == 0.0
    assert findings[known.id].reason == "1 of 1 models solved it without the data: knows"
    assert findings[known.id].checks_version == CHECKS_VERSION
    details = json.loads(findings[known.id].details)
    assert details["knows"]["solved"] is True and details["knows"]["best_score"] == 1.0
    # stored apart from the validate stage's partitions; the probe writes no verdict, the gate (next in the
    # pipeline) re-decides both tasks
    assert not [w for w in report.written if "verdicts" in w]
    gate(ctx)
    assert ctx.store.exists(f"tables/validations/shortcut--{known.source_id}.parquet")
    verdicts = {v.task_id: v for v in ctx.store.iter_records(Verdict)}
    assert not verdicts[known.id].accepted and verdicts[unknown.id].accepted
    assert "validate.max_shortcut_share=0.5" in verdicts[known.id].reasons[0]
    assert verdicts[known.id].reasons[0].startswith("shortcut: 1 of 1 models")
    selection = select_tasks(ctx)
    assert [t.id for t in selection.tasks] == [unknown.id]
    assert selection.excluded["rejected by the validation gate"] == 1

    # one result per task, endpoint and sample; the agent saw only the test ids
    results = ctx.store.read_partition(ProbeResult, "no-data--knows")
    assert sorted((r.task_id, r.probe, r.endpoint, r.sample, r.passed) for r in results) == sorted(
        [(known.id, "no-data", "knows", 0, True), (unknown.id, "no-data", "knows", 0, False)]
    )
    trajectories = {t.id: t for t in ctx.store.read_partition(Trajectory, "probe-no-data--knows")}
    guess = trajectories[next(r.trajectory_id for r in results if r.task_id == unknown.id)]
    assert "FILES ['predictions.csv', 'test_ids.csv']" in guess.steps[3].content
    prompt = guess.steps[1].content
    assert "data of this task is withheld" in prompt and f"`{TEST_IDS}`" in prompt
    assert "`train.csv` (" not in prompt and "`test.csv` (" not in prompt
    assert guess.score is not None and guess.score < PASS_BARS["Class-MM"]

    # a second run plays nothing and writes nothing new
    requests = server.count
    again = probe_shortcuts(ctx)
    assert (again.counts["played"], again.reused, server.count) == (0, 2, requests)
    assert again.outcomes["probed"] == report.outcomes["probed"]
    assert not [w for w in again.written if "probes" in w or "validations" in w]

    # a second model that does not know the task: half the models solve it, not more than 0.5 -> kept;
    # the first model's stored attempts still count and are not played again
    ctx = make_ctx(root, server, ("knows", "guesses"))
    server.script(scripted(shortcut_plans(ctx, "knows", ("guesses",))))
    both = probe_shortcuts(ctx)
    assert (both.counts["played"], both.reused) == (2, 2)
    assert both.outcomes["probed"][known.id] == "1 of 2 models solved it without the data: knows"
    assert both.labels("flagged") == []
    gate(ctx)
    verdicts = {v.task_id: v for v in ctx.store.iter_records(Verdict)}
    assert verdicts[known.id].accepted and verdicts[unknown.id].accepted
    assert {r.endpoint for r in ctx.store.iter_records(ProbeResult)} == {"knows", "guesses"}


def test_only_tasks_the_gate_accepted_are_probed(built, tmp_path):
    ctx = make_ctx(copy_store(built, tmp_path))
    tasks = originals(ctx)
    assert {t.id for t in shortcut_candidates(ctx)} == {t.id for t in tasks.values()}  # no gate yet
    leaky, shortcut = tasks["Class-MM"], tasks["Class-IF"]
    findings = [
        Validation(
            task_id=leaky.id, source_id=leaky.source_id, check="leakage-feature", score=0.99, reason="x", checks_version="t"
        ),
        Validation(
            task_id=shortcut.id, source_id=shortcut.source_id, check="shortcut", score=1.0, reason="y", checks_version="t"
        ),
    ]  # fmt: skip
    ctx.store.write_records("test", findings)
    gate(ctx)
    # rejected for leakage: not probed; rejected only for a shortcut: probed again (a new model may clear it)
    assert [t.id for t in shortcut_candidates(ctx)] == [shortcut.id]


def test_endpoints_come_from_the_config_and_unknown_names_fail(built, server, tmp_path):
    ctx = make_ctx(copy_store(built, tmp_path))
    with pytest.raises(ConfigError, match=r"`llm\.endpoints` is empty.*`probe\.endpoints`"):
        probe_shortcuts(ctx)
    ctx = make_ctx(copy_store(built, tmp_path / "b"), server, ("one",))
    with pytest.raises(ConfigError, match=r"no endpoint named 'two' under `llm\.endpoints`"):
        probe_shortcuts(ctx, endpoints=["two"])
    ctx.config.probe.endpoints = ["three"]
    with pytest.raises(ConfigError, match="'three'"):
        probe_shortcuts(ctx)


# -- obscured variants ------------------------------------------------------------------------------------------
def test_obscured_variants_hide_names_values_and_ids_and_certify(obscured):
    root, report = obscured
    ctx = make_ctx(root)
    tasks = originals(ctx)
    variants = variants_of(ctx)
    assert (len(report.labels("variants")), report.outcomes.get("rejected"), report.failures) == (2, None, {})
    assert set(variants) == {t.id for t in tasks.values()}

    store = Path(ctx.config.store.root)
    for family, original in tasks.items():
        variant = variants[original.id]
        assert (variant.family, variant.status, variant.source_id) == (
            family,
            "candidate",
            original.source_id,
        )
        assert variant.id != original.id and variant.variant_of == original.id
        names = {c for f in original.public_files for c in f.columns or []}
        train = pd.read_csv(store / "tasks" / original.id / "public" / "train.csv")
        labels = set(train[original.metric.target_columns[0]])
        ids = set(pd.read_csv(store / "tasks" / original.id / "public" / "test.csv")["row_id"].astype(str))
        assert labels == {"setosa", "versicolor", "virginica"}
        public = {
            f.name: (store / "tasks" / variant.id / "public" / f.name).read_text()
            for f in variant.public_files
        }
        texts = [variant.instruction, *public.values(), private(ctx, variant, answers_file(variant))]
        for text in texts:
            assert not [n for n in names | labels if n in text], "an original name or label leaked"
        (key,) = variant.metric.key_columns
        new_ids = set(pd.read_csv(store / "tasks" / variant.id / "public" / "test.csv")[key].astype(str))
        assert len(new_ids) == len(ids) and not new_ids & ids
        answers = pd.read_csv(store / "tasks" / variant.id / "private" / "answers.csv")
        assert set(answers[key].astype(str)) == new_ids

    # IF: the original workflow pushed through the map is exactly the variant's certified reference
    if_original, if_variant = tasks["Class-IF"], variants[tasks["Class-IF"].id]
    adapted = obscure_spec(IFSpec.model_validate_json(if_original.spec), load_map(ctx, if_variant))
    assert adapted == IFSpec.model_validate_json(if_variant.spec)
    assert private(ctx, if_variant, "reference.py") == if_reference_code(adapted)
    assert "reference_predictions.csv" in {f.name for f in if_variant.private_files}
    # MM: a correct pipeline scores about the same on renamed, rescaled, re-keyed data
    mm_original, mm_variant = tasks["Class-MM"], variants[tasks["Class-MM"].id]
    assert mm_variant.scores.strong == pytest.approx(mm_original.scores.strong, abs=0.1)

    # a memorized answer scores nothing on the variant: the original answers file, or the original ids and
    # labels under the variant's column names
    for original in tasks.values():
        variant = variants[original.id]
        truth = store / "tasks" / variant.id / "private" / answers_file(variant)
        recalled = store / "tasks" / original.id / "private" / answers_file(original)
        assert (
            grade(
                original.metric, recalled, store / "tasks" / original.id / "private" / answers_file(original)
            ).score
            == 1.0
        )
        assert grade(variant.metric, recalled, truth).score == 0.0
        renamed = pd.read_csv(recalled).set_axis(
            variant.metric.key_columns + variant.metric.target_columns, axis=1
        )
        result = grade(variant.metric, renamed, truth)
        assert result.score == 0.0 and "missing" in result.error


def test_a_variant_whose_workflow_differs_from_the_original_is_rejected(obscured):
    """The builder re-samples the workflow on the obscured data; if the original was generated under other
    settings the two differ, and the variant says so instead of posing as the original's twin."""
    root, report = obscured
    ctx = make_ctx(root)
    original = originals(ctx)["Class-IF"]
    variant = variants_of(ctx)[original.id]
    writer = VariantWriter(ctx, None, report, original, load_map(ctx, variant), settings_key(ctx))
    assert writer.task_id("Class-IF", 0, "any") == variant.id
    assert writer.mismatch({"metric": variant.metric, "spec": variant.spec}) is None
    spec = IFSpec.model_validate_json(variant.spec)
    moved = spec.model_copy(
        update={"filters": [f.model_copy(update={"low": f.low - 1}) for f in spec.filters]}
    )
    assert "workflow differs" in writer.mismatch({"metric": variant.metric, "spec": moved.model_dump_json()})
    renamed = variant.metric.model_copy(update={"target_columns": ["y"]})
    assert "metric differs" in writer.mismatch({"metric": renamed, "spec": variant.spec})


def test_variants_are_never_released_nor_rebuilt(obscured):
    root, report = obscured
    ctx = make_ctx(root)
    selection = select_tasks(ctx)
    assert {t.id for t in selection.tasks} == {t.id for t in originals(ctx).values()}
    assert selection.excluded["obscured variant (for the memorization probe, never released)"] == 2
    assert {v.id for v in variants_of(ctx).values()} == set(report.labels("variants"))
    assert ctx.store.exists("tables/tasks/obscured--builtin.sklearn-iris.parquet")

    again = obscure_tasks(ctx)
    assert (again.written, again.reused, len(again.labels("variants"))) == ([], 2, 2)


# -- memorization probe -----------------------------------------------------------------------------------------
def centroid_code(task: Task) -> str:
    """A correct (if plain) pipeline: nearest class centroid on standardized features, pandas only. Standardizing
    makes it blind to per-column affine maps and names, so it scores the same on an obscured variant."""
    (key,), (target,) = task.metric.key_columns, task.metric.target_columns
    return (
        "import numpy as np\nimport pandas as pd\n"
        "train, test = pd.read_csv('train.csv'), pd.read_csv('test.csv')\n"
        f"features = [c for c in test.columns if c != {key!r}]\n"
        "mean, std = train[features].mean(), train[features].std()\n"
        f"centroids = ((train[features] - mean) / std).groupby(train[{target!r}]).mean()\n"
        "z = ((test[features] - mean) / std).to_numpy()\n"
        "nearest = ((z[:, None, :] - centroids.to_numpy()[None]) ** 2).sum(-1).argmin(1)\n"
        f"pd.DataFrame({{{key!r}: test[{key!r}], {target!r}: centroids.index[nearest]}})"
        ".to_csv('predictions.csv', index=False)"
    )


def test_the_memorization_probe_finds_a_model_that_recalls_answers(obscured, server):
    root, _ = obscured
    ctx = make_ctx(root, server, ("recalls", "pipeline"))
    original = originals(ctx)["Class-MM"]
    variant = variants_of(ctx)[original.id]
    answers = literal_code(private(ctx, original, answers_file(original)))
    plans = {
        "recalls": {original.instruction.strip(): answers, variant.instruction.strip(): answers},
        "pipeline": {t.instruction.strip(): centroid_code(t) for t in (original, variant)},
    }
    server.reset()
    server.script(scripted(plans))

    result = probe_memorization(ctx, task_ids=[original.id])

    assert (result.ran, result.reused, result.pairs) == (4, 0, [(original.id, variant.id)])
    rows = {m.endpoint: m for m in result.models}
    recalls, pipeline = rows["recalls"], rows["pipeline"]
    assert (recalls.original, recalls.obscured, recalls.drop) == (1.0, 0.0, 1.0)
    assert recalls.suspects == [original.id]
    assert pipeline.original >= PASS_BARS["Class-MM"] and pipeline.suspects == []
    assert pipeline.obscured == pytest.approx(pipeline.original) and pipeline.drop == pytest.approx(0.0)
    stored = ctx.store.read_partition(ProbeResult, "memorization--recalls")
    assert sorted((r.task_id, r.probe, r.passed) for r in stored) == sorted(
        [(original.id, "original", True), (variant.id, "obscured", False)]
    )
    assert probe_memorization(ctx, task_ids=[original.id]).ran == 0


def test_the_map_keeps_numbers_ordered_integers_integral_and_categories_consistent():
    """Pure transforms, no store: a numeric category read as floats in one file (a gap) and as integers in
    another gets one token; integer columns stay integers; a range filter maps onto the new min and max."""

    def profile(name, kind):
        return ColumnProfile(name=name, dtype="DOUBLE", kind=kind, missing_rate=0.0, distinct=3)

    prepared = PreparedSource(
        source_id="s", source_version="v", version="p", task_type=TaskType.REGRESSION, target_columns=["y"],
        id_column="id", columns=[profile("grade", ColumnKind.CATEGORICAL), profile("n", ColumnKind.NUMERIC),
        profile("x", ColumnKind.NUMERIC), profile("y", ColumnKind.NUMERIC)], n_rows=6, n_train=4, n_test=2,
        split="random", seed=1, files=[],
    )  # fmt: skip
    train = pd.DataFrame(
        {"id": [0, 1, 2, 3], "grade": [1.0, None, 3.0, 1.0], "n": [2, 5, 7, 9], "x": [0.1, 0.25, 3.5, 1.0],
         "y": [1.5, 2.5, 3.5, 4.5]}
    )  # fmt: skip
    test = pd.DataFrame({"id": [4, 5], "grade": [3, 1], "n": [4, 6], "x": [0.3, 2.0]})
    answers = pd.DataFrame({"id": [4, 5], "y": [2.0, 3.0]})
    mapping = build_map(prepared, [train, test, answers], 7, ObscureConfig())
    assert mapping == build_map(prepared, [train, test, answers], 7, ObscureConfig())  # seeded
    assert mapping != build_map(prepared, [train, test, answers], 8, ObscureConfig())
    new_train, new_test, new_answers = apply_map(mapping, [train, test, answers], 7, "s")
    c = mapping.column
    assert list(new_train.columns) == [c(n) for n in train.columns] and not set(new_train.columns) & set(
        train
    )
    # one token per category, whatever dtype pandas gave the column in each file
    assert new_train[c("grade")].iloc[0] == new_train[c("grade")].iloc[3] == new_test[c("grade")].iloc[1]
    assert new_train[c("grade")].iloc[2] == new_test[c("grade")].iloc[0] == mapping.category("grade", "3.0")
    assert pd.isna(new_train[c("grade")].iloc[1])
    assert mapping.affine["n"].integer and str(new_train[c("n")].dtype) == "Int64"
    assert not mapping.affine["x"].integer and mapping.affine["x"].scale > 0
    for name in ("n", "x", "y"):  # order kept, so a range filter maps onto the new min and max
        values = new_train[c(name)].astype(float)
        assert list(values.rank()) == list(train[name].rank())
        assert values.min() == mapping.number(name, train[name].min())
    ids = pd.concat([new_train[c("id")], new_test[c("id")]])
    assert ids.is_unique and not set(ids) & set(range(6))
    assert list(new_answers[c("id")]) == list(new_test[c("id")])


def test_attempts_the_endpoint_failed_count_neither_way(ctx):
    from dareforge.config import EndpointConfig
    from dareforge.probes.shortcut import NO_DATA, PROBE_VERSION, findings
    from dareforge.queries import partition_name
    from dareforge.schema import MetricSpec, ProbeResult, Task

    task = Task(
        id="t1",
        family="Class-MM",
        source_id="s",
        source_version="v",
        prepared_version="p",
        generator_version="2",
        seed=0,
        instruction="predict",
        public_files=[],
        private_files=[],
        metric=MetricSpec(name="macro-f1", target_columns=["y"], key_columns=["id"]),
        package_versions=[],
    )
    endpoints = [EndpointConfig(name=n, base_url="http://x/v1", model="m") for n in ("knows", "down")]
    for endpoint, outcome, passed in (("knows", "graded", True), ("down", "llm-error", False)):
        row = ProbeResult(
            task_id="t1",
            source_id="s",
            family="Class-MM",
            probe=NO_DATA,
            endpoint=endpoint,
            model="m",
            sample=0,
            trajectory_id=f"{endpoint}-0",
            outcome=outcome,
            score=0.9 if passed else None,
            passed=passed,
            probe_version=PROBE_VERSION,
        )
        ctx.store.write_records(partition_name(NO_DATA, endpoint), [row])
    (finding,) = findings(ctx.store, [task], endpoints)
    # The failed endpoint is no evidence that the task needs its data: 1 of 1 answering models solved it.
    assert finding.score == 1.0 and finding.reason.startswith("1 of 1 models solved it")
