"""Kaggle competitions as they ship (`tests/competitions.py`): a train file, a test file without the outcome
columns, a sample submission under any of the names Kaggle uses, a description that names no target. Every
stage runs on a mirror of four: each is kept, framed on the target its sample submission names, with the
outcome columns (`casual`, `registered` beside `count = casual + registered`) in no task's files, and its
boolean target spelled one way and graded in any spelling.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dareforge.config import Config, SourceOverride
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.crawlers.inspect import competition_files
from dareforge.families.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.reference_solutions.graders import grade
from dareforge.reference_solutions.reference_code import if_reference_code
from dareforge.reference_solutions.reference_runner import ReferenceRunner
from dareforge.reference_solutions.spec import IFSpec, ModelSpec
from dareforge.schema import FilterDecision, Framing, Source, Task, TaskType, Verdict
from dareforge.understand.understand_stage import understand
from dareforge.validators.gate import reasons_against
from dareforge.validators.leakage import LeakageFeature, LeakageFormula
from dareforge.validators.validate import validate
from tests.competitions import competition_mirror
from tests.stores import mirror_dataset, prediction_only, store_config
from tests.test_checks import make_view


def _context(root, mirror, **overrides) -> RunContext:
    cfg = prediction_only(store_config(root, []))
    cfg.builtin.enabled = False
    cfg.mirror.paths = [str(mirror)]
    cfg.rules.recency_exempt_origins = ["mirror"]
    cfg.validate_.ladder_cpu_seconds = 0
    cfg.generate.if_variants = 1
    cfg.sources.update(overrides)
    return RunContext.from_config(cfg, show_progress=False)


def _through_validate(ctx: RunContext) -> RunContext:
    for stage in (crawl, filter_sources, understand, prepare, generate, validate):
        stage(ctx)
    return ctx


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("competitions")
    competitions = competition_mirror(root / "mirror")
    return _through_validate(_context(root, root / "mirror")), competitions


def _records(ctx, record):
    return list(ctx.store.iter_records(record))


def test_the_files_tell_the_sample_submission_whatever_its_name(built):
    ctx, competitions = built
    sources = {s.id: s for s in _records(ctx, Source)}
    for comp in competitions:
        found = competition_files(sources[comp.source_id].files)
        assert found.sample is not None and found.test is not None, comp
        assert found.targets == [comp.target] and sorted(found.outcomes) == sorted(comp.outcomes), comp
        assert sources[comp.source_id].target_columns == [comp.target]


def test_every_competition_is_kept_and_framed_on_its_target(built):
    ctx, competitions = built
    dropped = {d.source_id for d in _records(ctx, FilterDecision) if not d.kept}
    assert not dropped & {c.source_id for c in competitions}, dropped
    framings = [f for f in _records(ctx, Framing) if f.status == "chosen"]
    for comp in competitions:
        chosen = [f for f in framings if f.source_id == comp.source_id]
        assert chosen, f"{comp.source_id} has no framing"
        tabular = [f for f in chosen if f.task_type != TaskType.TIME_SERIES]
        assert [f.target_columns for f in tabular] == [[comp.target]], chosen
        assert tabular[0].task_type.value == comp.kind
        for outcome in comp.outcomes:
            assert outcome in tabular[0].dropped_columns, tabular[0]


def test_outcome_columns_are_in_no_task_s_files_nor_instruction(built):
    ctx, competitions = built
    tasks = _records(ctx, Task)
    for comp in (c for c in competitions if c.outcomes):
        mine = [t for t in tasks if t.source_id == comp.source_id]
        assert mine
        for task in mine:
            for f in task.public_files:
                header = ctx.store.read_bytes(f"tasks/{task.id}/public/{f.name}").split(b"\n", 1)[0].decode()
                assert not set(comp.outcomes) & set(header.split(",")), (task.family, f.name, header)
            assert not any(f"`{o}`" in task.instruction for o in comp.outcomes), task.instruction


def test_no_reference_crashes_and_the_boolean_tasks_are_scored(built):
    ctx, competitions = built
    tasks = _records(ctx, Task)
    crashed = [t.reject_reason for t in tasks if t.reject_reason and "failed" in t.reject_reason]
    assert crashed == []
    verdicts = {v.task_id: v for v in _records(ctx, Verdict)}
    boolean = next(c for c in competitions if c.target == "Transported")
    mine = [t for t in tasks if t.source_id == boolean.source_id]
    assert {t.family for t in mine} >= {"Class-IF", "Class-MM"}
    mm = next(t for t in mine if t.family == "Class-MM")
    assert mm.scores.strong > mm.scores.baseline + 0.1, mm.scores
    assert verdicts[mm.id].accepted, verdicts[mm.id].reasons
    answers = ctx.store.read_bytes(f"tasks/{mm.id}/private/answers.csv").decode()
    assert set(pd.read_csv(pd.io.common.StringIO(answers), dtype=str)["Transported"]) == {"True", "False"}
    assert "write True or False" in mm.instruction


def test_a_boolean_answer_is_graded_in_any_spelling(built, tmp_path):
    ctx, _ = built
    mm = next(t for t in _records(ctx, Task) if t.family == "Class-MM" and "transport" in t.source_id)
    answers = tmp_path / "answers.csv"
    answers.write_bytes(ctx.store.read_bytes(f"tasks/{mm.id}/private/answers.csv"))
    truth = pd.read_csv(answers, dtype=str)
    for spelled in (
        {"True": "true", "False": "false"},
        {"True": "TRUE", "False": "FALSE"},
        {"True": "yes", "False": "no"},
        {"True": "1", "False": "0"},
    ):
        submission = truth.assign(Transported=truth["Transported"].map(spelled))
        assert grade(mm.metric, submission, answers).score == 1.0, spelled
    wrong = truth.assign(Transported=truth["Transported"].map({"True": "False", "False": "True"}))
    assert grade(mm.metric, wrong, answers).score < 0.5


def test_an_if_reference_reads_boolean_features_with_blanks(tmp_path):
    """A column of True/False with blanks, filled with 'missing' and ordinal encoded: pandas reads it as bools
    beside NaN, which an encoder refuses beside a str, unless the workflow reads categories as text."""
    rng = np.random.default_rng(0)
    flag = rng.choice(np.array([True, False, None], dtype=object), 200)
    frame = pd.DataFrame({"id": range(200), "flag": flag, "x": rng.normal(size=200)})
    frame["y"] = np.where(frame["flag"] == True, "a", "b")  # noqa: E712
    frame.iloc[:150].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[150:].drop(columns=["y"]).to_csv(tmp_path / "test.csv", index=False)
    spec = IFSpec(
        task_type=TaskType.CLASSIFICATION,
        id_column="id",
        target="y",
        filters=[],
        numeric=["x"],
        categorical=["flag"],
        numeric_imputer="mean",
        categorical_imputer="constant",
        scaler="none",
        encoder="ordinal",
        model=ModelSpec(name="DecisionTreeClassifier", module="sklearn.tree", params={"random_state": 0}),
        seed=0,
    )
    with ReferenceRunner() as runner:
        outcome = runner.run(if_reference_code(spec), tmp_path)
    assert outcome.ok, outcome.error
    assert len(pd.read_csv(tmp_path / "predictions.csv")) == 50


def test_a_competition_without_a_sample_submission_names_the_setting_and_the_setting_rescues_it(tmp_path):
    competitions = competition_mirror(tmp_path / "mirror")
    houses = next(c for c in competitions if c.target == "SalePrice")
    (tmp_path / "mirror" / houses.folder / "sample_submission.csv.zip").unlink()
    ctx = _context(tmp_path / "a", tmp_path / "mirror")
    crawl(ctx)
    filter_sources(ctx)
    why = " ".join(
        d.reason for d in _records(ctx, FilterDecision) if d.source_id == houses.source_id and not d.kept
    )
    assert f"sources.{houses.source_id}.target" in why, why
    named = _context(
        tmp_path / "b", tmp_path / "mirror", **{houses.source_id: SourceOverride(target=["SalePrice"])}
    )
    crawl(named)
    assert houses.source_id in filter_sources(named).labels("kept")


def test_sources_exclude_leaves_a_column_out_of_every_file_with_the_reason(tmp_path):
    competitions = competition_mirror(tmp_path / "mirror")
    houses = next(c for c in competitions if c.target == "SalePrice")
    ctx = _context(
        tmp_path / "s", tmp_path / "mirror", **{houses.source_id: SourceOverride(exclude=["LotArea"])}
    )
    for stage in (crawl, filter_sources, understand, prepare):
        stage(ctx)
    framing = next(
        f for f in _records(ctx, Framing) if f.source_id == houses.source_id and f.status == "chosen"
    )
    assert "LotArea" in framing.dropped_columns and "LotArea" in framing.excluded_columns
    assert (
        f"withheld: LotArea: sources.{houses.source_id}.exclude in dareforge.yaml leaves it out"
        in framing.checks
    )
    prepared = ctx.store.local_path(f"prepared/{houses.source_id}")
    headers = [p.read_text().split("\n", 1)[0] for p in prepared.rglob("*.csv")]
    assert headers and not any("LotArea" in h.split(",") for h in headers), headers


def _formula_view(tmp_path, family: str, make_target, trend: bool = False):
    """A task whose public test features `a` and `b` compute its target on every row (`make_target(a, b)`),
    beside a feature `c` that does not."""
    rng = np.random.default_rng(5)
    n = 300
    frame = pd.DataFrame(
        {"row_id": range(n), "a": rng.uniform(1, 50, n).round(2), "b": rng.uniform(1, 9, n).round(2)}
    )
    if trend:  # rising past every training value: the held-out rows lie beyond the training range
        frame["a"] = (np.linspace(1, 500, n) + rng.normal(0, 1, n)).round(2)
    frame["c"] = rng.normal(size=n)
    frame["y"] = make_target(frame["a"], frame["b"])
    time = "day" if family.startswith("TS") else None
    if time:
        frame["day"] = pd.date_range("2020-01-01", periods=n, freq="D").strftime("%Y-%m-%d")
    train, test = frame.iloc[:240], frame.iloc[240:]
    keys = ("day",) if time else ("row_id",)
    answers = test[[*keys, "y"]]
    return make_view(
        tmp_path,
        f"{family}-{make_target.__name__}",
        train,
        test.drop(columns=["y"]),
        answers,
        family=family,
        keys=keys,
        time_column=time,
    )


def summed(a, b):
    return a + b


def difference(a, b):
    return 3 * a - b


def ratio(a, b):
    return a / b**2


@pytest.mark.parametrize("make_target", [summed, difference, ratio])
@pytest.mark.parametrize("family", ["Reg-IF", "Reg-MM", "TS-XF"])
def test_the_gate_rejects_features_that_compute_the_target(tmp_path, family, make_target):
    view = _formula_view(tmp_path, family, make_target)
    finding = LeakageFormula().run(view, Config())
    assert finding.details and sorted(finding.details["columns"]) == ["a", "b"], finding
    stored = finding.record(view.task.id, view.task.source_id, LeakageFormula.name, "test")
    assert reasons_against(stored, Config().validate_, view.family), finding


def test_features_that_only_predict_the_target_are_no_formula(tmp_path):
    view = _formula_view(tmp_path, "Reg-MM", lambda a, b: a + np.random.default_rng(1).normal(0, 5, len(a)))
    finding = LeakageFormula().run(view, Config())
    assert finding.score < Config().validate_.leakage_max_formula_fit, finding


@pytest.mark.parametrize("task_type", [TaskType.TIME_SERIES, TaskType.REGRESSION])
def test_a_named_target_whose_columns_compute_it_is_posed_without_them(tmp_path, task_type):
    """No competition here: a daily table of `total = walk_in + online` beside the weather, the target named in
    the config. The one-column leak measure sees neither part alone; the formula check leaves both out of the
    forecast, and out of the regression (which the config's name once kept "although derived", R² 1)."""
    rng = np.random.default_rng(8)
    days = pd.date_range("2019-01-01", periods=400, freq="D")
    walk_in = (50 + 20 * np.sin(np.arange(400) / 58) + rng.normal(0, 6, 400)).round()
    online = (30 + 0.05 * np.arange(400) + rng.normal(0, 6, 400)).round()
    table = pd.DataFrame(
        {
            "date": days.strftime("%Y-%m-%d"),
            "temperature": rng.normal(15, 8, 400).round(1),
            "walk_in": walk_in,
            "online": online,
            "total": walk_in + online,
        }
    )
    source = mirror_dataset(
        tmp_path / "mirror",
        "shop-visits",
        {"visits.csv": table.to_csv(index=False).encode()},
        description="Daily shop visits. Forecast the total number of visits.",
    )
    cfg = store_config(tmp_path, [])
    cfg.builtin.enabled = False
    cfg.mirror.paths = [str(tmp_path / "mirror")]
    cfg.rules.recency_exempt_origins = ["mirror"]
    cfg.sources[source] = SourceOverride(target=["total"], task_type=task_type.value)
    ctx = RunContext.from_config(cfg, show_progress=False)
    for stage in (crawl, filter_sources, understand):
        stage(ctx)
    framing = next(f for f in _records(ctx, Framing) if f.status == "chosen")
    assert framing.task_type == task_type
    assert {"walk_in", "online"} <= set(framing.dropped_columns), framing
    assert any("leak: total is a linear function" in c for c in framing.checks), framing.checks


def test_the_formula_check_reads_only_keys_and_targets_from_the_answers(tmp_path):
    """A series' answers also hold its entity, a column of test.csv too: the join must not rename it away."""
    view = _formula_view(tmp_path, "TS-XF", summed)
    answers = view.path("private", "answers.csv")
    frame = pd.read_csv(answers)
    test = pd.read_csv(view.path("public", "test.csv"))
    frame.assign(a=test["a"].to_numpy()).to_csv(answers, index=False)
    view = type(view)(view.task, view.prepared, view.folder)
    finding = LeakageFormula().run(view, Config())
    assert sorted(finding.details["columns"]) == ["a", "b"], finding


@pytest.mark.parametrize("family", ["Reg-IF", "Reg-MM", "TS-XF"])
def test_a_renamed_copy_of_the_target_is_caught_whatever_the_split(tmp_path, family):
    """A public feature equal to the target (a source's swapped headers): a tree on it alone cannot carry the
    copy past the training range on rows split in time, a line through it can (TS-XF's rows are split in time)."""

    def copied(a, b):
        return a * 1.0

    view = _formula_view(tmp_path, family, copied, trend=True)
    finding = LeakageFormula().run(view, Config())
    assert finding.details["columns"] == ["a"], finding
    if (
        view.prepared.split == "chronological"
    ):  # the single-feature tree, trained on the earlier rows, misses it
        single = LeakageFeature().run(view, Config())
        assert single.score < Config().validate_.leakage_max_single_feature, single
    stored = finding.record(view.task.id, view.task.source_id, LeakageFormula.name, "test")
    assert reasons_against(stored, Config().validate_, view.family), finding
