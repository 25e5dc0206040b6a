"""The `harbor` export: one Harbor task folder per released task, in Harbor's task.toml schema, with the answers
only under tests/, dareforge's own grader inside; a task whose stored strong score is below its family's bar
left out without a run, and control runs in the sandbox (oracle reward 1, no-op 0) on a seeded sample per family.

Runs on a small release of iris (Class-IF, Class-MM, QA, Lake) and CO2 (TS-XF, TS-CF): one IF, one MM, two TS, one
QA and one Lake family, exported with one control per family (QA and Lake have two tasks each: one is sampled).
Its TS-XF strong reference scored below the family's bar when it was made, so that task is left out without a
run; a second small release has an IF solution corrupted on purpose, which fails the export.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import tomllib
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dareforge.agents.grading import passed
from dareforge.child_python import python_argv
from dareforge.cli import app
from dareforge.context import RunContext
from dareforge.exports import ExportError
from dareforge.exports.export_format import ExportJob
from dareforge.exports.formats import FORMATS, export_format
from dareforge.exports.harbor import (
    HarborLayout,
    HarborReport,
    control_sample,
    folder_name,
    needs_control,
    parse_controls,
    stored_verdict,
)
from dareforge.exports.harbor_card import SUMMARY_LEFT_OUT
from dareforge.exports.harbor_control import Controller
from dareforge.exports.harbor_grader import BUNDLE, RESULTS_STANDIN, SCHEMA_STANDIN, grader_files
from dareforge.exports.harbor_known import CERTIFIED, DERIVED, REUSED, RUN
from dareforge.exports.reward_hacks import wrong_output
from dareforge.families.registry import bar_of, family_of
from dareforge.publish.release import build_release
from dareforge.reference_solutions.graders import grade
from dareforge.reference_solutions.results import GradeResult
from dareforge.sandbox import probe
from dareforge.schema import MetricSpec
from tests.stores import generate_tasks, store_config

pytestmark = pytest.mark.skipif(not probe().available, reason="the control runs need bubblewrap")

DAY = date(2026, 1, 15)
HARBOR_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
"""Harbor's package name pattern (`[task] name`, org/name)."""
HARBOR_FIELDS = {
    None: {
        "schema_version",
        "task",
        "metadata",
        "verifier",
        "agent",
        "environment",
        "solution",
        "source",
        "multi_step_reward_strategy",
        "steps",
        "artifacts",
    },
    "task": {"name", "description", "authors", "keywords", "version"},
    "verifier": {
        "timeout_sec",
        "env",
        "user",
        "network_mode",
        "allowed_hosts",
        "environment_mode",
        "environment",
        "collect",
    },
    "agent": {"timeout_sec", "user", "network_mode", "allowed_hosts"},
    "environment": {
        "build_timeout_sec",
        "docker_image",
        "os",
        "cpus",
        "memory_mb",
        "storage_mb",
        "gpus",
        "gpu_types",
        "tpu",
        "allow_internet",
        "network_mode",
        "allowed_hosts",
        "mcp_servers",
        "env",
        "skills_dir",
        "healthcheck",
        "workdir",
    },
}
"""The fields of Harbor 0.25's `TaskConfig` (schema 1.4) and its sections, as its models declare them
(`tests/test_harbor_package.py` checks them against the installed package)."""
ANSWER_FILES = {"answers.csv", "answer.json", "reference_predictions.csv", "strong_predictions.csv"}


def _release(root: Path, sources: list[str], *, questions: bool, if_variants: int = 1):
    cfg = store_config(root, sources)
    cfg.generate.if_variants = if_variants
    cfg.generate.qa_per_source = 1 if questions else 0
    cfg.generate.lakes_per_source = 1 if questions else 0
    # The export is under test, not the gate: the solver ladder rightly gates iris's Class-MM task (every rung
    # scores near 1, nothing to tell apart), and these tests need an MM task of each kind to export.
    cfg.validate_.ladder_cpu_seconds = 0
    ctx = generate_tasks(RunContext.from_config(cfg, show_progress=False))
    return ctx, build_release(ctx, "hb", today=DAY).release


@pytest.fixture(scope="module")
def exported(harbor_release, tmp_path_factory):
    ctx, release = harbor_release  # built once per session (conftest), with test_harbor_hacks and _package
    dest = tmp_path_factory.mktemp("harbor-out") / "harbor"
    report = HarborLayout("harbor", controls_per_family=1).export(ExportJob(ctx, release, dest=dest))
    return ctx, release, report


def _kept(exported):
    _, release, report = exported
    return [t for t in release.tasks() if folder_name(t) in report.tasks]


