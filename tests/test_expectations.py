from __future__ import annotations

import errno
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dareforge.config import Config
from dareforge.schema import PreparedSource, Task
from dareforge.validators.check import Finding, TaskView
from dareforge.validators.expectations import (
    SUITES,
    SUITES_VERSION,
    GXRun,
    PreparedExpectations,
    ReferenceExpectations,
    TaskRecordExpectations,
)
from tests.mounts import tmpfs


@pytest.fixture(scope="module")
def gx() -> GXRun:
    return GXRun()


@pytest.fixture
def cfg() -> Config:
    return Config()


def _task(
    family: str = "Class-IF", keys: list[str] | None = None, metric: str = "exact-match", **spec: object
) -> Task:
    files = [{"name": n, "size": 1, "sha256": "0"} for n in ("train.csv", "test.csv")]
    return Task.model_validate(
        {
            "id": "task-1",
            "family": family,
            "source_id": "builtin.toy",
            "source_version": "sv",
            "prepared_version": "pv",
            "generator_version": "1",
            "seed": 7,
            "instruction": "Predict y.",
            "public_files": files,
            "private_files": [{"name": "answers.csv", "size": 1, "sha256": "0"}],
            "metric": {"name": metric, "target_columns": ["y"], "key_columns": keys or ["row_id"], **spec},
            "package_versions": ["pandas==3"],
        }
    )


def _prepared(id_column: str = "row_id") -> PreparedSource:
    return PreparedSource.model_validate(
        {
            "source_id": "builtin.toy",
            "source_version": "sv",
            "version": "pv",
            "task_type": "classification",
            "target_columns": ["y"],
            "id_column": id_column,
            "columns": [],
            "n_rows": 12,
            "n_train": 8,
            "n_test": 4,
            "split": "random",
            "seed": 7,
            "files": [],
        }
    )


def _frames() -> dict[str, pd.DataFrame]:
    train = pd.DataFrame({"row_id": range(1, 9), "x": range(8), "y": ["a", "b"] * 4})
    test = pd.DataFrame({"row_id": range(9, 13), "x": range(4)})
    answers = pd.DataFrame({"row_id": range(9, 13), "y": ["a", "b", "a", "b"]})
    reference = pd.DataFrame({"row_id": range(9, 13), "y": ["a", "a", "a", "b"]})
    return {"train": train, "test": test, "answers": answers, "reference": reference}


def _view(
    folder: Path, task: Task | None = None, prepared: PreparedSource | None = None, **frames
) -> TaskView:
    task = task or _task()
    data = {**_frames(), **frames}
    reference = "reference_predictions.csv" if task.family.endswith("-IF") else "strong_predictions.csv"
    paths = {
        "train": "public/train.csv",
        "test": "public/test.csv",
        "answers": "private/answers.csv",
        "reference": f"private/{reference}",
    }
    for key, rel in paths.items():
        frame = data[key]
        if frame is None:
            continue
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False) if isinstance(frame, pd.DataFrame) else path.write_text(frame)
    return TaskView(task, prepared or _prepared(), folder)


def _findings(gx: GXRun, view: TaskView, cfg: Config) -> dict:
    findings = {check.name: check.run(view, cfg) for check in gx.file_checks()}
    return {**findings, "gx-task-record": _record(gx, view.task)}


def _record(gx: GXRun, task: Task) -> Finding:
    """The task-record finding of `task` checked alone."""
    return TaskRecordExpectations(gx).run_all([task])[task.id]


def test_clean_task_passes_all_three_checks(gx, cfg, tmp_path):
    findings = _findings(gx, _view(tmp_path), cfg)
    assert set(findings) == {"gx-prepared", "gx-task-record", "gx-reference"}
    for name, finding in findings.items():
        assert not finding.flagged, (name, finding.reason)
        assert finding.score == 1.0
        assert finding.reason.startswith("all ") and finding.reason.endswith(" expectations pass")
        assert finding.details["suites_version"] == SUITES_VERSION
        assert all(e["success"] for e in finding.details["expectations"])
        assert finding.details_json()  # serialisable for the validations table


def test_a_task_id_of_digits_only_is_not_read_as_a_date(cfg, tmp_path, caplog):
    """GX parses a run name as a date (validating, and rendering Data Docs); a 16-digit task id overflowed it."""
    gx = GXRun()
    task = _task().model_copy(update={"id": "2884157532632709"})
    findings = _findings(gx, _view(tmp_path / "task", task), cfg)
    assert all(not f.flagged for f in findings.values()), {n: f.reason for n, f in findings.items()}
    with caplog.at_level(logging.ERROR):
        gx.build_data_docs(tmp_path / "docs")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text[:500]


