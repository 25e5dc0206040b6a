"""Every released task can be passed (issue 41): a goal task whose strong reference scores below its family's
bar carries its own bar where the solver ladder shows one that is reachable and discriminating, states it in
its instruction and is graded at it everywhere; a task with no such bar is rejected (`reachable`), naming the
strong score and the bar.

Two small tables made here, both regression with a strong reference below Reg-MM's bar 0.7: `curve` (the
target is the square of a symmetric feature plus noise: a linear model learns nothing, a boosted one about
half) and `line` (the target is a feature plus noise: the linear model is as good as the boosted one, so no
bar below the strong reference keeps the weakest model out: released at the default floor, the trivial answer,
rejected with `validate.task_bar_floor: weakest-model`).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dareforge.agents.grading import passed
from dareforge.config import Config, SourceOverride, ValidateConfig
from dareforge.context import RunContext
from dareforge.exports.reward import graded_reward, reward_spec
from dareforge.families.registry import bar_of, family_named, family_of
from dareforge.generators.instructions import pass_sentence
from dareforge.reference_solutions.graders import GradeResult
from dareforge.schema import Task, Trajectory, Validation, Verdict
from dareforge.trajectories.synthesize import is_valid, own_bars
from dareforge.validators.gate import gate, unreachable
from dareforge.validators.validate import validate
from tests.stores import generate_tasks, mirror_dataset, prediction_only

ROWS = 600
CURVE, LINE = "mirror.someone--curve", "mirror.someone--line"
IRIS = "builtin.sklearn-iris"


def _table(kind: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, ROWS)
    signal = x**2 if kind == "curve" else x
    y = signal + rng.normal(0, 2.4 if kind == "curve" else 1.6, ROWS)
    frame = pd.DataFrame({"x": x.round(4), "z": rng.normal(size=ROWS).round(4), "y": y.round(4)})
    return frame.to_csv(index=False).encode()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("bars")
    for kind, seed in (("curve", 1), ("line", 2)):
        mirror_dataset(root / "mirror", kind, {f"{kind}.csv": _table(kind, seed)})
    cfg = prediction_only(Config())
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    cfg.builtin.include = ["sklearn-iris"]
    cfg.mirror.paths = [str(root / "mirror")]
    cfg.generate.if_variants = 0
    cfg.sources = {CURVE: SourceOverride(target=["y"]), LINE: SourceOverride(target=["y"])}
    ctx = generate_tasks(RunContext.from_config(cfg, show_progress=False))
    validate(ctx)
    return ctx


def _goal_task(ctx: RunContext, source: str) -> Task:
    return next(
        t
        for t in ctx.store.read_records(Task)
        if t.source_id == source and t.variant_of is None and family_of(t).scored_against_baseline
    )


def _verdict(ctx: RunContext, task: Task) -> Verdict:
    return next(v for v in ctx.store.read_records(Verdict) if v.task_id == task.id)


def _rungs(ctx: RunContext, task: Task) -> dict[str, dict]:
    finding = next(
        v for v in ctx.store.read_records(Validation) if v.task_id == task.id and v.check == "discrimination"
    )
    return {r["name"]: r for r in json.loads(finding.details)["rungs"] if r["score"] is not None}


def test_a_task_below_its_family_bar_gets_a_reachable_bar_stated_and_graded(store):
    task = _goal_task(store, CURVE)
    family = family_of(task)
    assert task.scores.strong is not None and task.scores.strong < family.pass_bar, task.scores
    bar = task.pass_bar
    # Its own bar: below the family's, reached by the strong reference, clearly above the trivial answer and
    # the ladder's weakest model (a linear model learns nothing of a square).
    assert bar is not None and 0 < bar <= task.scores.strong < family.pass_bar
    rungs = _rungs(store, task)
    gap = ValidateConfig().min_task_bar_gap
    assert rungs["trivial"]["high"] + gap <= bar and rungs["linear"]["high"] + gap <= bar, rungs
    verdict = _verdict(store, task)
    assert verdict.accepted, verdict.reasons
    # Stated in the instruction, at the bar every grader uses.
    assert pass_sentence(bar) in task.instruction and pass_sentence(family.pass_bar) not in task.instruction
    assert bar_of(task) == bar
    assert passed(task, bar) and not passed(task, bar - 0.01)
    assert passed(task, task.scores.strong)
    spec = reward_spec(task)
    assert spec.pass_bar == bar
    assert graded_reward(spec, GradeResult(score=bar)).passed is True
    assert graded_reward(spec, GradeResult(score=bar - 0.01)).passed is False
    # SFT: a trajectory scoring the bar is valid at the task's bar, not at the family's.
    trajectory = Trajectory(
        id="t",
        task_id=task.id,
        family=task.family,
        endpoint="e",
        model="m",
        sample=0,
        temperature=0.0,
        protocol="tags",
        steps=[],
        outcome="graded",
        score=bar,
        passed=True,
    )
    bars = {family.name: family.pass_bar}
    assert is_valid(trajectory, bars, own_bars([task])) and not is_valid(trajectory, bars)


def test_a_bar_the_weakest_model_reaches_is_rejected_only_when_the_floor_is_that_model(store):
    """`line`: the linear model is as good as the boosted one. At the default floor (the trivial answer) the task
    is released at its own bar, as a task at its family's bar would be; with the weakest model as the floor it
    is rejected, naming the strong score, the bar and the linear rung."""
    task = _goal_task(store, LINE)
    assert task.pass_bar is not None and task.scores.strong < family_of(task).pass_bar
    assert not [r for r in _verdict(store, task).reasons if r.startswith("reachable:")]
    store.config.validate_.task_bar_floor = "weakest-model"
    try:
        gate(store)
        verdict = _verdict(store, task)
        assert not verdict.accepted
        (reason,) = [r for r in verdict.reasons if r.startswith("reachable:")]
        assert f"{task.scores.strong:.3f}" in reason and f"its own bar {task.pass_bar:g}" in reason, reason
        assert "linear" in reason, reason  # the weakest model reaches the bar
    finally:
        store.config.validate_.task_bar_floor = "trivial"
        gate(store)


def test_a_family_that_reaches_its_bar_keeps_it(store):
    task = _goal_task(store, IRIS)
    assert task.scores.strong >= family_of(task).pass_bar and task.pass_bar is None
    assert pass_sentence(family_of(task).pass_bar) in task.instruction
    assert _verdict(store, task).accepted


def test_no_accepted_goal_task_has_a_strong_reference_below_the_bar_it_states(store):
    accepted = {v.task_id for v in store.store.read_records(Verdict) if v.accepted}
    goal = [
        t for t in store.store.read_records(Task) if t.id in accepted and family_of(t).scored_against_baseline
    ]
    assert {t.source_id for t in goal} >= {CURVE, IRIS}
    below = [(t.id, t.scores.strong, bar_of(t)) for t in goal if t.scores.strong < bar_of(t)]
    assert below == []
    assert all(pass_sentence(bar_of(t)) in t.instruction for t in goal)


def test_turning_task_bars_off_rejects_every_task_below_its_family_bar(store):
    store.config.validate_.allow_task_bars = False
    try:
        gate(store)
        task = _goal_task(store, CURVE)
        reasons = [r for r in _verdict(store, task).reasons if r.startswith("reachable:")]
        assert reasons and "validate.allow_task_bars" in reasons[0], reasons
        assert _verdict(store, _goal_task(store, IRIS)).accepted
    finally:
        store.config.validate_.allow_task_bars = True
        gate(store)


def _task(family: str, strong: float, bar: float | None, baseline: float = 0.1) -> Task:
    return Task.model_validate(
        {
            "id": "t1",
            "family": family,
            "source_id": "s",
            "source_version": "v",
            "prepared_version": "p",
            "generator_version": "g",
            "seed": 0,
            "instruction": "i",
            "public_files": [],
            "private_files": [],
            "metric": {"name": "clipped-r2", "target_columns": ["y"], "key_columns": ["id"]},
            "scores": {"strong": strong, "baseline": baseline},
            "pass_bar": bar,
            "package_versions": [],
        }
    )


def _ladder(**rungs: tuple[float, float, float]) -> list[Validation]:
    details = {"rungs": [{"name": n, "score": s, "low": lo, "high": hi} for n, (s, lo, hi) in rungs.items()]}
    return [
        Validation(
            task_id="t1",
            source_id="s",
            check="discrimination",
            score=1.0,
            reason="r",
            details=json.dumps(details),
            checks_version="test",
        )
    ]


def test_the_bar_rule_rounds_the_strong_lower_bound_down_and_leaves_reachable_families_alone():
    reg = family_named("Reg-MM")
    assert reg.own_bar(0.65, 0.5849) == 0.58
    assert reg.own_bar(0.65, 0.62) == 0.62  # a bound on the step stays itself
    assert reg.own_bar(0.7, 0.5) is None  # the strong reference reaches the family's bar
    assert family_named("Class-IF").own_bar(0.1, 0.0) is None  # exact families pass at 1 only


def test_the_gate_decides_reachable_from_the_ladder_intervals():
    config = ValidateConfig()
    family = family_named("Reg-MM")
    clear = _ladder(trivial=(0.0, 0.0, 0.02), linear=(0.1, 0.05, 0.2), boosted=(0.6, 0.55, 0.66))
    assert unreachable(_task("Reg-MM", 0.6, 0.55), family, clear, config) is None
    # The weakest model's interval reaches past the bar (less the gap): rejected with that floor only.
    close = _ladder(trivial=(0.0, 0.0, 0.02), linear=(0.5, 0.45, 0.54), boosted=(0.6, 0.55, 0.66))
    assert unreachable(_task("Reg-MM", 0.6, 0.55), family, close, config) is None
    strict = ValidateConfig(task_bar_floor="weakest-model")
    reason = unreachable(_task("Reg-MM", 0.6, 0.55), family, close, strict)
    assert reason and "0.600" in reason and "0.55" in reason and "linear 0.500" in reason
    # The trivial answer's interval reaches past the bar (less the gap): rejected whatever the floor.
    guessed = _ladder(trivial=(0.5, 0.45, 0.54), linear=(0.52, 0.47, 0.56), boosted=(0.6, 0.55, 0.66))
    reason = unreachable(_task("Reg-MM", 0.6, 0.55), family, guessed, config)
    assert reason and "trivial 0.500" in reason and "linear" not in reason.split("(upper")[0]
    # A stated bar the strong reference does not reach is never released, own or the family's.
    assert "below the family's bar 0.7" in unreachable(_task("Reg-MM", 0.6, None), family, clear, config)
    # Without a ladder, the trivial answer's stored score with the gap.
    assert unreachable(_task("Reg-MM", 0.6, 0.55, baseline=0.54), family, [], config)
    assert unreachable(_task("Reg-MM", 0.6, 0.55, baseline=0.3), family, [], config) is None