def test_harbor_is_registered_and_in_the_export_help():
    assert "harbor" in FORMATS
    result = CliRunner().invoke(app, ["export", "--help"], terminal_width=400)
    assert result.exit_code == 0 and "harbor:" in result.output


def test_every_family_present_is_exported_and_controlled_with_oracle_1_and_noop_0(exported):
    _, release, report = exported
    families = {t.family for t in release.tasks()}
    assert {"Class-IF", "Class-MM", "TS-CF", "QA", "Lake"} <= families
    kept = _kept(exported)
    assert {t.family for t in kept} >= {"Class-IF", "Class-MM", "TS-CF", "QA", "Lake"}
    assert set(report.controlled) == {t.family for t in kept}  # every exported family, once
    # Every exported task has its oracle 1 and no-op 0 established, run or certified (nothing in /app earns
    # nothing).
    assert set(report.rewards) == {t.id for t in kept}
    assert all(rewards == (1.0, 0.0) for rewards in report.rewards.values())
    assert report.oracle_passed == report.noop_failed == report.families
    assert set(report.how.values()) == {(RUN, RUN), (CERTIFIED, DERIVED)}
    assert len(kept) + len(report.skipped) == len(release.tasks())
    assert sorted(p.name for p in report.dest.iterdir() if p.is_dir()) == sorted(report.tasks)


def test_the_controls_are_the_seeded_sample_of_each_family(exported):
    _, _, report = exported
    by_family: dict[str, list[str]] = {}
    for task in _kept(exported):
        by_family.setdefault(task.family, []).append(task.id)
    assert max(len(ids) for ids in by_family.values()) > 1, "a family must have more tasks than it controls"
    ran = {task_id for task_id, how in report.how.items() if how == (RUN, RUN)}
    assert ran == control_sample(by_family, 1)
    card = (report.dest / "README.md").read_text()
    assert "a seeded sample of up to 1 per family" in card
    for family, ids in by_family.items():
        assert report.controlled[family] == 1
        assert f"| {family} | {len(ids)} | {len(ids)} | {len(ids)} |" in card


def test_the_sample_is_stratified_and_the_same_for_the_same_ids_in_any_order():
    by_family = {"QA": [f"q{i:03d}" for i in range(50)], "Lake": ["l1", "l2", "l3"]}
    chosen = control_sample(by_family, 20)
    assert len(chosen & set(by_family["QA"])) == 20 and set(by_family["Lake"]) <= chosen
    assert chosen == control_sample({f: ids[::-1] for f, ids in reversed(by_family.items())}, 20)
    assert chosen != set(by_family["QA"][:20]) | set(by_family["Lake"]), "drawn by hash, not the first ids"
    grown = control_sample({**by_family, "QA": [*by_family["QA"], "q-new"]}, 20)
    assert len(chosen - grown) <= 1  # a new task displaces at most one sampled task
    assert control_sample(by_family, None) == set(by_family["QA"]) | set(by_family["Lake"])
    assert control_sample(by_family, 0) == set()
    assert parse_controls(None) == 20 and parse_controls("all") is None and parse_controls("3") == 3
    with pytest.raises(ExportError):
        parse_controls("-1")


def test_the_stored_strong_score_decides_what_is_left_out(exported):
    _, release, _ = exported
    tasks = {t.family: t for t in release.tasks()}
    goal, exact, question = tasks["Class-MM"], tasks["Class-IF"], tasks["QA"]
    bar = bar_of(goal)

    def scored(task, strong):
        return task.model_copy(update={"scores": task.scores.model_copy(update={"strong": strong})})

    why = stored_verdict(scored(goal, bar - 0.01), family_of(goal))
    assert why and "below the bar" in why and "without a run" in why
    assert stored_verdict(scored(goal, bar), family_of(goal)) is None
    assert stored_verdict(scored(exact, 0.0), family_of(exact)) is None  # its reference made the answers
    assert stored_verdict(scored(question, 0.0), family_of(question)) is None
    assert needs_control(scored(goal, None), family_of(goal)) and not needs_control(goal, family_of(goal))


def test_the_summary_names_a_few_left_out_tasks_and_the_card_all(exported):
    _, release, _ = exported
    many = HarborReport(
        release, Path("harbor"), skipped={f"t{i:02d}": "why" for i in range(SUMMARY_LEFT_OUT + 3)}
    )
    lines = many.summary()
    assert "13 left out" in lines[0] and len(lines) == 2 + SUMMARY_LEFT_OUT + 1
    assert lines[-1] == "  and 3 more left out: its README.md lists every one"