def test_train_test_id_overlap(gx, cfg, tmp_path):
    test = pd.DataFrame({"row_id": [3, 10, 11, 12], "x": range(4)})
    answers = pd.DataFrame({"row_id": [3, 10, 11, 12], "y": ["a"] * 4})
    reference = pd.DataFrame({"row_id": [3, 10, 11, 12], "y": ["a"] * 4})
    view = _view(tmp_path, test=test, answers=answers, reference=reference)
    finding = PreparedExpectations(gx).run(view, cfg)
    assert finding.flagged
    assert "train and test row_id disjoint (1 unexpected row: 3)" in finding.reason
    assert finding.reason.startswith("1 of ")
    assert 0 < finding.score < 1


def test_duplicate_test_ids(gx, cfg, tmp_path):
    test = pd.DataFrame({"row_id": [9, 10, 10, 12], "x": range(4)})
    finding = PreparedExpectations(gx).run(_view(tmp_path, test=test), cfg)
    assert finding.flagged
    assert "test key row_id unique (2 unexpected rows: 10)" in finding.reason


def test_null_in_answers_target(gx, cfg, tmp_path):
    answers = pd.DataFrame({"row_id": range(9, 13), "y": ["a", None, "a", "b"]})
    finding = PreparedExpectations(gx).run(_view(tmp_path, answers=answers), cfg)
    assert finding.flagged
    assert "answers target y not null (1 unexpected row)" in finding.reason


def test_answers_keys_must_equal_test_keys(gx, cfg, tmp_path):
    answers = pd.DataFrame({"row_id": [9, 10, 11, 11, 99], "y": ["a"] * 5})
    finding = PreparedExpectations(gx).run(_view(tmp_path, answers=answers), cfg)
    assert finding.flagged
    assert "answers row_id match test (3 unexpected rows: 11, 12, 99)" in finding.reason


def test_test_file_with_target_column(gx, cfg, tmp_path):
    test = pd.DataFrame({"row_id": range(9, 13), "x": range(4), "y": ["a"] * 4})
    finding = PreparedExpectations(gx).run(_view(tmp_path, test=test), cfg)
    assert finding.flagged
    assert "test has no target column (unexpected: y)" in finding.reason


def test_empty_train_and_missing_target(gx, cfg, tmp_path):
    finding = PreparedExpectations(gx).run(_view(tmp_path, train="row_id,x\n"), cfg)
    assert finding.flagged
    assert "train not empty (0)" in finding.reason
    assert "target y in train (absent)" in finding.reason


def test_nan_in_reference_predictions(gx, cfg, tmp_path):
    reference = pd.DataFrame({"row_id": range(9, 13), "y": [1.0, np.nan, 0.5, 2.0]})
    finding = ReferenceExpectations(gx).run(_view(tmp_path, reference=reference), cfg)
    assert finding.flagged
    assert finding.reason == "1 of 4 expectations fail: reference target y not NaN (1 unexpected row)"
    assert finding.score == 0.75


def test_reference_with_missing_row(gx, cfg, tmp_path):
    reference = pd.DataFrame({"row_id": [9, 10, 12], "y": ["a", "b", "b"]})
    finding = ReferenceExpectations(gx).run(_view(tmp_path, reference=reference), cfg)
    assert finding.flagged
    assert "reference rows == test rows (3)" in finding.reason
    assert "reference row_id match test (1 unexpected row: 11)" in finding.reason


def test_reference_keys_compared_as_text(gx, cfg, tmp_path):
    view = _view(tmp_path, reference="row_id,y\n9.0,a\n10,a\n11,a\n12,b\n")
    finding = ReferenceExpectations(gx).run(view, cfg)
    assert finding.flagged
    assert "reference row_id match test (2 unexpected rows: 9, 9.0)" in finding.reason


def test_missing_reference_file_is_a_flagged_finding(gx, cfg, tmp_path):
    finding = ReferenceExpectations(gx).run(_view(tmp_path, reference=None), cfg)
    assert finding.flagged
    assert finding.reason == "private/reference_predictions.csv is missing"
    finding = PreparedExpectations(gx).run(_view(tmp_path / "other", answers=None), cfg)
    assert finding.flagged and "private/answers.csv is missing" in finding.reason


