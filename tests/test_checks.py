"""Validation checks on small synthetic tasks with planted defects: each defect is caught with the right score."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeRegressor

from dareforge.config import Config
from dareforge.reference_solutions.metrics import clipped_r2
from dareforge.schema import PreparedSource, Task
from dareforge.validators import discrimination, duplicates, leakage, solvability
from dareforge.validators.check import TaskView
from dareforge.validators.duplicates import DuplicateSource, DuplicateTask
from dareforge.validators.leakage import LeakageFeature, LeakageOrder, LeakageSharedRows
from dareforge.validators.solvability import Certificate, Learnable, ReferenceRuns, Runtime

CONFIG = Config()
TASK_TYPE = {"Class": "classification", "Reg": "regression", "TS": "time-series"}


def make_view(
    root,
    task_id: str,
    train: pd.DataFrame,
    test: pd.DataFrame,
    answers: pd.DataFrame,
    *,
    family: str = "Class-MM",
    source_id: str = "kaggle-dataset.demo",
    target: str = "y",
    keys: tuple[str, ...] = ("row_id",),
    time_column: str | None = None,
    private: dict[str, pd.DataFrame] | None = None,
    **task_fields,
) -> TaskView:
    """Write a task folder (public train/test, private answers and extras) and return its view."""
    folder = root / "tasks" / task_id
    (folder / "public").mkdir(parents=True)
    (folder / "private").mkdir(parents=True)
    train.to_csv(folder / "public" / "train.csv", index=False)
    test.to_csv(folder / "public" / "test.csv", index=False)
    answers.to_csv(folder / "private" / "answers.csv", index=False)
    for name, frame in (private or {}).items():
        frame.to_csv(folder / "private" / name, index=False)
    classification = family.startswith("Class")
    metric = ("exact-match" if classification else "allclose") if family.endswith("-IF") else None
    metric = metric or ("macro-f1" if classification else "clipped-r2")
    task = Task.model_validate(
        {
            "id": task_id,
            "family": family,
            "source_id": source_id,
            "source_version": "v1",
            "prepared_version": "p1",
            "generator_version": "1",
            "seed": 7,
            "instruction": "predict y",
            "public_files": [],
            "private_files": [],
            "metric": {
                "name": metric,
                "target_columns": [target],
                "key_columns": list(keys),
                "tolerance": 1e-6 if metric == "allclose" else None,
            },
            "package_versions": [],
            **task_fields,
        }
    )
    prepared = PreparedSource.model_validate(
        {
            "source_id": source_id,
            "source_version": "v1",
            "version": "p1",
            "task_type": TASK_TYPE[family.split("-")[0]],
            "target_columns": [target],
            "id_column": "row_id",
            "time_column": time_column,
            "columns": [],
            "n_rows": len(train) + len(test),
            "n_train": len(train),
            "n_test": len(test),
            "split": "chronological" if time_column else "random",
            "seed": 7,
            "files": [],
        }
    )
    return TaskView(task, prepared, folder)


def split_view(root, task_id: str, data: pd.DataFrame, test_share: float = 0.2, **kw) -> TaskView:
    """A task from one labelled frame (with `row_id` and `y`): the last rows become test and answers."""
    n_test = int(len(data) * test_share)
    train, held = data.iloc[:-n_test], data.iloc[-n_test:]
    return make_view(root, task_id, train, held.drop(columns="y"), held[["row_id", "y"]], **kw)


def classification_data(n: int = 2000, seed: int = 0, leak: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    y = np.where(x[:, 0] + rng.normal(scale=1.5, size=n) > 0, "yes", "no")
    data = pd.DataFrame(
        {"row_id": np.arange(n), "x0": x[:, 0], "x1": x[:, 1], "color": rng.choice(list("rgb"), n)}
    )
    if leak:  # a copy of the target with 1% of its values flipped
        flip = rng.random(n) < 0.01
        data["leak"] = np.where(flip, np.where(y == "yes", "no", "yes"), y)
    data["y"] = y
    return data


def regression_data(n: int = 1000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = 3 * x[:, 0] + np.sin(x[:, 1]) + rng.normal(scale=0.5, size=n)
    return pd.DataFrame({"row_id": np.arange(n), "a": x[:, 0], "b": x[:, 1], "y": y})


# --- registry ------------------------------------------------------------------------------------------


def test_registry_names_are_the_ones_the_gate_keys_on():
    modules = (leakage, duplicates, solvability, discrimination)
    task_checks = [c.name for m in modules for c in m.TASK_CHECKS]
    run_checks = [c.name for m in modules if hasattr(m, "RUN_CHECKS") for c in m.RUN_CHECKS]
    assert task_checks == [
        "leakage-feature",
        "leakage-formula",
        "leakage-copy",
        "leakage-order",
        "leakage-shared-rows",
        "learnable",
        "runtime",
        "certificate",
        "reference-runs",
        "discrimination",
    ]
    assert run_checks == ["duplicate-source", "duplicate-task"]


# --- leakage-feature -----------------------------------------------------------------------------------


def test_leaking_column_reaches_the_top_score(tmp_path):
    view = split_view(tmp_path, "leaky", classification_data(leak=True))
    finding = LeakageFeature().run(view, CONFIG)
    assert finding.score >= 0.98
    assert "`leak`" in finding.reason and "macro-F1" in finding.reason
    assert finding.details["top"][0]["column"] == "leak"
    assert len(finding.details["top"]) == 3
    assert not finding.flagged  # checks store scores; the gate applies thresholds


def test_clean_task_stays_well_below(tmp_path):
    view = split_view(tmp_path, "clean", classification_data())
    finding = LeakageFeature().run(view, CONFIG)
    assert finding.score < 0.85
    assert finding.details["top"][0]["column"] == "x0"  # the informative feature, ids excluded
    assert "row_id" not in {t["column"] for t in finding.details["top"]}


def test_leaking_column_in_a_regression_task(tmp_path):
    data = regression_data()
    noise = np.random.default_rng(1).normal(scale=0.01 * data["y"].std(), size=len(data))
    data.insert(1, "leak", data["y"] + noise)
    finding = LeakageFeature().run(split_view(tmp_path, "reg", data, family="Reg-IF"), CONFIG)
    assert finding.score >= 0.98 and "clipped R²" in finding.reason


def test_time_series_without_features_has_no_score(tmp_path):
    data = pd.DataFrame({"row_id": range(100), "t": range(100), "y": np.arange(100.0)})
    view = split_view(tmp_path, "ts", data, family="TS-CF", keys=("t",), time_column="t")
    finding = LeakageFeature().run(view, CONFIG)
    assert finding.score is None and "no feature columns" in finding.reason


# --- leakage-order -------------------------------------------------------------------------------------


def test_id_sorted_by_target_is_caught(tmp_path):
    data = regression_data().sort_values("y").reset_index(drop=True)
    data["row_id"] = np.arange(len(data))
    data = data.sample(frac=1.0, random_state=3)  # rows shuffled, but the id still follows the target
    finding = LeakageOrder().run(split_view(tmp_path, "sorted", data, family="Reg-MM"), CONFIG)
    assert finding.score > 0.99
    assert "id `row_id`" in finding.reason


def test_train_sorted_by_class_scores_one(tmp_path):
    data = classification_data().sort_values("y", kind="stable").reset_index(drop=True)
    data = data.sample(frac=1.0, random_state=0)  # test rows from both classes
    train = data.iloc[:1600].sort_values("y", kind="stable")
    held = data.iloc[1600:]
    view = make_view(tmp_path, "bycls", train, held.drop(columns="y"), held[["row_id", "y"]])
    finding = LeakageOrder().run(view, CONFIG)
    assert finding.score == pytest.approx(1.0)
    assert "row order" in finding.details


def test_unordered_data_scores_low(tmp_path):
    finding = LeakageOrder().run(split_view(tmp_path, "plain", classification_data()), CONFIG)
    assert finding.score < 0.2


def test_order_is_skipped_for_time_series(tmp_path):
    data = regression_data()
    view = split_view(tmp_path, "ts", data, family="TS-XF", time_column="row_id")
    finding = LeakageOrder().run(view, CONFIG)
    assert finding.score is None and "time-series" in finding.reason


# --- leakage-shared-rows -------------------------------------------------------------------------------


def test_test_rows_copied_from_train_are_counted(tmp_path):
    data = classification_data(n=500)
    train, held = data.iloc[:400], data.iloc[400:].copy()
    copied = train.iloc[:25].drop(columns=["row_id", "y"]).to_numpy()
    held.iloc[:25, held.columns.get_indexer(["x0", "x1", "color"])] = copied
    view = make_view(tmp_path, "copies", train, held.drop(columns="y"), held[["row_id", "y"]])
    finding = LeakageSharedRows().run(view, CONFIG)
    assert finding.score == pytest.approx(0.25)
    assert "25 of 100 test rows" in finding.reason


def test_distinct_rows_share_nothing(tmp_path):
    finding = LeakageSharedRows().run(split_view(tmp_path, "distinct", classification_data(n=500)), CONFIG)
    assert finding.score == 0.0


# --- duplicate-source / duplicate-task -----------------------------------------------------------------


def test_twin_source_is_caught_and_the_first_kept(tmp_path):
    data = classification_data(n=1500, seed=4)
    first = split_view(tmp_path, "t1", data, source_id="kaggle-dataset.alpha")
    # The same data under another source id: rows shuffled, new row ids, and split differently.
    shuffled = data.sample(frac=1.0, random_state=9).reset_index(drop=True)
    shuffled["row_id"] = np.arange(len(shuffled)) + 1000
    twin = split_view(tmp_path, "t2", shuffled, test_share=0.3, source_id="kaggle-dataset.beta")
    twin_if = split_view(tmp_path, "t3", shuffled, family="Class-IF", source_id="kaggle-dataset.beta")
    other = split_view(tmp_path, "t4", classification_data(n=1500, seed=5), source_id="kaggle-dataset.gamma")

    found = DuplicateSource().run_all([other, twin_if, twin, first], CONFIG)
    assert found["t1"].score == 0.0 and "first source" in found["t1"].reason
    assert found["t2"].score >= 0.8 and found["t3"].score == found["t2"].score
    assert found["t2"].details["source"] == "kaggle-dataset.alpha"
    assert "kaggle-dataset.alpha" in found["t2"].reason
    assert found["t4"].score < 0.3  # same columns, different values
    assert not any(f.flagged for f in found.values())


def test_unrelated_sources_score_low(tmp_path):
    a = split_view(tmp_path, "a", classification_data(n=800), source_id="builtin.a")
    b = split_view(tmp_path, "b", regression_data(n=800), family="Reg-MM", source_id="builtin.b")
    found = DuplicateSource().run_all([a, b], CONFIG)
    assert found["b"].score < 0.3


def test_twin_specs_within_a_source(tmp_path):
    data = classification_data(n=200)
    spec = {"target": "y", "filters": [], "numeric": ["x0"]}
    same = json.dumps(dict(reversed(list(spec.items()))))  # same spec, other key order
    views = [
        split_view(tmp_path, "if-a", data, family="Class-IF", spec=json.dumps(spec)),
        split_view(tmp_path, "if-b", data, family="Class-IF", spec=same),
        split_view(tmp_path, "if-c", data, family="Class-IF", spec=json.dumps({**spec, "numeric": ["x1"]})),
        split_view(tmp_path, "if-d", data, family="Class-IF", spec=same, source_id="kaggle-dataset.other"),
        split_view(tmp_path, "mm", data),
    ]
    found = DuplicateTask().run_all(views, CONFIG)
    assert found["if-a"].score == 0.0
    assert found["if-b"].score == 1.0 and "if-a" in found["if-b"].reason
    assert found["if-c"].score == 0.0
    assert found["if-d"].score == 0.0  # another source
    assert found["mm"].score == 0.0


def test_specs_that_differ_only_in_the_target_or_the_seed_are_near_duplicates(tmp_path):
    """Two framings of one source sample the same workflow from the same seed: the same features, filters and
    model for another target is one task twice; so is the same pipeline under another seed."""
    data = classification_data(n=200)
    spec = {
        "target": "y",
        "seed": 0,
        "numeric": ["x0", "x1"],
        "filters": [{"kind": "range", "column": "x0", "low": -3.0, "high": 3.0}],
        "model": {"name": "RandomForestClassifier", "params": {"max_depth": 3, "random_state": 7}},
        "unstated": [],
    }
    other_target = {**spec, "target": "z", "filters": [{**spec["filters"][0], "low": -2.9}]}
    other_seed = {
        **spec,
        "seed": 1,
        "model": {**spec["model"], "params": {"max_depth": 3, "random_state": 8}},
    }
    other_model = {**spec, "target": "z", "model": {**spec["model"], "params": {"max_depth": 5}}}

    def view(task_id, task_spec, **kw):
        return split_view(tmp_path, task_id, data, family="Class-IF", spec=json.dumps(task_spec), **kw)

    views = [
        view("if-b", other_target),
        view("if-a", spec),
        view("if-c", other_seed),
        view("if-d", other_model),
        view("if-e", other_target, source_id="kaggle-dataset.other"),
    ]
    found = DuplicateTask().run_all(views, CONFIG)
    assert found["if-a"].score == 0.0  # the first by id is kept, whatever the order given
    assert found["if-b"].score == 1.0 and "near-duplicate of task `if-a`" in found["if-b"].reason
    assert "the target ('z', not 'y')" in found["if-b"].reason and found["if-b"].details["twin"] == "if-a"
    assert found["if-c"].score == 1.0 and "the seed (1, not 0)" in found["if-c"].reason
    assert found["if-d"].score == 0.0  # another model: another task
    assert found["if-e"].score == 0.0  # another source


# --- learnable / runtime / certificate / reference-runs ------------------------------------------------


def _margin(data: pd.DataFrame) -> dict[str, float]:
    """Baseline (training mean) and strong (a regression tree) clipped R² on the last 20% of rows."""
    train, test = data.iloc[:800], data.iloc[800:]
    model = DecisionTreeRegressor(max_depth=5, min_samples_leaf=10, random_state=0)
    model.fit(train[["a", "b"]], train["y"])
    return {
        "baseline": clipped_r2(test["y"], np.full(len(test), train["y"].mean())),
        "strong": clipped_r2(test["y"], model.predict(test[["a", "b"]])),
    }


def test_random_target_has_a_small_margin(tmp_path):
    data = regression_data()
    learnable = Learnable().run(
        split_view(tmp_path, "ok", data, family="Reg-MM", scores=_margin(data)), CONFIG
    )
    data["y"] = np.random.default_rng(2).normal(size=len(data))  # labels unrelated to the features
    scores = _margin(data)
    noise = Learnable().run(split_view(tmp_path, "noise", data, family="Reg-MM", scores=scores), CONFIG)
    assert noise.score < 0.05 < 0.5 < learnable.score
    assert noise.score == pytest.approx(scores["strong"] - scores["baseline"])
    assert f"{noise.score:.3f}" in noise.reason


def test_learnable_does_not_apply_to_if(tmp_path):
    view = split_view(tmp_path, "if", regression_data(), family="Reg-IF", scores={"strong": 1, "baseline": 0})
    finding = Learnable().run(view, CONFIG)
    assert finding.score is None and finding.reason == "IF tasks are judged by exact reproduction"


def test_runtime_is_a_share_of_the_limit(tmp_path):
    data = regression_data(n=100)
    mm = split_view(tmp_path, "mm", data, family="Reg-MM", scores={"reference_seconds": 50})
    if_ = split_view(tmp_path, "if", data, family="Reg-IF", scores={"reference_seconds": 60})
    assert Runtime().run(mm, CONFIG).score == pytest.approx(0.25)
    finding = Runtime().run(if_, CONFIG)
    assert finding.score == pytest.approx(0.15)
    assert "one of the certificate's 2 runs" in finding.reason


def test_rejected_reference_is_flagged(tmp_path):
    data = regression_data(n=100)
    reason = "not deterministic: the twin run scores 0.950000 against the first run"
    broken = split_view(tmp_path, "bad", data, family="Reg-IF", status="rejected", reject_reason=reason)
    finding = Certificate().run(broken, CONFIG)
    assert finding.flagged and finding.reason == reason
    fine = Certificate().run(split_view(tmp_path, "good", data, family="Reg-IF"), CONFIG)
    assert not fine.flagged and fine.score == 1.0 and fine.reason == "reference certified"


def test_nan_in_reference_predictions_is_flagged(tmp_path):
    data = regression_data(n=100)
    predictions = data.iloc[-20:][["row_id", "y"]].copy()
    good = split_view(
        tmp_path, "good", data, family="Reg-MM", private={"strong_predictions.csv": predictions}
    )
    assert not ReferenceRuns().run(good, CONFIG).flagged
    predictions.iloc[3, 1] = math.nan
    bad = split_view(tmp_path, "nan", data, family="Reg-MM", private={"strong_predictions.csv": predictions})
    finding = ReferenceRuns().run(bad, CONFIG)
    assert finding.flagged and "NaN" in finding.reason and finding.details == {"y": 1}


def test_missing_reference_output_is_flagged(tmp_path):
    data = regression_data(n=100)
    predictions = data.iloc[-20:][["row_id", "y"]]
    # An IF task is checked for reference_predictions.csv, not the MM file.
    view = split_view(tmp_path, "if", data, family="Reg-IF", private={"strong_predictions.csv": predictions})
    finding = ReferenceRuns().run(view, CONFIG)
    assert finding.flagged and "reference_predictions.csv is missing" in finding.reason
