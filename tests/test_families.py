"""A task family is one object: a new one is one module plus one registry line, and every stage takes it."""

from __future__ import annotations

import importlib
import textwrap
from datetime import date

import pytest

from dareforge.config import EndpointConfig
from dareforge.context import RunContext
from dareforge.exports.export_format import ExportJob, TrainingExport, load_export
from dareforge.exports.formats import FORMATS, export_format
from dareforge.families.family import Grading
from dareforge.families.registry import REGISTERED, UnknownFamilyError, families, family_named, pass_bars
from dareforge.publish.release import build_release
from dareforge.schema import Task, Verdict
from dareforge.trajectories.corpus import build_corpus
from dareforge.trajectories.synthesize import synthesize
from dareforge.validators.validate import validate
from tests.llm_server import LLMServer
from tests.stores import generate_tasks, prediction_only, store_config
from tests.test_trajectories import ANSWER_AT_ONCE, make_ctx, needs_sandbox, reply

DAY = date(2026, 1, 15)

FEW_ROWS = textwrap.dedent(
    '''
    """Class-Few: classify from a few labelled rows (a throwaway family of the tests)."""

    from dareforge.families.family import Build, Family, Grading, Needs, Words, predicts
    from dareforge.families.tabular import cap_rows, copy_prepared, goal_task_fields, tabular_strong_spec
    from dareforge.families.trivial import mm_trivial
    from dareforge.schema import MetricSpec, TaskType

    ROWS = 40


    def build_few(build: Build):
        prepared = build.prepared
        seed = build.ctx.config.generate.seed
        metric = MetricSpec(
            name="macro-f1", target_columns=prepared.target_columns, key_columns=[prepared.id_column]
        )
        strong = tabular_strong_spec(prepared, classification=True)
        few = cap_rows(build.frames[0], ROWS, seed)

        def fill(draft):
            copy_prepared(build, draft)
            few.to_csv(draft.public / "train.csv", index=False)
            draft.fields = goal_task_fields(
                build,
                draft,
                metric,
                strong,
                few,
                task_words="classification from few labelled rows",
                test_note="`test.csv` holds the rows to predict, without the target.",
            )

        return [build.writer.build(build.family.name, seed, "few", fill)]


    FAMILY = Family(
        name="Class-Few",
        kind=TaskType.CLASSIFICATION,
        grading=Grading.GOAL,
        metrics=("macro-f1",),
        words=Words(
            asks="classification from a few labelled rows",
            agent="any model, trained on 40 rows",
            hub_category="tabular-classification",
        ),
        build=build_few,
        applies=predicts(TaskType.CLASSIFICATION),
        trivial=mm_trivial,
        needs=Needs(ROWS, "it trains on ROWS rows"),
        pass_bar=0.6,
        no_variant="a throwaway family",
    )
    '''
)


@pytest.fixture(scope="module")
def few_rows(tmp_path_factory):
    """The throwaway family: its module written to a folder on the path, and its one registry line, for the
    tests of this module that ask for it."""
    folder = tmp_path_factory.mktemp("family")
    (folder / "few_rows.py").write_text(FEW_ROWS)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.syspath_prepend(str(folder))
        family = importlib.import_module("few_rows").FAMILY
        monkeypatch.setitem(REGISTERED, family.name, family)  # the registry line
        yield family


def test_an_unknown_family_is_an_error_that_lists_the_registered_ones():
    with pytest.raises(UnknownFamilyError) as error:
        family_named("Class-XX")
    assert "'Class-XX'" in str(error.value)
    assert all(f.name in str(error.value) for f in families())


def test_every_registered_family_declares_a_consistent_whole():
    for family in families():
        assert family.metrics, family.name
        assert family.asks_question == (family.kind is None), family.name
        assert (family.files.reference is None) == family.asks_question, family.name
        assert (family.variant is None) == bool(family.no_variant), family.name
        assert 0 < family.pass_bar <= 1, family.name
    assert pass_bars({}) == {f.name: f.pass_bar for f in families() if f.grading == Grading.GOAL}