def _sibling(folder: Path, n: int, **frames) -> TaskView:
    """Task `task-n` of a framing: the framing's test and answers files, its own train file."""
    train = pd.DataFrame({"row_id": range(1, 9), "x": range(n, 8 + n), "y": ["a", "b"] * 4})
    task = _task().model_copy(update={"id": f"task-{n}"})
    return _view(folder / f"task-{n}", task, **{"train": train, **frames})


def test_a_validation_of_byte_identical_files_is_made_once_per_batch(gx, cfg, tmp_path):
    """Tasks of one framing share their test and answers files: the second task's suites of those files reuse
    the first's validation, and its findings are those it gets checked alone."""
    first, second = _sibling(tmp_path, 1), _sibling(tmp_path, 2)
    prepared, reference = gx.file_checks()
    before = gx.validations
    assert not prepared.run(first, cfg).flagged
    assert gx.validations - before == 5  # train, test, answers, train-test ids, answers-test keys
    before = gx.validations
    found = prepared.run(second, cfg)
    assert gx.validations - before == 2  # its own train, and the ids of train against test
    assert found == PreparedExpectations(gx).run(second, cfg)
    assert reference.run(first, cfg) == reference.run(second, cfg)  # same reference file: no new validation


def test_a_task_whose_shared_file_differs_gets_its_own_validation(gx, cfg, tmp_path):
    """A byte changed in the second task's test file, an answers file missing in the third: those tasks are
    flagged, the tasks around them are not."""
    prepared, _ = gx.file_checks()
    views = [
        _sibling(tmp_path, 1),
        _sibling(tmp_path, 2, test=pd.DataFrame({"row_id": [9, 10, 10, 12], "x": range(4)})),
        _sibling(tmp_path, 3, answers=None),
        _sibling(tmp_path, 4),
    ]
    findings = [prepared.run(view, cfg) for view in views]
    assert [f.flagged for f in findings] == [False, True, True, False]
    assert "test key row_id unique (2 unexpected rows: 10)" in findings[1].reason
    assert findings[2].reason == "private/answers.csv is missing"
    assert findings[3] == findings[0]


def test_mm_task_uses_strong_predictions(gx, cfg, tmp_path):
    task = _task("Class-MM", metric="macro-f1")
    findings = _findings(gx, _view(tmp_path, task=task), cfg)
    assert (tmp_path / "private" / "strong_predictions.csv").exists()
    assert not any(f.flagged for f in findings.values()), {n: f.reason for n, f in findings.items()}


def test_compound_keys(gx, cfg, tmp_path):
    task = _task("TS-CF", keys=["date", "store"], metric="forecast-skill", scale=[1.0])
    dates = ["2020-01-01", "2020-01-02"]
    train = pd.DataFrame(
        {"row_id": range(4), "date": ["2019-12-30", "2019-12-31"] * 2, "store": list("aabb")}
    )
    train["y"] = 1.0
    test = pd.DataFrame({"date": dates * 2, "store": list("aabb")})
    answers = test.assign(y=2.0)
    view = _view(tmp_path, task=task, train=train, test=test, answers=answers, reference=answers)
    findings = _findings(gx, view, cfg)
    assert not any(f.flagged for f in findings.values()), {n: f.reason for n, f in findings.items()}
    skipped = findings["gx-prepared"].details["skipped"]
    assert skipped == {"train and test row_id disjoint": "row_id is not in both train and test"}

    duplicated = pd.DataFrame({"date": dates * 2, "store": list("aaab")}).assign(y=2.0)
    finding = ReferenceExpectations(gx).run(
        _view(tmp_path / "dup", task=task, test=test, reference=duplicated), cfg
    )
    assert finding.flagged
    assert "reference date+store match test (2 unexpected rows: 2020-01-01|a, 2020-01-01|b)" in finding.reason


def test_task_record_with_unknown_family(gx):
    task = _task().model_copy(update={"family": "Class-XX"})
    finding = _record(gx, task)
    assert finding.flagged
    assert "family known (1 unexpected row: Class-XX)" in finding.reason
    assert "metric allowed for family" in finding.reason


