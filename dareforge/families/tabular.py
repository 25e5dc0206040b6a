"""The builders of the tabular families: IF (a fully specified pipeline, exact reference predictions) and MM
(goal only), for classification and regression alike (the family's `kind` says which)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping

import pandas as pd

from dareforge.families.family import Build, constant_column, read_text
from dareforge.generators.instructions import boolean_note, notes, render_if, render_mm, split_note
from dareforge.generators.noise import add_noise
from dareforge.generators.prepare import prepared_file
from dareforge.generators.references import certify, score_references
from dareforge.generators.taskio import Draft, limits_of
from dareforge.reference_solutions.reference_code import REFERENCE_PREDICTIONS, StrongSpec, if_reference_code
from dareforge.reference_solutions.sensitivity import SENSITIVITY, Sensitivity, mutation_test
from dareforge.reference_solutions.spec import sample_if_spec, unstated_requirements, usable_features
from dareforge.schema import MetricSpec, PreparedSource, Task, TaskScores, TaskType


def cap_rows(frame: pd.DataFrame, max_rows: int, seed: int) -> pd.DataFrame:
    """Large training sets are sampled down (seeded, original order kept) so tasks stay quick to run."""
    return frame if len(frame) <= max_rows else frame.sample(n=max_rows, random_state=seed).sort_index()


def copy_prepared(build: Build, draft: Draft, answers_only: bool = False) -> None:
    def source(name: str):
        return prepared_file(build.ctx, build.prepared, name)

    if not answers_only:
        for name in ("train.csv", "test.csv"):
            shutil.copyfile(source(name), draft.public / name)
    shutil.copyfile(source("answers.csv"), draft.private / "answers.csv")


def goal_task_fields(
    build: Build,
    draft: Draft,
    metric: MetricSpec,
    strong: StrongSpec,
    train: pd.DataFrame,
    *,
    task_words: str,
    test_note: str,
    group: str | None = None,
    forecasts: Mapping[str, pd.DataFrame] | None = None,
) -> dict:
    """Record fields of a goal-only (MM or time-series) task: the prompt, metric, limits, reference scores
    (`forecasts`: the model-free forecasts a series task's strong reference must beat) and, where the strong
    reference scores below the family's bar, the task's own bar (`Family.own_bar`); the prompt states the bar
    the task is graded at."""
    ctx, runners = build.ctx, build.runners
    scores, strong_low = score_references(
        runners, strong, draft, metric, train, group=group, forecasts=forecasts
    )
    own = None if scores.strong is None else build.family.own_bar(scores.strong, strong_low)
    return {
        "instruction": render_mm(
            target=metric.target_columns,
            task_words=task_words,
            metric=metric,
            limits=limits_of(ctx),
            test_note=test_note,
            bar=build.family.pass_bar if own is None else own,
        ),
        "metric": metric,
        "limits": limits_of(ctx),
        "scores": scores,
        "pass_bar": own,
    }


def if_tasks(build: Build) -> list[Task | None]:
    """`generate.if_variants` IF tasks that measure something, one per seed from `generate.seed` on.

    A sampled workflow whose own generation already shows the gate will reject it for the sample, not for the
    data (see `measures`), is kept (the gate records why) and the next seed is drawn in its place, at most
    `generate.if_redraws` extra draws: the framing supports IF tasks, one workflow drawn for it asked nothing
    (a pipeline that predicts one constant, or one where hardly any stated step changes the predictions)."""
    cfg = build.ctx.config.generate
    tasks: list[Task | None] = []
    measuring = 0
    for i in range(cfg.if_variants + cfg.if_redraws if cfg.if_variants else 0):
        if measuring >= cfg.if_variants:
            break
        task = if_task(build, cfg.seed + i)
        tasks.append(task)
        measuring += task is not None and measures(build, task)
    return tasks


def measures(build: Build, task: Task) -> bool:
    """Whether an IF task passed the checks its generation settles: its reference run is certified, its
    mutation test finds at least `validate.min_sensitive_requirements` stated requirements that change the
    predictions and none left unstated that does, and its reference predictions are not one constant. The
    `sensitivity` and `trivial` checks judge the same files again; this only decides whether to draw again."""
    if task.status != "candidate":
        return False
    store, folder = build.ctx.store, f"tasks/{task.id}/private"
    found = Sensitivity.from_json(store.read_bytes(f"{folder}/{SENSITIVITY}").decode())
    if found.silent or len(found.mattering) < build.ctx.config.validate_.min_sensitive_requirements:
        return False
    with store.open(f"{folder}/{REFERENCE_PREDICTIONS}") as handle:
        reference = read_text(handle)
    return constant_column(reference, task.metric.target_columns) is None


def if_variant(build: Build, original: Task) -> Task | None:
    """The original's IF task again, on the obscured framing: the same seed samples the mapped workflow."""
    return if_task(build, original.seed)


def if_task(build: Build, seed: int) -> Task | None:
    ctx, prepared = build.ctx, build.prepared
    cfg = ctx.config.generate
    classification = build.family.kind == TaskType.CLASSIFICATION
    train = cap_rows(build.frames[0], cfg.max_train_rows, seed)
    spec = sample_if_spec(prepared, train, seed)
    # Noise rows fill no missing value in (nor remove one from) the columns an imputer acts on.
    spec = spec.model_copy(update={"unstated": unstated_requirements(spec, [train, build.frames[1]])})
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
        copy_prepared(build, draft, answers_only=True)
        code = if_reference_code(spec)
        (draft.private / "reference.py").write_text(code)
        seconds, problem = certify(build.runners, code, draft, metric)
        stated = spec
        if problem is None:
            # Mutation-test the instruction and state what changes the predictions (the `sensitivity` check);
            # the code stays the sampled spec's: what is left out changes nothing.
            stated, found = mutation_test(
                build.runners.main,
                spec,
                draft.public,
                draft.private / REFERENCE_PREDICTIONS,
                metric,
                draft.folder / "run-sensitivity",
            )
            (draft.private / SENSITIVITY).write_text(found.to_json())
            seconds_in = build.writer.report.seconds_in
            seconds_in["sensitivity"] = seconds_in.get("sensitivity", 0.0) + found.cpu_seconds
        (draft.private / "spec.json").write_text(stated.model_dump_json(indent=2) + "\n")
        draft.fields = {
            "instruction": render_if(
                stated,
                limits_of(ctx),
                notes(split_note(prepared), boolean_note(build.frames[2], [spec.target])),
            ),
            "metric": metric,
            "limits": limits_of(ctx),
            "scores": TaskScores(reference_seconds=seconds),
            "spec": stated.model_dump_json(),
            "status": "rejected" if problem else "candidate",
            "reject_reason": problem,
        }

    return build.writer.build(build.family.name, seed, spec.model_dump_json(), fill)


def mm_tasks(build: Build) -> list[Task | None]:
    return [mm_task(build)]


def mm_variant(build: Build, original: Task) -> Task | None:
    return mm_task(build)


def tabular_strong_spec(prepared: PreparedSource, classification: bool) -> StrongSpec:
    """The strong reference of a goal task on a framing's rows: every usable feature, keyed by the id."""
    numeric, categorical, dates = usable_features(prepared)
    return StrongSpec(
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


def mm_task(build: Build) -> Task | None:
    ctx, prepared = build.ctx, build.prepared
    classification = build.family.kind == TaskType.CLASSIFICATION
    metric = MetricSpec(
        name="macro-f1" if classification else "clipped-r2",
        target_columns=prepared.target_columns,
        key_columns=[prepared.id_column],
    )
    strong = tabular_strong_spec(prepared, classification)

    def fill(draft: Draft) -> None:
        copy_prepared(build, draft)
        draft.fields = goal_task_fields(
            build,
            draft,
            metric,
            strong,
            build.frames[0],
            task_words=prepared.task_type.value,
            test_note=notes(
                "`test.csv` holds the rows to predict, without the target.",
                split_note(prepared),
                boolean_note(build.frames[2], prepared.target_columns),
            ),
        )

    return build.writer.build(build.family.name, ctx.config.generate.seed, "mm", fill)
