"""Control results of the Harbor export established from what is known (`dareforge.exports.harbor_known`): keyed by
the bytes the runs read, reused across exports, the gate's certificate counted as the oracle's run where the
bytes are the certified ones, the no-op's reward derived from the grader's absent-output path (proven here for
every registered metric), and a real run wherever anything differs.

The export tests run on a small iris release (Class-IF, Class-MM), exported with no sampled run
(`controls_per_family=0`): what is not certified is run anyway.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import get_args

import pytest

from dareforge.exports import ExportError
from dareforge.exports import harbor as harbor_module
from dareforge.exports.export_format import ExportJob
from dareforge.exports.harbor import HarborLayout
from dareforge.exports.harbor_control import ControlRun
from dareforge.exports.harbor_grader import grader_files, reward_passes
from dareforge.exports.harbor_known import (
    CERTIFIED,
    DERIVED,
    PREFIX,
    REUSED,
    RUN,
    absent_output_score,
    control_key,
    derive_noop,
    entry_key,
    read_known,
    write_known,
)
from dareforge.families.registry import REGISTERED, family_of
from dareforge.reference_solutions.graders import grade
from dareforge.reference_solutions.metrics import METRICS
from dareforge.sandbox import probe
from dareforge.schema import ANSWER_METRIC, AnswerType, MetricSpec
from dareforge.store import Store
from tests.test_harbor import _release

NEEDS_BWRAP = pytest.mark.skipif(not probe().available, reason="the control runs need bubblewrap")
PARAMS = {"tolerance": 1e-6, "k": 3}


def _spec(name: str) -> MetricSpec:
    metric = METRICS[name]
    extra = {p: v for p, v in PARAMS.items() if p in metric.params}
    if "scale" in metric.params:
        extra["scale"] = [1.0]
    return MetricSpec(name=name, target_columns=["y"], key_columns=["row_id"], **extra)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_every_metric_grades_an_absent_output_at_its_worst_score(name, tmp_path):
    """The no-op's proof: whatever the truth, a submission that does not exist gets `absent_output_score`."""
    truth = tmp_path / "answers.csv"
    label = METRICS[name].kind == "label"
    truth.write_text(
        "row_id,y\n" + "".join(f"{i},{('a' if i % 2 else 'b') if label else i / 3}\n" for i in range(6))
    )
    if name == "map-at-k":
        truth.write_text("row_id,y\n" + "".join(f"{i},a b\n" for i in range(6)))
    spec = _spec(name)
    result = grade(spec, tmp_path / "absent.csv", truth)
    assert result.error and "not found" in result.error
    assert result.score == absent_output_score(spec)


@pytest.mark.parametrize("kind", get_args(AnswerType))
def test_an_answer_metric_grades_an_absent_output_at_0(kind, tmp_path):
    truth = tmp_path / "answer.json"
    truth.write_text(
        json.dumps({"answer": {"list": [1, 2], "boolean": True, "string": "x"}.get(kind.split("_")[0], 42)})
    )
    spec = MetricSpec(name=ANSWER_METRIC, target_columns=[], key_columns=[], answer_type=kind)
    result = grade(spec, tmp_path / "absent.json", truth)
    assert result.error and result.score == absent_output_score(spec) == 0.0


def test_no_family_bar_pays_an_absent_output():
    for family in REGISTERED.values():
        bar = 1.0 if family.exact else family.pass_bar
        assert not reward_passes(str(family.grading), 0.0, bar), family.name


def test_the_key_is_the_bytes_the_runs_read_and_nothing_else(monkeypatch):
    files = {
        "instruction.md": "i",
        "task.toml": "t",
        "environment/Dockerfile": "d",
        "environment/app/train.csv": "a",
        "solution/reference.py": "s",
        "tests/grade.py": "g",
    }
    key = control_key(files, ["/app/predictions.csv"], 1000.0, 200.0)
    assert key == control_key(
        {**files, "instruction.md": "other", "task.toml": "v2"}, ["/app/predictions.csv"], 1000.0, 200.0
    )
    for rel in (
        "environment/Dockerfile",
        "environment/app/train.csv",
        "solution/reference.py",
        "tests/grade.py",
    ):
        assert control_key({**files, rel: "changed"}, ["/app/predictions.csv"], 1000.0, 200.0) != key, rel
    assert control_key(files, ["/app/answer.json"], 1000.0, 200.0) != key
    assert control_key(files, ["/app/predictions.csv"], 1000.0, 100.0) != key
    monkeypatch.setattr("dareforge.exports.harbor_known.package_versions", lambda: ["numpy==0.0"])
    assert control_key(files, ["/app/predictions.csv"], 1000.0, 200.0) != key, "another stack is another key"


