"""Soundness of generated tasks, tested the way MLE-bench tests its competitions.

Every task built from a slice of the builtin catalog: the IF reference reproduces itself in a fresh worker and
an agent that skips the stated filters misses it; a constant prediction stays below the MM bar; no public
file carries an answer; and generating again from scratch gives the same ids and byte-identical files.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.families.generate import generate
from dareforge.families.registry import family_of
from dareforge.generators.prepare import prepare
from dareforge.reference_solutions.graders import grade
from dareforge.reference_solutions.reference_code import PREDICTIONS
from dareforge.reference_solutions.reference_runner import ReferenceRunner
from dareforge.reference_solutions.resimulate import resimulate
from dareforge.schema import Task
from dareforge.understand.understand_stage import understand
from tests.stores import TEST_IF_VARIANTS, prediction_only, prepared_store, store_config

SOURCES = [
    "sklearn-iris",
    "sklearn-diabetes",
    "vega-cars",
    "vega-seattle-weather",
    "vega-stocks",
    "statsmodels-co2",
]
# DARE-bench's bars for a valid MM/TS submission; a constant prediction must not reach them.
BARS = {"Class-MM": 0.8, "Reg-MM": 0.7, "TS-XF": 0.6, "TS-CF": 0.3}


def _pipeline(root) -> RunContext:
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    cfg.builtin.include = SOURCES
    cfg.generate.if_variants = TEST_IF_VARIANTS
    ctx = RunContext.from_config(cfg, show_progress=False)
    crawl(ctx)
    filter_sources(ctx)
    understand(ctx)
    prepare(ctx)
    return ctx


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    ctx = _pipeline(tmp_path_factory.mktemp("generate"))
    report = generate(ctx)
    tasks = sorted(ctx.store.read_records(Task), key=lambda t: t.id)
    return ctx, report, tasks


def _public(ctx, task: Task, name: str) -> pd.DataFrame:
    with ctx.store.open(f"tasks/{task.id}/public/{name}") as fh:
        return pd.read_csv(fh, dtype=str, keep_default_na=False)


def _private(ctx, task: Task, name: str) -> pd.DataFrame:
    with ctx.store.open(f"tasks/{task.id}/private/{name}") as fh:
        return pd.read_csv(fh, dtype=str, keep_default_na=False)


def test_every_family_is_generated_and_certified(built):
    _, report, tasks = built
    assert report.failures == {}
    families = {"Class-IF", "Class-MM", "Reg-IF", "Reg-MM", "TS-XF", "TS-CF", "QA", "Lake"}
    assert {t.family for t in tasks} == families
    # Question candidates may be degenerate (tests/test_questions.py); prediction tasks all certify.
    assert [t.id for t in tasks if t.status != "candidate" and not family_of(t).asks_question] == []
    # Two IF variants per tabular framing: iris and seattle-weather classify; diabetes, cars and, beside its
    # forecast, stocks (price on symbol and date) regress. Iris's second workflow changes its predictions
    # through one stated step only, as does the next one drawn in its place, so two more are drawn
    # (`families.tabular.if_tasks`).
    assert report.counts["Class-IF"] == 6 and report.counts["Reg-IF"] == 6
    for task in tasks:
        assert task.limits.turns == 5 and task.limits.seconds_per_execution == 200
        assert any(p.startswith("scikit-learn==") for p in task.package_versions)


def test_if_references_reproduce_in_a_fresh_worker(built):
    ctx, _, _ = built
    results = resimulate(ctx)
    assert len(results) == 12  # every IF task above, iris's redraws included
    assert [r.detail for r in results if not r.matches] == []


def test_if_noise_rows_punish_an_agent_that_skips_the_filters(built, tmp_path):
    ctx, _, tasks = built
    missed = 0
    if_tasks = [t for t in tasks if t.family.endswith("-IF")]
    with ReferenceRunner() as runner:
        for task in if_tasks:
            code = ctx.store.read_bytes(f"tasks/{task.id}/private/reference.py").decode()
            unfiltered = re.sub(r"^train = train\[.*\]$", "", code, flags=re.MULTILINE)
            assert unfiltered != code
            folder = tmp_path / task.id
            folder.mkdir()
            for f in task.public_files:
                (folder / f.name).write_bytes(ctx.store.read_bytes(f"tasks/{task.id}/public/{f.name}"))
            assert runner.run(unfiltered, folder).ok
            reference = _private(ctx, task, "reference_predictions.csv")
            missed += grade(task.metric, folder / PREDICTIONS, reference).score < 1.0
    # A shallow model can ignore a few corrupted rows; most tasks must not.
    assert missed >= 0.75 * len(if_tasks)


def test_instructions_state_every_choice_of_the_spec(built):
    _, _, tasks = built
    for task in (t for t in tasks if t.family.endswith("-IF")):
        spec = pd.read_json(pd.io.common.StringIO(task.spec), typ="series")
        assert spec["model"]["name"] in task.instruction
        for name, value in spec["model"]["params"].items():
            # a parameter whose mutant changed no prediction is left out (`sensitivity.settle`)
            stated = f"parameter {name}" not in spec["unstated"]
            assert (f"{name}={value!r}" in task.instruction) == stated
        for column in spec["numeric"] + spec["categorical"]:
            assert f"`{column}`" in task.instruction
        assert "predictions.csv" in task.instruction


def test_a_constant_prediction_stays_below_the_bar(built):
    ctx, _, tasks = built
    for task in (t for t in tasks if t.family in BARS):
        assert task.scores.strong is not None and task.scores.baseline is not None
        answers = _private(ctx, task, "answers.csv")
        train = pd.read_csv(ctx.store.open(f"tasks/{task.id}/public/train.csv"))
        constant = answers[task.metric.key_columns].copy()
        for target in task.metric.target_columns:
            values = train[target].dropna()
            constant[target] = values.astype(str).mode()[0] if task.family == "Class-MM" else values.mean()
        score = grade(task.metric, constant, answers)
        assert score.error is None and score.score < BARS[task.family], task.id


def test_no_public_file_carries_an_answer(built):
    ctx, _, tasks = built
    for task in (t for t in tasks if not family_of(t).asks_question):
        names = {f.name for f in task.public_files}
        assert names == {"train.csv", "test.csv"}, task.id
        test = _public(ctx, task, "test.csv")
        answers = _private(ctx, task, "answers.csv")
        assert not set(task.metric.target_columns) & set(test.columns), task.id
        keys = [k for k in task.metric.key_columns if k in test.columns]
        joined = test.merge(answers, on=keys, suffixes=("", "__answer"))
        assert len(joined) == len(test) == len(answers), task.id
        for target in task.metric.target_columns:
            truth = joined[target if target not in test.columns else f"{target}__answer"]
            leaking = [c for c in test.columns if c not in keys and (joined[c] == truth).all()]
            assert leaking == [], (task.id, leaking)


def test_generating_again_gives_the_same_ids_and_bytes(built, tmp_path):
    _ctx, _, tasks = built
    again = _pipeline(tmp_path)
    rerun = generate(again)
    assert rerun.failures == {}
    second = sorted(again.store.read_records(Task), key=lambda t: t.id)
    assert [t.id for t in second] == [t.id for t in tasks]
    for first, other in zip(tasks, second, strict=True):
        assert first.public_files == other.public_files and first.private_files == other.private_files
        assert first.instruction == other.instruction


def test_a_second_generate_reuses_every_task(built):
    ctx, _, tasks = built
    report = generate(ctx)
    assert report.reused == len(tasks) and report.written == []


def test_a_reference_is_limited_by_the_cpu_it_uses_not_the_time_it_waits(tmp_path):
    """Two identical 200-source runs on a loaded machine released different tasks: a wide source's Lake
    reference ran out of wall time in one of them. The limit counts CPU seconds: a script that waits longer
    than its budget passes, one that computes past it is stopped, and one blocked for good ends too (at 10x)."""
    with ReferenceRunner(1, timeout_s=1) as runner:
        waited = runner.run("import time\ntime.sleep(1.5)\nprint('done')", tmp_path)
        assert waited.ok and waited.seconds > 1 and waited.cpu_seconds < 1
        spun = runner.run("while True:\n    pass", tmp_path)
        assert not spun.ok and spun.error == "used more than 1 CPU seconds"
        assert runner.run("x = 1", tmp_path).ok  # a fresh worker after the kill
    with ReferenceRunner(1, timeout_s=0.2) as runner:
        blocked = runner.run("import time\ntime.sleep(3600)", tmp_path)
        assert not blocked.ok and blocked.error.startswith("no answer after 2s while using")


def test_if_tasks_train_on_at_most_max_train_rows_and_mm_tasks_on_every_row(tmp_path):
    """An IF task measures whether every stated step is followed, which more rows do not change; each of its
    ~15 certification fits (reference, twin, mutants) and every agent attempt pays for each row. MM tasks are
    about how well a model can do, so they keep every training row."""
    cfg = prediction_only(store_config(tmp_path, ["sklearn-iris"]))
    cfg.generate.if_variants, cfg.generate.max_train_rows = 1, 60
    ctx = prepared_store(RunContext.from_config(cfg, show_progress=False))
    generate(ctx)
    rows = {
        t.family: next(f.rows for f in t.public_files if f.name == "train.csv")
        for t in ctx.store.read_records(Task)
    }
    assert rows == {"Class-IF": 60, "Class-MM": 120}