def test_a_task_below_its_family_bar_is_exported_at_its_own_bar_and_one_below_that_is_left_out(exported):
    _, release, report = exported
    # CO2's TS-XF strong reference scores below the family's bar of 0.6: the task carries its own bar (the
    # release has no gate verdicts), which its oracle reaches, so it is exported and graded at that bar.
    (own,) = [t for t in release.tasks() if t.family == "TS-XF"]
    assert own.pass_bar is not None and own.scores.strong < family_of(own).pass_bar
    assert folder_name(own) in report.tasks and stored_verdict(own, family_of(own)) is None
    folder = report.dest / folder_name(own)
    assert json.loads((folder / "tests" / "grading.json").read_text())["bar"] == own.pass_bar
    assert tomllib.loads((folder / "task.toml").read_text())["metadata"]["pass_bar"] == own.pass_bar
    assert f"at least {own.pass_bar:g}." in (folder / "instruction.md").read_text()
    # Stored below the bar it states (a task from before bars were recorded): left out, without a run.
    stale = own.model_copy(update={"pass_bar": None})
    why = stored_verdict(stale, family_of(stale))
    assert why and "below the bar 0.6" in why and "without a run" in why
    card = (report.dest / "README.md").read_text()
    families = {t.id: t.family for t in release.tasks()}
    for task_id, why in report.skipped.items():
        assert f"| {task_id} | {families[task_id]} | {why} |" in card


def test_layout_and_task_toml_follow_harbors_schema(exported):
    _, release, _ = exported
    for task in _kept(exported):
        folder = exported[2].dest / folder_name(task)
        for part in (
            "instruction.md",
            "task.toml",
            "environment/Dockerfile",
            "solution/solve.sh",
            "tests/test.sh",
        ):
            assert (folder / part).is_file(), part
        config = tomllib.loads((folder / "task.toml").read_text())
        assert set(config) <= HARBOR_FIELDS[None]
        for section in ("task", "verifier", "agent", "environment"):
            assert set(config[section]) <= HARBOR_FIELDS[section], section
        assert config["schema_version"] == "1.4"
        # The verifier runs apart from the agent and gets only the graded output from its container.
        assert config["verifier"]["environment_mode"] == "separate"
        assert config["artifacts"] == [f"/app/{family_of(task).files.output}"]
        assert HARBOR_NAME.match(config["task"]["name"]) and config["task"]["name"].endswith(task.id)
        limits = task.limits
        assert config["agent"]["timeout_sec"] == float(limits.turns * limits.seconds_per_execution)
        assert config["verifier"]["timeout_sec"] == float(limits.seconds_per_execution)
        assert isinstance(config["environment"]["cpus"], int) and isinstance(
            config["environment"]["memory_mb"], int
        )
        meta = config["metadata"]
        assert meta["family"] == task.family and meta["task_id"] == task.id
        assert meta["release"] == release.name and meta["release_version"] == release.version
        assert meta["source_id"] == task.source_id and meta["license"]
        assert meta["package_versions"] == task.package_versions
        docker = (folder / "environment" / "Dockerfile").read_text()
        for pin in task.package_versions:
            name, version = pin.split("==")
            assert (f"python:{version}-slim" if name == "python" else pin) in docker
        assert sorted(p.name for p in (folder / "environment" / "app").iterdir()) == sorted(
            f.name for f in task.public_files
        )


def test_answers_are_only_under_tests(exported):
    _, release, report = exported
    for task in _kept(exported):
        folder = report.dest / folder_name(task)
        private = [
            release.store.read_bytes(f"{release.answers_dir(task.id)}/{f.name}")
            for f in task.private_files
            if f.name in ANSWER_FILES or f.name.startswith("subtask-")
        ]
        assert private
        outside = [p for p in folder.rglob("*") if p.is_file() and "tests" not in p.relative_to(folder).parts]
        for path in outside:
            assert path.name not in ANSWER_FILES, path
            data = path.read_bytes()
            assert all(data != answer for answer in private), path
        truth = family_of(task).files.truth
        graded_against = release.store.read_bytes(f"{release.answers_dir(task.id)}/{truth}")
        assert (folder / "tests" / truth).read_bytes() == graded_against
        assert graded_against.decode().strip() not in (folder / "instruction.md").read_text()


