"""Mutation testing of IF instructions: each requirement's mutant, run in one worker script on small tables the
tests make, tells the requirements that change the predictions from those an agent could ignore; the generator
leaves the idle ones out where that is safe, and the gate rejects a task with too few that matter."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dareforge.config import Config, ValidateConfig
from dareforge.generators.instructions import render_if
from dareforge.reference_solutions.reference_code import PREDICTIONS, if_reference_code
from dareforge.reference_solutions.reference_runner import ReferenceRunner
from dareforge.reference_solutions.sensitivity import (
    OUTCOMES,
    SENSITIVITY,
    Sensitivity,
    measure,
    mutant_file,
    mutation_test,
    sensitivity_script,
)
from dareforge.reference_solutions.spec import (
    NUMERIC_IMPUTER,
    SCALER,
    SEED,
    IFSpec,
    ModelSpec,
    RangeFilter,
    filter_requirement,
    mutants,
    unstated_requirements,
)
from dareforge.schema import MetricSpec, TaskLimits, TaskType, Validation
from dareforge.validators.check import TaskView
from dareforge.validators.gate import reasons_against
from dareforge.validators.sensitivity import SensitivityCheck

ROWS = 400
LIMITS = TaskLimits(turns=5, seconds_per_execution=100)


@pytest.fixture(scope="module")
def runner():
    with ReferenceRunner(threads=1, timeout_s=120) as worker:
        yield worker.start()


def make_task(folder: Path, classification: bool = True, missing: bool = False) -> Path:
    """A public folder: two numeric features on very different scales, one category, a label or a number."""
    rng = np.random.default_rng(7)
    train = pd.DataFrame(
        {
            "id": range(ROWS),
            "small": rng.normal(size=ROWS),
            "large": rng.normal(size=ROWS) * 1000,
            "kind": rng.choice(["a", "b", "c"], ROWS),
        }
    )
    signal = train["small"] + train["large"] / 1000 + (train["kind"] == "a")
    train["y"] = np.where(signal > 0.3, "yes", "no") if classification else 3 * signal + rng.normal(size=ROWS)
    if missing:
        train.loc[::7, "small"] = np.nan
    test = train.iloc[:100].drop(columns="y").assign(id=lambda f: f["id"] + 10_000)
    public = folder / "public"
    public.mkdir(parents=True)
    train.to_csv(public / "train.csv", index=False)
    test.to_csv(public / "test.csv", index=False)
    return public


def make_spec(model: str, module: str, params: dict, classification: bool = True, **update) -> IFSpec:
    spec = IFSpec(
        task_type=TaskType.CLASSIFICATION if classification else TaskType.REGRESSION,
        id_column="id",
        target="y",
        filters=[RangeFilter(column="small", low=-100, high=100)],  # keeps every row
        numeric=["small", "large"],
        categorical=["kind"],
        numeric_imputer="mean",
        categorical_imputer="most_frequent",
        scaler="standard",
        encoder="onehot",
        model=ModelSpec(name=model, module=module, params=params),
        seed=1,
    )
    return spec.model_copy(update=update)


def metric_of(spec: IFSpec) -> MetricSpec:
    classification = spec.task_type == TaskType.CLASSIFICATION
    return MetricSpec(
        name="exact-match" if classification else "allclose",
        target_columns=["y"],
        key_columns=["id"],
        tolerance=None if classification else 1e-6,
    )


def reference_run(runner: ReferenceRunner, spec: IFSpec, public: Path) -> Path:
    folder = public.parent / "reference"
    shutil.copytree(public, folder)
    outcome = runner.run(if_reference_code(spec), folder)
    assert outcome.ok, outcome.error
    return folder / PREDICTIONS


def sensitivity_of(runner, spec: IFSpec, public: Path) -> dict[str, bool]:
    found = measure(
        runner, spec, public, reference_run(runner, spec, public), metric_of(spec), public.parent / "s"
    )
    assert not [r for r in found.requirements if r.error]
    return {r.name: r.matters for r in found.requirements}


TREE = ("DecisionTreeClassifier", "sklearn.tree", {"max_depth": 4, "min_samples_leaf": 1, "random_state": 3})
LINEAR = ("LogisticRegression", "sklearn.linear_model", {"C": 0.1, "max_iter": 2000})


def test_a_scaler_in_front_of_a_tree_does_not_matter(runner, tmp_path):
    spec = make_spec(*TREE)
    found = sensitivity_of(runner, spec, make_task(tmp_path))
    assert found[SCALER] is False
    assert found["model"] is True and found["parameter max_depth"] is True


def test_a_linear_models_scaler_matters(runner, tmp_path):
    spec = make_spec(*LINEAR)
    found = sensitivity_of(runner, spec, make_task(tmp_path))
    assert found[SCALER] is True
    assert found["encoder"] is True


def test_a_regression_scaler_matters_beyond_the_tolerance(runner, tmp_path):
    spec = make_spec("Ridge", "sklearn.linear_model", {"alpha": 10.0}, classification=False)
    found = sensitivity_of(runner, spec, make_task(tmp_path, classification=False))
    assert found[SCALER] is True and found["parameter alpha"] is True


def test_an_imputer_without_missing_values_does_not_matter(runner, tmp_path):
    public = make_task(tmp_path)
    spec = make_spec(*LINEAR)
    found = sensitivity_of(runner, spec, public)
    assert found[NUMERIC_IMPUTER] is False
    # ... so the generator leaves it out: nothing an agent chooses for it can change a prediction
    frames = [pd.read_csv(public / name) for name in ("train.csv", "test.csv")]
    assert NUMERIC_IMPUTER in unstated_requirements(spec, frames)
    assert "impute missing values with the mean" not in render_if(
        spec.model_copy(update={"unstated": unstated_requirements(spec, frames)}), LIMITS
    )


def test_an_imputer_with_missing_values_is_stated(tmp_path):
    public = make_task(tmp_path, missing=True)
    frames = [pd.read_csv(public / name) for name in ("train.csv", "test.csv")]
    assert NUMERIC_IMPUTER not in unstated_requirements(make_spec(*LINEAR), frames)


def test_a_filter_that_removes_nothing_does_not_matter_and_is_left_out(runner, tmp_path):
    public = make_task(tmp_path)
    spec = make_spec(*LINEAR)
    reference = reference_run(runner, spec, public)
    settled, found = mutation_test(runner, spec, public, reference, metric_of(spec), tmp_path / "s")
    first = filter_requirement(0)
    assert {r.name: r.matters for r in found.requirements}[first] is False
    assert first in settled.unstated and first not in {r.name for r in found.stated}
    assert found.followed is not None and found.followed.matters is False
    assert "keep rows whose `small`" in render_if(spec, LIMITS)
    assert "keep rows whose `small`" not in render_if(settled, LIMITS)
    # the code still applies it: it changes nothing
    assert if_reference_code(settled) == if_reference_code(spec)


def test_a_filter_that_removes_rows_matters(runner, tmp_path):
    spec = make_spec(*LINEAR, filters=[RangeFilter(column="large", low=-500, high=500)])
    assert sensitivity_of(runner, spec, make_task(tmp_path))[filter_requirement(0)] is True


def test_an_unstated_requirement_that_matters_is_stated_after_all(runner, tmp_path):
    """A linear model's scaler claimed to change nothing: its mutant refutes it, and it is stated."""
    public = make_task(tmp_path)
    spec = make_spec(*LINEAR, unstated=[SCALER])
    reference = reference_run(runner, spec, public)
    found = measure(runner, spec, public, reference, metric_of(spec), tmp_path / "s")
    assert [r.name for r in found.silent] == [SCALER]
    settled, settled_found = mutation_test(runner, spec, public, reference, metric_of(spec), tmp_path / "s")
    assert SCALER not in settled.unstated and not settled_found.silent
    assert "StandardScaler" in render_if(settled, LIMITS)


