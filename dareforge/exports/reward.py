"""The RL reward of an attempt at a task, as DARE-bench rewarded it: format, then correctness.

- 0.1 (`format_reward`) when the predictions file is well-formed: the grader accepts it (the key and target
  columns, one row per test row, values the metric can read);
- plus, for an IF task, 1.0 (`score_reward`) when it matches the reference run's predictions exactly (score 1.0:
  following the stated workflow is the task, so a near miss earns nothing more);
- plus, for an MM or TS task, `score_reward` times the metric score (macro-F1, clipped R², forecast skill) clipped to [0, 1];
- plus, for a QA or Lake task (its `answer.json` is the file), `score_reward` times the answer's grade in
  [0, 1] (KramaBench's: exact types 0 or 1, approximate numbers 1 / (1 + relative error), lists F1).

The result also says whether the attempt `passed`: its score reached the spec's `pass_bar`, the task's bar as
its instruction states it (`families.registry.bar_of`: 1 for IF, the task's own bar where it carries one, else
the family's), the binary signal beside the graded reward.

A missing or malformed file earns 0.0, with the grader's error as `detail`. Only higher-is-better metrics
bounded by 1 make a reward on this scale, so a task graded by e.g. RMSE raises `RewardError`.

The rule is a `RewardSpec`, stored with each task of an RL export (its `reward_spec` column, as JSON), so a
trainer that holds the export and the release's private answers scores attempts with `reward(spec, ...)`
without the store. The predictions file is read like the agent loop reads a workspace's: a symlink (to the
answers, say), a FIFO or an oversized file is refused, not followed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dareforge.agents.grading import answers_file, output_file
from dareforge.errors import DareforgeError
from dareforge.families.registry import bar_of, family_of
from dareforge.reference_solutions.graders import GradeResult, grade
from dareforge.reference_solutions.metrics import get_metric
from dareforge.reference_solutions.reference_code import PREDICTIONS
from dareforge.reference_solutions.submission_files import MAX_PREDICTIONS_BYTES, copy_regular_file
from dareforge.schema import MetricSpec, Task, Trajectory
from dareforge.scratch import temp_root

FORMAT_REWARD = 0.1
SCORE_REWARD = 1.0


class RewardError(DareforgeError):
    pass


class RewardSpec(BaseModel):
    """How attempts at one task are rewarded; JSON of it is an RL export row's `reward_spec`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: str
    mode: Literal["exact-match", "metric"]
    metric: MetricSpec
    format_reward: float = FORMAT_REWARD
    score_reward: float = SCORE_REWARD
    predictions_file: str = PREDICTIONS
    graded_against: str
    """The task's private file in the release's `answers/<ab>/<task_id>/` that predictions are graded against."""
    pass_bar: float | None = None
    """The score that passes the task (`bar_of`); None in a spec written before it was recorded."""

    @property
    def max_reward(self) -> float:
        return self.format_reward + self.score_reward


class RewardResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float
    well_formed: bool
    score: float | None = None
    detail: str | None = None
    passed: bool | None = None
    """Whether the score reached the spec's pass bar (None: the spec records none)."""


def reward_spec(task: Task) -> RewardSpec:
    if family_of(task).asks_question:
        return RewardSpec(
            family=task.family,
            mode="metric",
            metric=task.metric,
            predictions_file=output_file(task),
            graded_against=answers_file(task),
            pass_bar=bar_of(task),
        )
    metric = get_metric(task.metric.name)
    if not metric.higher_is_better:
        raise RewardError(
            f"task {task.id} is graded by {task.metric.name}, where lower is better; the reward needs a score in "
            "[0, 1] (macro-f1, clipped-r2, forecast-skill, exact-match, allclose), so leave this task out of the RL export"
        )
    return RewardSpec(
        family=task.family,
        mode="exact-match" if family_of(task).exact else "metric",
        metric=task.metric,
        graded_against=answers_file(task),
        pass_bar=bar_of(task),
    )


def _spec(task: Task | RewardSpec) -> RewardSpec:
    return task if isinstance(task, RewardSpec) else reward_spec(task)


def graded_reward(spec: RewardSpec, result: GradeResult) -> RewardResult:
    """The reward of a grader's result."""
    if not result.ok:
        return RewardResult(
            value=0.0, well_formed=False, detail=result.error, passed=None if spec.pass_bar is None else False
        )
    if spec.mode == "exact-match":
        exact = result.score >= 1.0
        bonus = spec.score_reward if exact else 0.0
        detail = "exact match" if exact else f"{result.score:.4f} of predictions match the reference run"
    else:
        bonus = spec.score_reward * min(max(result.score, 0.0), 1.0)
        name = spec.metric.answer_type or spec.metric.name
        detail = f"{name} {result.score:.4f}"
    passed = None if spec.pass_bar is None else result.score >= spec.pass_bar
    return RewardResult(
        value=spec.format_reward + bonus, well_formed=True, score=result.score, detail=detail, passed=passed
    )


def reward(task: Task | RewardSpec, predictions: Path | str, answers: Path | str) -> RewardResult:
    """Reward a predictions file against the task's private `answers` (`RewardSpec.graded_against`)."""
    spec = _spec(task)
    path = Path(predictions)
    with tempfile.TemporaryDirectory(prefix="dareforge-reward-", dir=temp_root()) as tmp:
        copy = Path(tmp) / spec.predictions_file
        try:
            copy_regular_file(path, copy, MAX_PREDICTIONS_BYTES)
        except FileNotFoundError:
            return graded_reward(
                spec, GradeResult(score=0.0, error=f"{path} does not exist; write the predictions")
            )
        except OSError as exc:
            return graded_reward(spec, GradeResult(score=0.0, error=f"{path} could not be read: {exc}"))
        return graded_reward(spec, grade(spec.metric, copy, answers))


def workspace_reward(task: Task | RewardSpec, workspace: Path | str, answers: Path | str) -> RewardResult:
    """Reward what an episode left in its working directory (its `predictions.csv` or `answer.json`)."""
    spec = _spec(task)
    return reward(spec, Path(workspace) / spec.predictions_file, answers)


def trajectory_reward(task: Task | RewardSpec, trajectory: Trajectory) -> RewardResult:
    """The reward of a stored, graded trajectory, from the grade the agent loop recorded: a score means the
    predictions were well-formed; no score (format, code or LLM error, turn limit) means they were not."""
    spec = _spec(task)
    if trajectory.score is None:
        if trajectory.outcome == "graded":
            raise RewardError(
                f"trajectory {trajectory.id} was not scored (played without answers); grade its predictions "
                "with reward() instead"
            )
        return RewardResult(
            value=0.0,
            well_formed=False,
            detail=trajectory.detail or trajectory.outcome,
            passed=None if spec.pass_bar is None else False,
        )
    return graded_reward(spec, GradeResult(score=trajectory.score))