def test_the_bundled_grader_scores_as_dareforge_on_gold_and_wrong_submissions(exported, tmp_path):
    ctx, _, report = exported
    controller = Controller(ctx.config.sandbox)
    # One task per family and metric: a second Class-IF seed goes through the same grader code as the first.
    graded_alike = {(task.family, task.metric.name): task for task in reversed(_kept(exported))}
    for task in graded_alike.values():
        family = family_of(task)
        folder = report.dest / folder_name(task)
        truth_path = folder / "tests" / family.files.truth
        truth = truth_path.read_bytes()
        for kind, submission in (("gold", truth), ("wrong", wrong_output(task, truth))):
            run = controller.run(
                folder,
                oracle=False,
                solve_timeout=60,
                test_timeout=120,
                place={family.files.output: submission},
            )
            mine = tmp_path / f"{task.id}-{kind}"
            mine.write_bytes(submission)
            ours = grade(task.metric, mine, truth_path)
            assert run.details["grader"] == "/tests/grader/dareforge", "graded by the bundle, not the host's"
            assert run.details["score"] == ours.score, (task.family, kind)
            assert run.reward == float(passed(task, ours.score)), (task.family, kind)
            assert run.reward == (1.0 if kind == "gold" else 0.0), (task.family, kind, ours)


def test_the_grader_standins_keep_the_fields_of_the_models_they_replace():
    namespace: dict = {}
    exec(SCHEMA_STANDIN.format(answer_metric="answer"), namespace)
    assert [f.name for f in dataclasses.fields(namespace["MetricSpec"])] == list(MetricSpec.model_fields)
    namespace = {}
    exec(RESULTS_STANDIN, namespace)
    assert [f.name for f in dataclasses.fields(namespace["GradeResult"])] == list(GradeResult.model_fields)


def test_the_bundled_grader_imports_scikit_learn_only_for_the_metric_that_needs_it(tmp_path):
    """Every control run's verifier imports the grader: scikit-learn would cost it about 2 CPU-s more, where
    only ROC AUC uses it."""
    for path, data in grader_files().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    check = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path / BUNDLE)!r})\n"
        "from dareforge.reference_solutions import graders, metrics\n"
        "assert graders.__file__.startswith(sys.path[0]), graders.__file__\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))\n"
        "print(metrics.roc_auc([0, 1, 1, 0], [0.1, 0.8, 0.6, 0.3]))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn')[:1])\n"
    )
    # A deadline far above an import and one AUC (a hung child fails the test instead of holding the suite).
    done = subprocess.run(python_argv("-c", check), capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    before, auc, after = done.stdout.splitlines()
    assert before == "[]" and float(auc) == 1.0 and after == "['sklearn']"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def iris(tmp_path_factory):
    """An iris release (Class-IF, Class-MM) exported twice, then its IF reference replaced by one that predicts
    one label."""
    ctx, release = _release(tmp_path_factory.mktemp("harbor-bad"), ["sklearn-iris"], questions=False)
    out = tmp_path_factory.mktemp("harbor-bad-out")
    reports = [export_format("harbor").export(ExportJob(ctx, release, dest=out / f"run{i}")) for i in (1, 2)]
    task = next(t for t in release.tasks() if t.family == "Class-IF")
    target = task.metric.target_columns[0]
    release.store.write_bytes(
        f"{release.answers_dir(task.id)}/reference.py",
        (
            "import pandas as pd\n"
            "test = pd.read_csv('test.csv')\n"
            f"pd.DataFrame({{'row_id': test['row_id'], {target!r}: 'no-such-label'}}).to_csv('predictions.csv', index=False)\n"
        ).encode(),
    )
    return ctx, release, task, reports


def test_a_corrupted_solution_in_the_sample_fails_the_export_as_a_packaging_bug(iris, tmp_path):
    ctx, release, task, _ = iris
    dest = tmp_path / "harbor"
    with pytest.raises(ExportError) as failed:
        export_format("harbor").export(ExportJob(ctx, release, dest=dest))
    message = str(failed.value)
    assert (
        "PACKAGING BUG" in message and f"Class-IF {task.id}: " in message and "earned reward 0.0" in message
    )
    assert not dest.exists(), "nothing is exported"
    # Without a sampled run it is caught all the same: its reference.py is no longer the bytes the gate
    # certified, so nothing certifies its oracle and it runs; and the result of the good bytes, stored by the
    # exports before, is another key.
    with pytest.raises(ExportError, match=f"(?s)PACKAGING BUG: 1 of 1 controlled tasks.*Class-IF {task.id}"):
        HarborLayout("harbor", controls_per_family=0).export(ExportJob(ctx, release, dest=dest))


def test_the_same_release_exports_to_the_same_bytes(iris):
    _, _, _, (first, second) = iris
    assert first.controlled.total() == len(first.tasks) == 2
    # The second export of the same release runs no control: both results are the first export's.
    assert second.controlled.total() == 0 and second.oracle_how == second.noop_how == {REUSED: 2}
    assert second.rewards == first.rewards
    assert _files(first.dest) == _files(second.dest)
    text = b"".join(_files(first.dest).values())
    assert str(first.dest).encode() not in text and b"/tmp/" not in text
