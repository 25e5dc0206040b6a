"""Tabular task families: IF (a fully specified pipeline, exact reference predictions) and MM (goal only)."""

from __future__ import annotations

import shutil

import pandas as pd

from dareforge.context import RunContext
from dareforge.generators.instructions import render_if, render_mm
from dareforge.generators.noise import add_noise
from dareforge.generators.prepare import prepared_file
from dareforge.generators.references import certify, score_references
from dareforge.generators.taskio import Draft, Runners, TaskWriter
from dareforge.reference_solutions.reference_code import StrongSpec, if_reference_code
from dareforge.reference_solutions.spec import sample_if_spec, usable_features
from dareforge.schema import MetricSpec, PreparedSource, Task, TaskLimits, TaskScores, TaskType

Frames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]


def limits_of(ctx: RunContext) -> TaskLimits:
    return TaskLimits(
        turns=ctx.config.generate.limits_turns, seconds_per_execution=ctx.config.generate.limits_seconds
    )


def cap_rows(frame: pd.DataFrame, max_rows: int, seed: int) -> pd.DataFrame:
    """Large training sets are sampled down (seeded, original order kept) so tasks stay quick to run."""
    return frame if len(frame) <= max_rows else frame.sample(n=max_rows, random_state=seed).sort_index()


def copy_prepared(
    ctx: RunContext, prepared: PreparedSource, draft: Draft, answers_only: bool = False
) -> None:
    if not answers_only:
        for name in ("train.csv", "test.csv"):
            shutil.copyfile(prepared_file(ctx, prepared, name), draft.public / name)
    shutil.copyfile(prepared_file(ctx, prepared, "answers.csv"), draft.private / "answers.csv")


def goal_task_fields(
    ctx: RunContext,
    runners: Runners,
    draft: Draft,
    metric: MetricSpec,
    strong: StrongSpec,
    train: pd.DataFrame,
    *,
    task_words: str,
    test_note: str,
    group: str | None = None,
    forecasts: list[pd.DataFrame] = (),
) -> dict:
    """Record fields of a goal-only (MM or time-series) task: the prompt, metric, limits and reference scores
    (`forecasts`: the model-free forecasts a series task's strong reference must beat)."""
    return {
        "instruction": render_mm(
            target=metric.target_columns,
            task_words=task_words,
            metric=metric,
            limits=limits_of(ctx),
            test_note=test_note,
        ),
        "metric": metric,
        "limits": limits_of(ctx),
        "scores": score_references(runners, strong, draft, metric, train, group=group, forecasts=forecasts),
    }


def if_task(
    ctx: RunContext, prepared: PreparedSource, frames: Frames, writer: TaskWriter, runners: Runners, seed: int
) -> Task | None:
    cfg = ctx.config.generate
    classification = prepared.task_type == TaskType.CLASSIFICATION
    family = "Class-IF" if classification else "Reg-IF"
    train = cap_rows(frames[0], cfg.max_train_rows, seed)
    spec = sample_if_spec(prepared, train, seed)
    metric = MetricSpec(
        name="exact-match" if classification else "allclose",
        target_columns=[spec.target],
        key_columns=[spec.id_column],
        tolerance=None if classification else cfg.regression_tolerance,
    )

    def fill(draft: Draft) -> None:
        noisy, _ = add_noise(train, spec, cfg.noise_share, seed)
        noisy.to_csv(draft.public / "train.csv", index=False)
        shutil.copyfile(prepared_file(ctx, prepared, "test.csv"), draft.public / "test.csv")
        copy_prepared(ctx, prepared, draft, answers_only=True)
        code = if_reference_code(spec)
        (draft.private / "reference.py").write_text(code)
        (draft.private / "spec.json").write_text(spec.model_dump_json(indent=2) + "\n")
        seconds, problem = certify(runners, code, draft, metric)
        draft.fields = {
            "instruction": render_if(spec, limits_of(ctx)),
            "metric": metric,
            "limits": limits_of(ctx),
            "scores": TaskScores(reference_seconds=seconds),
            "spec": spec.model_dump_json(),
            "status": "rejected" if problem else "candidate",
            "reject_reason": problem,
        }

    return writer.build(family, seed, spec.model_dump_json(), fill)


def mm_task(
    ctx: RunContext, prepared: PreparedSource, frames: Frames, writer: TaskWriter, runners: Runners
) -> Task | None:
    classification = prepared.task_type == TaskType.CLASSIFICATION
    numeric, categorical, dates = usable_features(prepared)
    metric = MetricSpec(
        name="macro-f1" if classification else "clipped-r2",
        target_columns=prepared.target_columns,
        key_columns=[prepared.id_column],
    )
    strong = StrongSpec(
        classification=classification,
        id_column=prepared.id_column,
        targets=prepared.target_columns,
        numeric=numeric,
        categorical=categorical,
        dates=dates,
        output_keys=[prepared.id_column],
        # Rows split in time: the strong reference may also carry a number's trend past the training rows.
        time_column=prepared.time_column
        if prepared.split == "chronological" and not classification
        else None,
    )

    def fill(draft: Draft) -> None:
        copy_prepared(ctx, prepared, draft)
        draft.fields = goal_task_fields(
            ctx,
            runners,
            draft,
            metric,
            strong,
            frames[0],
            task_words=prepared.task_type.value,
            test_note="`test.csv` holds the rows to predict, without the target.",
        )

    family = "Class-MM" if classification else "Reg-MM"
    return writer.build(family, ctx.config.generate.seed, "mm", fill)