def test_only_a_passing_result_is_stored_and_concurrent_writers_leave_a_whole_entry(tmp_path):
    store = Store(str(tmp_path / "store"))
    oracle, noop = ControlRun(1.0, {"score": 1.0}), ControlRun(0.0, {"score": 0.0})
    with pytest.raises(ValueError):
        write_known(store, "ab" * 32, ControlRun(0.0, {}), noop, {"oracle": RUN, "noop": RUN})
    assert read_known(store, "ab" * 32) is None
    writers = [
        threading.Thread(
            target=write_known, args=(store, "cd" * 32, oracle, noop, {"oracle": RUN, "noop": RUN})
        )
        for _ in range(8)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert read_known(store, "cd" * 32) == (oracle, noop, {"oracle": RUN, "noop": RUN})
    assert [k for k in store.list(PREFIX)] == [entry_key("cd" * 32)]
    store.write_bytes(entry_key("ef" * 32), b"{not json")
    assert read_known(store, "ef" * 32) is None, "an unreadable entry is run again"


@pytest.fixture(scope="module")
def iris(tmp_path_factory):
    ctx, release = _release(tmp_path_factory.mktemp("harbor-known"), ["sklearn-iris"], questions=False)
    out = tmp_path_factory.mktemp("harbor-known-out")
    first = HarborLayout("harbor", controls_per_family=0).export(ExportJob(ctx, release, dest=out / "first"))
    return ctx, release, out, first


def test_a_bar_an_absent_output_reaches_is_not_derived(iris):
    _, release, _, _ = iris
    task = next(t for t in release.tasks() if t.family == "Class-MM")
    family = family_of(task)
    assert derive_noop(family, task, 0.5, {}).reward == 0.0
    assert derive_noop(family, task, 0.0, {}).reward == 1.0  # a real run then decides, and fails the export
    assert derive_noop(family, task, 0.5, {f"environment/app/{family.files.output}": "x"}) is None


@NEEDS_BWRAP
def test_the_first_export_certifies_what_the_gate_certified_and_runs_one_task_per_grader(iris):
    _, release, _, first = iris
    assert len(first.tasks) == len(release.tasks()) >= 2
    assert all(r == (1.0, 0.0) for r in first.rewards.values()) and len(first.rewards) == len(first.tasks)
    # Nothing sampled, so one real run only: the one that proves the grader bundle's packaged paths.
    assert first.controlled.total() == 1
    assert sorted(first.how.values()) == sorted(
        [(RUN, RUN)] + [(CERTIFIED, DERIVED)] * (len(first.tasks) - 1)
    )


@NEEDS_BWRAP
def test_a_re_export_runs_no_control(iris):
    ctx, release, out, first = iris
    again = HarborLayout("harbor", controls_per_family=None).export(
        ExportJob(ctx, release, dest=out / "again")
    )
    assert again.controlled.total() == 0, "every result is stored, even with every task sampled"
    assert set(again.how.values()) == {(REUSED, REUSED)} and again.rewards == first.rewards
    assert "oracles: " + f"{len(first.tasks)} reused" in again.summary()[1]


@NEEDS_BWRAP
def test_one_changed_byte_of_a_task_runs_its_control_again(iris):
    ctx, release, out, _ = iris
    task = next(t for t in release.tasks() if t.family == "Class-IF")
    key = f"{release.files_dir(task.id)}/{task.public_files[0].name}"
    original = release.store.read_bytes(key)
    release.store.write_bytes(key, original + b"\n")  # a trailing line end: the same table, other bytes
    try:
        changed = HarborLayout("harbor", controls_per_family=0).export(
            ExportJob(ctx, release, dest=out / "changed")
        )
    finally:
        release.store.write_bytes(key, original)
    assert changed.how[task.id] == (RUN, RUN), "not the certified bytes: a real run"
    assert changed.controlled.total() == 1 and changed.rewards[task.id] == (1.0, 0.0)
    assert {how for i, how in changed.how.items() if i != task.id} == {(REUSED, REUSED)}


@NEEDS_BWRAP
def test_a_grader_change_is_another_key_and_a_failing_oracle_is_not_hidden(iris, monkeypatch):
    """A bundle whose grade.py pays the opposite of the rule: no stored result of the old bundle is reused, the
    in-process certificate does not vouch for it, and the real run that proves the new bundle fails the export."""
    ctx, release, out, _ = iris

    def broken() -> dict[str, bytes]:
        files = grader_files()
        text = files["grade.py"].decode()
        files["grade.py"] = text.replace("passed = reward_passes(", "passed = not reward_passes(").encode()
        return files

    monkeypatch.setattr(harbor_module, "grader_files", broken)
    with pytest.raises(ExportError, match=r"(?s)PACKAGING BUG: 1 of 1 controlled tasks.*earned reward 0\.0"):
        HarborLayout("harbor", controls_per_family=0).export(ExportJob(ctx, release, dest=out / "broken"))
    assert not (out / "broken").exists()


def test_stored_entries_live_under_their_prefix(iris):
    _, release, _, first = iris
    stored = [k for k in release.store.list(PREFIX) if "/graders/" not in k]
    assert len(stored) >= len(first.tasks) and all(Path(k).parent.name == Path(k).stem[:2] for k in stored)


class _Stopped(Exception):
    """What stops an export in the middle of its control runs here (a kill, a full disk, Ctrl-C)."""


@NEEDS_BWRAP
def test_an_export_stopped_during_its_controls_keeps_those_that_passed(iris, monkeypatch):
    """Both tasks changed by a byte, so both need a real run; the export stops at the second task's oracle. The
    first task's result was stored as it passed: the next export runs only the second."""
    ctx, release, out, _ = iris
    tasks = sorted(release.tasks(), key=lambda t: t.id)[:2]
    keys = [f"{release.files_dir(t.id)}/{t.public_files[0].name}" for t in tasks]
    originals = [release.store.read_bytes(key) for key in keys]
    monkeypatch.setattr(ctx.config.run, "jobs", 1)  # one control at a time, in the order given
    real_run, calls = harbor_module.Controller.run, []

    def run_until_the_third(self, *args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise _Stopped
        return real_run(self, *args, **kwargs)

    try:
        for key, original in zip(keys, originals, strict=True):
            # Two line ends: bytes no other test of the module stored a result for (one is another test's).
            release.store.write_bytes(key, original + b"\n\n")
        with monkeypatch.context() as patched:
            patched.setattr(harbor_module.Controller, "run", run_until_the_third)
            with pytest.raises(_Stopped):
                HarborLayout("harbor", controls_per_family=0).export(
                    ExportJob(ctx, release, dest=out / "stopped")
                )
        again = HarborLayout("harbor", controls_per_family=0).export(
            ExportJob(ctx, release, dest=out / "resumed")
        )
    finally:
        for key, original in zip(keys, originals, strict=True):
            release.store.write_bytes(key, original)
    first, second = calls[0][0].name, calls[2][0].name  # the task folders, in the order they ran
    by_folder = {harbor_module.folder_name(t): t.id for t in tasks}
    assert again.how[by_folder[first]] == (REUSED, REUSED), "the result that passed before the stop"
    assert again.how[by_folder[second]] == (RUN, RUN) and again.controlled.total() == 1


@NEEDS_BWRAP
def test_an_export_stopped_at_its_first_control_keeps_what_it_certified(iris, monkeypatch):
    """With nothing stored, an export certifies every task but the one whose real run proves the grader bundle,
    and is stopped at that run. The certificates, checked before any control, were stored already: the next
    export reuses them and runs only that one control."""
    ctx, release, out, _ = iris
    release.store.remove_prefix(PREFIX)

    def stopped(self, *args, **kwargs):
        raise _Stopped

    with monkeypatch.context() as patched:
        patched.setattr(harbor_module.Controller, "run", stopped)
        with pytest.raises(_Stopped):
            HarborLayout("harbor", controls_per_family=0).export(ExportJob(ctx, release, dest=out / "cut"))
    again = HarborLayout("harbor", controls_per_family=0).export(ExportJob(ctx, release, dest=out / "uncut"))
    assert sorted(again.how.values()) == sorted([(RUN, RUN)] + [(REUSED, REUSED)] * (len(again.tasks) - 1))