def test_a_pass_bar_for_an_unknown_family_is_a_config_error():
    from dareforge.errors import ConfigError

    with pytest.raises(ConfigError, match="Class-XX"):
        pass_bars({"Class-XX": 0.5})


def test_a_new_family_is_generated_validated_and_released(released):
    _, release, few = released
    assert few.id in set(release.task_ids)


@pytest.fixture(scope="module")
def released(few_rows, tmp_path_factory):
    """The iris store with the family's task generated, accepted by the gate and released (asserted), built
    once for the tests that start from it."""
    cfg = prediction_only(store_config(tmp_path_factory.mktemp("few"), ["sklearn-iris"]))
    cfg.generate.if_variants = (
        1  # the family's way through is under test; a second IF seed adds nothing to it
    )
    # Boosted models on 40 rows score below the linear one, so the solver ladder rightly gates the task as
    # not ranking solvers: this test is about a family's way through the pipeline, not its discrimination.
    cfg.validate_.ladder_cpu_seconds = 0
    ctx = generate_tasks(RunContext.from_config(cfg, show_progress=False))
    tasks = [t for t in ctx.store.read_records(Task) if t.family == few_rows.name]
    assert len(tasks) == 1 and tasks[0].status == "candidate", tasks
    few = tasks[0]
    train = ctx.store.local_path(f"tasks/{few.id}/public/train.csv").read_text().splitlines()
    assert len(train) == 1 + 40  # the builder's own files
    assert few.scores.strong is not None and few.scores.baseline is not None

    validate(ctx)
    verdict = next(v for v in ctx.store.read_records(Verdict) if v.task_id == few.id)
    assert verdict.accepted, verdict.reasons

    release = build_release(ctx, "bench", today=DAY).release
    assert few.id in {row["id"] for row in release.rows() if row["family"] == few_rows.name}
    assert few.id in {row["id"] for row in release.private_rows()}
    card = ctx.store.read_bytes(f"{release.prefix}/README.md").decode()
    assert f"| {few_rows.name} | {few_rows.words.asks} |" in card
    return ctx, release, few


@needs_sandbox
def test_a_new_family_goes_through_every_export(released, tmp_path):
    """The family's task is played by an agent in the sandbox (a scripted model that runs the task's strong
    reference), kept by the corpus, and written by every registered format that has a place for it; a format
    without one (a peer's layout) names the task and why."""
    ctx, release, few = released
    strong = ctx.store.read_bytes(f"tasks/{few.id}/private/strong_reference.py").decode()
    with LLMServer() as server:
        server.script(
            lambda request: (
                ANSWER_AT_ONCE if any(m["role"] == "assistant" for m in request.messages) else reply(strong)
            )
        )
        endpoint = EndpointConfig(name="alpha", model="good-model", base_url=server.url, backoff_s=0.01)
        ctx = make_ctx(ctx.config, llm={"endpoints": [endpoint]}, synthesize={"split": "all", "samples": 1})
        sampled = synthesize(ctx, release="bench", task_ids=[few.id])
    assert sampled.ran == 1

    corpus = build_corpus(ctx, "bench", today=DAY)
    training = [name for name in FORMATS if isinstance(export_format(name), TrainingExport)]
    assert sorted(corpus.exports) == sorted(training)
    for name, written in corpus.exports.items():
        rows = load_export(ctx, written.name).rows()
        assert few.id in {r.get("task_id") or r.get("id") for r in rows}, name

    for name in FORMATS:
        chosen = export_format(name)
        if isinstance(chosen, TrainingExport):
            continue
        job = ExportJob(ctx, release, release.tasks(), dest=tmp_path / name, today=DAY)
        report = chosen.export(job)
        written = {p.read_text(errors="ignore") for p in (tmp_path / name).rglob("*") if p.is_file()}
        placed = any(few.id in text for text in written)
        assert placed or few.id in report.skipped, f"{name} neither exports {few.id} nor says why"