FOREST = (
    "RandomForestClassifier",
    "sklearn.ensemble",
    {"n_estimators": 25, "max_depth": 4, "random_state": 3},
)
BOOSTING = (
    "GradientBoostingRegressor",
    "sklearn.ensemble",
    {"n_estimators": 30, "max_depth": 2, "random_state": 3},
)
NEIGHBOURS = ("KNeighborsRegressor", "sklearn.neighbors", {"n_neighbors": 5})


@pytest.mark.parametrize(
    ("model", "classification"),
    [(TREE, True), (LINEAR, True), (FOREST, True), (BOOSTING, False), (NEIGHBOURS, False)],
)
def test_one_script_reads_the_files_once_and_each_mutant_predicts_as_its_own_reference_script(
    runner, tmp_path, model, classification
):
    public = make_task(tmp_path / "task", classification=classification, missing=True)
    specs = [m.spec for m in mutants(make_spec(*model, classification=classification))]
    script = sensitivity_script(specs)
    assert script.count('pd.read_csv("train.csv")') == 1
    # The model, parameter and seed mutants share one fit of the preprocessing; every other mutant has its own.
    preprocessings = {s.model_copy(update={"model": specs[0].model}).model_dump_json() for s in specs}
    assert script.count("preprocess.fit_transform(") == len(preprocessings) < len(specs)
    shutil.copytree(public, tmp_path / "all")
    assert runner.run(script, tmp_path / "all").ok
    for index, spec in enumerate(specs):
        own = tmp_path / f"own-{index}"
        shutil.copytree(public, own)
        assert runner.run(if_reference_code(spec), own).ok
        assert (tmp_path / "all" / mutant_file(index)).read_bytes() == (own / PREDICTIONS).read_bytes(), index