def test_task_record_fields_metric_limits_status(gx):
    task = _task("Reg-MM", metric="macro-f1")
    limits = task.limits.model_copy(update={"turns": 0})
    task = task.model_copy(update={"instruction": "", "limits": limits, "status": "done"})
    finding = _record(gx, task)
    assert finding.flagged
    assert "required fields present (1 unexpected row: instruction)" in finding.reason
    assert "metric allowed for family (1 unexpected row: ('Reg-MM', 'macro-f1'))" in finding.reason
    assert "turns positive (1 unexpected row: 0)" in finding.reason
    assert "status known (1 unexpected row: done)" in finding.reason
    assert "seconds_per_execution" not in finding.reason


def _tasks(*updates: dict) -> list[Task]:
    """Tasks of one source, `task-1`, `task-2`, ...; each with its update to the record."""
    return [_task().model_copy(update={"id": f"task-{i}", **u}) for i, u in enumerate(updates, start=1)]


def _alone(gx: GXRun, tasks: list[Task]) -> dict:
    return {task.id: _record(gx, task) for task in tasks}


def test_task_records_checked_together_each_get_their_own_rows(gx):
    """One validation for the tasks of a source: a defect in the second task's record is that task's alone."""
    limits = _task().limits.model_copy(update={"turns": 0})
    tasks = _tasks({}, {"instruction": "", "limits": limits, "status": "done"}, {"source_version": ""})
    together = TaskRecordExpectations(gx).run_all(tasks)
    assert together == _alone(gx, tasks)
    first, second, third = (together[task.id] for task in tasks)
    assert not first.flagged and first.score == 1.0 and first.reason == "all 6 expectations pass"
    assert second.flagged
    assert second.reason == (
        "3 of 6 expectations fail: required fields present (1 unexpected row: instruction); "
        "turns positive (1 unexpected row: 0); status known (1 unexpected row: done)"
    )
    assert (
        third.reason == "1 of 6 expectations fail: required fields present (1 unexpected row: source_version)"
    )


def test_a_task_record_without_limits_leaves_the_others_values_as_they_are(gx):
    """Another task's null turns would make a numeric column of floats: a task's own turns still read 0."""
    limits = _task().limits.model_copy(update={"turns": 0})
    tasks = _tasks({"limits": limits}, {"limits": None})
    together = TaskRecordExpectations(gx).run_all(tasks)
    assert together == _alone(gx, tasks)
    assert "turns positive (1 unexpected row: 0)" in together["task-1"].reason
    assert together["task-2"].reason == (
        "1 of 6 expectations fail: required fields present (2 unexpected rows: turns, seconds_per_execution)"
    )


def test_an_expectation_that_raises_on_many_records_is_rerun_per_task(gx):
    """GX's error on a frame of many tasks names no task: each task's record is then validated alone, so the
    error lands on the task whose value raised it."""
    limits = _task().limits.model_copy(update={"turns": "many"})  # text where a number belongs
    tasks = _tasks({}, {"limits": limits}, {})
    together = TaskRecordExpectations(gx).run_all(tasks)
    assert together == _alone(gx, tasks)
    assert not together["task-1"].flagged and not together["task-3"].flagged
    assert together["task-2"].flagged
    assert together["task-2"].reason.startswith("1 of 6 expectations fail: turns positive (error: ")


def test_task_records_with_one_id_twice_are_refused(gx):
    with pytest.raises(ValueError, match="occurs twice"):
        TaskRecordExpectations(gx).run_all([_task(), _task()])


def test_data_docs_index_after_a_run(gx, cfg, tmp_path):
    _findings(gx, _view(tmp_path / "task"), cfg)
    index = gx.build_data_docs(tmp_path / "docs")
    assert index == (tmp_path / "docs" / "index.html").resolve()
    html = index.read_text()
    for suite in SUITES:
        assert suite in html
    assert list((tmp_path / "docs" / "validations").rglob("*.html"))
    assert gx.build_data_docs(tmp_path / "docs") == index  # a second build reuses the site


def test_data_docs_on_a_full_disk_raise_its_errno_and_log_no_traceback(gx, cfg, tmp_path, caplog):
    """GX logs each page it cannot write, with its traceback, and goes on; a full disk must reach the CLI as the
    one error it is (see dareforge.cli.filesystem)."""
    _findings(gx, _view(tmp_path / "task"), cfg)
    with tmpfs(tmp_path / "disk", 16), caplog.at_level(logging.ERROR), pytest.raises(OSError) as full:
        gx.build_data_docs(tmp_path / "disk" / "docs")
    assert full.value.errno == errno.ENOSPC
    assert "Traceback" not in caplog.text
