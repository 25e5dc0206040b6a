"""The builder of the time-series families, on a chronological split.

XF: the future rows carry every exogenous feature, only the target is hidden (joined on the id).
CF: the future rows carry only their timestamp and entity (joined on those keys).
"""

from __future__ import annotations

import pandas as pd

from dareforge.families.family import Build
from dareforge.families.tabular import copy_prepared, goal_task_fields
from dareforge.generators.instructions import notes, split_note
from dareforge.generators.taskio import Draft
from dareforge.reference_solutions.forecast import model_free_scale, naive_forecasts
from dareforge.reference_solutions.reference_code import StrongSpec
from dareforge.reference_solutions.spec import usable_features
from dareforge.schema import ColumnKind, MetricSpec, PreparedSource, Task

XF_NOTE = "`test.csv` holds the future rows with every feature except the target."
CF_NOTE = "`test.csv` holds only the future timestamps{entity} to forecast; nothing else about them is known."


def xf_tasks(build: Build) -> list[Task | None]:
    return [forecast_task(build, exogenous=True)]


def xf_variant(build: Build, original: Task) -> Task | None:
    return forecast_task(build, exogenous=True)


def cf_tasks(build: Build) -> list[Task | None]:
    return [forecast_task(build, exogenous=False)]


def cf_variant(build: Build, original: Task) -> Task | None:
    return forecast_task(build, exogenous=False)


def forecasts_from_time(prepared: PreparedSource) -> bool:
    """Whether the understand stage found the timestamps alone forecast the series (see its checks)."""
    return prepared.forecast_from_time is not False


def _cf_keys(prepared: PreparedSource, test: pd.DataFrame) -> list[str]:
    keys = [prepared.time_column, *([prepared.entity_column] if prepared.entity_column else [])]
    # Timestamps (and entities) identify a forecast row only when they are unique; otherwise keep the id too.
    return keys if not test.duplicated(subset=keys).any() else [prepared.id_column, *keys]


def model_free_forecasts(
    prepared: PreparedSource, train: pd.DataFrame, test: pd.DataFrame, keys: list[str]
) -> dict[str, pd.DataFrame]:
    """The model-free forecasts of the test rows by name, keyed like the answers (`keys` of `test`)."""
    by_name: dict[str, pd.DataFrame] = {}
    for target in prepared.target_columns:
        forecasts = naive_forecasts(train, test, prepared.time_column, target, prepared.entity_column)
        for name, predicted in forecasts.items():
            frame = by_name.setdefault(name, test[keys].copy())
            frame[target] = predicted
    return by_name


def _model_free(
    prepared: PreparedSource, train: pd.DataFrame, test: pd.DataFrame, answers: pd.DataFrame, keys: list[str]
) -> tuple[dict[str, pd.DataFrame], list[float]]:
    """The model-free forecasts of the test rows (keyed like the answers) and, per target, the best one's MAE:
    the scale of the task's `forecast-skill` (see `reference_solutions.forecast`)."""
    forecasts = model_free_forecasts(prepared, train, test, keys)
    truth = test[[prepared.id_column]].merge(answers, on=prepared.id_column, how="left")
    scale = [
        model_free_scale(
            pd.to_numeric(truth[target], errors="coerce").to_numpy(dtype=float),
            {name: frame[target].to_numpy(dtype=float) for name, frame in forecasts.items()},
        )
        for target in prepared.target_columns
    ]
    return forecasts, scale


def forecast_task(build: Build, exogenous: bool) -> Task | None:
    """The framing's forecast: with every exogenous feature of the future rows (XF), or with only their
    timestamps and entities (CF)."""
    prepared = build.prepared
    if not prepared.time_column:
        raise ValueError(
            f"{prepared.source_id}: a time-series source needs a time column (sources.<id>.time_column)"
        )
    train, test, answers = build.frames
    time_kind = next(c.kind for c in prepared.columns if c.name == prepared.time_column)
    entity = prepared.entity_column
    if exogenous:
        keys = [prepared.id_column]
        numeric, categorical, dates = usable_features(prepared)
        numeric = [c for c in numeric if c != prepared.time_column]
    else:
        keys = _cf_keys(prepared, test)
        numeric, categorical, dates = [], [entity] if entity else [], []
    if time_kind == ColumnKind.DATETIME:
        dates = sorted({*dates, prepared.time_column})
    elif prepared.time_column not in numeric:
        numeric = [*numeric, prepared.time_column]
    forecasts, scale = _model_free(prepared, train, test, answers, keys)
    metric = MetricSpec(
        name="forecast-skill", target_columns=prepared.target_columns, key_columns=keys, scale=scale
    )
    strong = StrongSpec(
        classification=False,
        id_column=prepared.id_column,
        targets=prepared.target_columns,
        numeric=numeric,
        categorical=categorical,
        dates=dates,
        output_keys=keys,
        time_column=prepared.time_column,
        entity=entity,
    )

    def fill(draft: Draft) -> None:
        copy_prepared(build, draft)
        if not exogenous:
            visible = list(dict.fromkeys([*keys, prepared.time_column, *([entity] if entity else [])]))
            test[visible].to_csv(draft.public / "test.csv", index=False)
        draft.fields = goal_task_fields(
            build,
            draft,
            metric,
            strong,
            train,
            task_words=f"time series, ordered by `{prepared.time_column}`",
            test_note=notes(
                (XF_NOTE if exogenous else CF_NOTE).format(entity=f" and `{entity}`" if entity else ""),
                split_note(prepared),
            ),
            group=entity,
            forecasts=forecasts,
        )

    family = build.family.name
    return build.writer.build(family, build.ctx.config.generate.seed, family, fill)