def test_a_failing_model_fails_only_its_mutant_and_failing_preprocessing_only_its_group(runner, tmp_path):
    public = make_task(tmp_path / "task")
    good = make_spec(*TREE)
    bad_model = good.model_copy(update={"model": good.model.model_copy(update={"params": {"max_depth": -1}})})
    bad_rows = good.model_copy(update={"numeric": ["small", "no such column"]})
    specs = [good, bad_model, bad_rows, bad_rows.model_copy(update={"model": bad_model.model})]
    shutil.copytree(public, tmp_path / "run")
    assert runner.run(sensitivity_script(specs), tmp_path / "run").ok
    runs = json.loads((tmp_path / "run" / OUTCOMES).read_text())
    assert [run["error"] is None for run in runs] == [True, False, False, False]
    assert "max_depth" in runs[1]["error"] and all("no such column" in run["error"] for run in runs[2:])
    assert (tmp_path / "run" / mutant_file(0)).exists() and not (tmp_path / "run" / mutant_file(1)).exists()


def test_every_requirement_has_a_mutant_that_breaks_only_it():
    spec = make_spec(*TREE)
    names = [m.requirement for m in mutants(spec)]
    assert names == [
        filter_requirement(0),
        "numeric features",
        "categorical features",
        NUMERIC_IMPUTER,
        SCALER,
        "categorical imputer",
        "encoder",
        "model",
        "parameter max_depth",
        "parameter min_samples_leaf",
        SEED,
    ]
    for m in mutants(spec):
        changed = {k for k, v in m.spec.model_dump().items() if v != spec.model_dump()[k]}
        assert len(changed) == 1, (m.requirement, changed)


def finding_of(tmp_path: Path, found: Sensitivity) -> Validation:
    (tmp_path / "private").mkdir(parents=True, exist_ok=True)
    (tmp_path / "private" / SENSITIVITY).write_text(found.to_json())
    view = TaskView(task=None, prepared=None, folder=tmp_path)  # the check reads the stored file only
    finding = SensitivityCheck().run(view, Config())
    return finding.record("t", "s", "sensitivity", "v")


def test_the_gate_rejects_a_task_with_too_few_requirements_that_matter(runner, tmp_path):
    public = make_task(tmp_path / "task")
    spec = make_spec(*TREE)
    reference = reference_run(runner, spec, public)
    _, found = mutation_test(runner, spec, public, reference, metric_of(spec), tmp_path / "s")
    mattering = len(found.mattering)
    finding = finding_of(tmp_path / "view", found)
    assert finding.score == mattering
    assert reasons_against(finding, ValidateConfig(min_sensitive_requirements=mattering)) is None
    reason = reasons_against(finding, ValidateConfig(min_sensitive_requirements=mattering + 1))
    assert reason is not None and "validate.min_sensitive_requirements" in reason


def test_the_check_flags_an_instruction_that_leaves_out_what_matters(runner, tmp_path):
    public = make_task(tmp_path / "task")
    spec = make_spec(*LINEAR, unstated=[SCALER])
    reference = reference_run(runner, spec, public)
    found = measure(runner, spec, public, reference, metric_of(spec), tmp_path / "s")
    finding = finding_of(tmp_path / "view", found)
    assert finding.flagged and "scaler" in finding.reason
    assert reasons_against(finding, ValidateConfig(min_sensitive_requirements=0)) is not None


def test_an_if_task_without_a_stored_result_is_not_scored(tmp_path):
    view = TaskView(task=None, prepared=None, folder=tmp_path)
    assert SensitivityCheck().run(view, Config()).score is None
