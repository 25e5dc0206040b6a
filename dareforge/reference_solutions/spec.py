"""The IF workflow grammar: a fully specified, seeded scikit-learn pipeline, sampled per task.

One sampled `IFSpec` is rendered twice: as an exact natural-language instruction (instructions.py) and as the
reference code (reference_solutions/reference_code.py). Everything that changes the predictions is in the spec,
so an agent that follows the instruction reproduces the reference predictions exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from dareforge.schema import ColumnKind, PreparedSource, TaskType

MAX_FEATURES = 8
MAX_CATEGORIES = 30
DATE_PARTS = ("year", "month", "day", "dayofweek")


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RangeFilter(Spec):
    kind: Literal["range"] = "range"
    column: str
    low: float
    high: float


class CategoryFilter(Spec):
    kind: Literal["category"] = "category"
    column: str
    allowed: list[str]


class DateParts(Spec):
    column: str
    parts: list[str]

    @property
    def derived(self) -> list[str]:
        return [f"{self.column}_{part}" for part in self.parts]


class ModelSpec(Spec):
    name: str = Field(description="A scikit-learn estimator class name.")
    module: str
    params: dict[str, Any]


class IFSpec(Spec):
    task_type: TaskType
    id_column: str
    target: str
    filters: list[RangeFilter | CategoryFilter]
    numeric: list[str]
    categorical: list[str]
    date_parts: DateParts | None = None
    numeric_imputer: Literal["mean", "median"]
    categorical_imputer: Literal["most_frequent", "constant"]
    scaler: Literal["standard", "minmax", "none"]
    encoder: Literal["onehot", "ordinal"]
    model: ModelSpec
    seed: int
    unstated: list[str] = Field(
        default_factory=list,
        description="Requirements the instruction leaves out (their `Mutant.requirement` names): any choice an agent makes "
        "for them gives the same predictions (`unstated_requirements`, `sensitivity.settle`).",
    )

    @property
    def numeric_features(self) -> list[str]:
        """Numeric inputs as the model sees them: the chosen columns, then the derived date parts."""
        return self.numeric + (self.date_parts.derived if self.date_parts else [])


CLASSIFIERS: dict[str, tuple[str, dict[str, list[Any]]]] = {
    "LogisticRegression": ("sklearn.linear_model", {"C": [0.1, 1.0, 10.0], "max_iter": [2000]}),
    "DecisionTreeClassifier": ("sklearn.tree", {"max_depth": [3, 5, 8], "min_samples_leaf": [1, 5]}),
    "RandomForestClassifier": (
        "sklearn.ensemble",
        {"n_estimators": [25, 50], "max_depth": [4, 8]},
    ),
    "GradientBoostingClassifier": ("sklearn.ensemble", {"n_estimators": [30, 60], "max_depth": [2, 3]}),
    "KNeighborsClassifier": ("sklearn.neighbors", {"n_neighbors": [3, 5, 9]}),
}
REGRESSORS: dict[str, tuple[str, dict[str, list[Any]]]] = {
    "Ridge": ("sklearn.linear_model", {"alpha": [0.1, 1.0, 10.0]}),
    "DecisionTreeRegressor": ("sklearn.tree", {"max_depth": [3, 5, 8], "min_samples_leaf": [1, 5]}),
    "RandomForestRegressor": (
        "sklearn.ensemble",
        {"n_estimators": [25, 50], "max_depth": [4, 8]},
    ),
    "GradientBoostingRegressor": ("sklearn.ensemble", {"n_estimators": [30, 60], "max_depth": [2, 3]}),
    "KNeighborsRegressor": ("sklearn.neighbors", {"n_neighbors": [3, 5, 9]}),
}
# A forest's n_jobs is not in the grids: it changes how a forest is fitted, never its predictions, so stating it
# would be a requirement an agent can ignore at no cost (the sensitivity run found none that mattered).
SEEDED = ("DecisionTree", "RandomForest", "GradientBoosting")
"""Models whose fit draws random numbers. LogisticRegression is not one: its default solver (lbfgs) never reads
`random_state`, so a stated seed would change nothing."""
SCALE_INVARIANT = ("DecisionTree", "RandomForest", "GradientBoosting")
"""Models whose splits depend only on the order of a feature's values: a scaler cannot change their predictions,
so their specs scale nothing and the instruction says nothing of scaling (the sensitivity run checks it)."""

# The names of an IF spec's requirements, as the instruction states them and the sensitivity run measures them.
FILTER = "filter"
NUMERIC = "numeric features"
CATEGORICAL = "categorical features"
DATES = "date parts"
NUMERIC_IMPUTER = "numeric imputer"
CATEGORICAL_IMPUTER = "categorical imputer"
SCALER = "scaler"
ENCODER = "encoder"
MODEL = "model"
PARAM = "parameter"


def filter_requirement(index: int) -> str:
    """The requirement name of the spec's filter at `index` (by position: an obscured variant renames columns)."""
    return f"{FILTER} {index + 1}"


def param_requirement(key: str) -> str:
    return f"{PARAM} {key}"


SEED = param_requirement("random_state")


def is_seeded(name: str) -> bool:
    return name.startswith(SEEDED)


def is_scale_invariant(name: str) -> bool:
    return name.startswith(SCALE_INVARIANT)


def usable_features(prepared: PreparedSource) -> tuple[list[str], list[str], list[str]]:
    """(numeric, categorical, datetime) columns an IF pipeline may use."""
    skip = {prepared.id_column, *prepared.target_columns, prepared.group_column, *prepared.excluded_columns}
    numeric, categorical, dates = [], [], []
    for col in prepared.columns:
        if col.name in skip or col.missing_rate >= 0.5:
            continue
        if col.kind == ColumnKind.NUMERIC and col.distinct > 1:
            numeric.append(col.name)
        elif col.kind == ColumnKind.CATEGORICAL and 1 < col.distinct <= MAX_CATEGORIES:
            categorical.append(col.name)
        elif col.kind == ColumnKind.DATETIME:
            dates.append(col.name)
    return numeric, categorical, dates


def sample_if_spec(prepared: PreparedSource, train: pd.DataFrame, seed: int) -> IFSpec:
    """Sample one workflow; filter bounds are the observed ranges of `train` (the clean rows)."""
    rng = random.Random(seed)
    numeric, categorical, dates = usable_features(prepared)
    # A numeric column holding an infinity (R's Inf: "never happened") is no IF feature: scikit-learn's imputers
    # and scalers refuse it, and a range filter cannot put a noise row beyond an infinite bound.
    numeric = [c for c in numeric if np.isfinite(pd.to_numeric(train[c], errors="coerce").dropna()).all()]
    pool = numeric + categorical
    if not pool:
        raise ValueError(
            f"{prepared.source_id}: no numeric or categorical feature to build an IF pipeline from"
        )
    chosen = rng.sample(pool, rng.randint(min(2, len(pool)), min(MAX_FEATURES, len(pool))))
    chosen_numeric = [c for c in chosen if c in numeric]
    chosen_categorical = [c for c in chosen if c in categorical]
    date_parts = None
    if dates and rng.random() < 0.5:
        parts = sorted(rng.sample(DATE_PARTS, rng.randint(1, 3)), key=DATE_PARTS.index)
        date_parts = DateParts(column=dates[0], parts=parts)
    filter_columns = rng.sample(chosen, rng.randint(1, min(3, len(chosen))))
    filters = [_filter_for(train, column, column in numeric) for column in filter_columns]
    models = CLASSIFIERS if prepared.task_type == TaskType.CLASSIFICATION else REGRESSORS
    name = rng.choice(sorted(models))
    module, grid = models[name]
    params = {key: rng.choice(values) for key, values in sorted(grid.items())}
    if is_seeded(name):
        params["random_state"] = rng.randrange(1000)
    scaler = rng.choice(["standard", "minmax", "none"])
    return IFSpec(
        task_type=prepared.task_type,
        id_column=prepared.id_column,
        target=prepared.target_columns[0],
        filters=filters,
        numeric=chosen_numeric,
        categorical=chosen_categorical,
        date_parts=date_parts,
        numeric_imputer=rng.choice(["mean", "median"]),
        categorical_imputer=rng.choice(["most_frequent", "constant"]),
        scaler="none" if is_scale_invariant(name) else scaler,
        encoder=rng.choice(["onehot", "ordinal"]),
        model=ModelSpec(name=name, module=module, params=params),
        seed=seed,
    )


def _filter_for(train: pd.DataFrame, column: str, is_numeric: bool) -> RangeFilter | CategoryFilter:
    values = train[column].dropna()
    if is_numeric:
        return RangeFilter(column=column, low=float(values.min()), high=float(values.max()))
    return CategoryFilter(column=column, allowed=sorted(values.astype(str).unique().tolist()))


def unstated_requirements(spec: IFSpec, frames: list[pd.DataFrame]) -> list[str]:
    """The preprocessing requirements of `spec` that no choice of an agent can change the predictions of, so the
    instruction leaves them out: an imputer whose columns hold no missing value in any of `frames` (the
    training and test files as pandas reads them; a missing date leaves its parts missing), the numeric or
    categorical steps when there are no such features, and the scaler of a scale-invariant model."""

    def complete(columns: list[str]) -> bool:
        return not any(frame[columns].isna().any().any() for frame in frames)

    dates = [spec.date_parts.column] if spec.date_parts else []
    unstated = []
    if not spec.numeric_features or complete(spec.numeric + dates):
        unstated.append(NUMERIC_IMPUTER)
    if not spec.numeric_features or is_scale_invariant(spec.model.name):
        unstated.append(SCALER)
    if not spec.categorical or complete(spec.categorical):
        unstated.append(CATEGORICAL_IMPUTER)
    if not spec.categorical:
        unstated.append(ENCODER)
    return unstated


@dataclass(frozen=True)
class Mutant:
    """`spec` with one requirement broken by a neighbouring legal value: what an agent that ignored it could
    have built. `requirement` names it (`FILTER` with the filter's column, `PARAM` with the parameter's name, or one of the
    other requirement names); `stated` says whether the instruction states it."""

    requirement: str
    stated: bool
    spec: IFSpec


def may_be_left_out(requirement: str) -> bool:
    """Whether an instruction may leave `requirement` out once its mutant changed nothing, subject to the run of
    `as_followed`: a filter (left out, an agent applies none), a parameter (left out, the agent takes the
    estimator's default, which `as_followed` runs; the seed, the agent's own), an imputer (left out, the
    agent takes SimpleImputer's default, the mean, or for categories one of the two strategies: the reference
    and the mutant ran both). The feature lists, date parts, encoder and model an agent cannot guess."""
    return requirement.startswith((f"{FILTER} ", f"{PARAM} ")) or requirement in (
        NUMERIC_IMPUTER,
        CATEGORICAL_IMPUTER,
    )


def as_followed(spec: IFSpec) -> IFSpec:
    """The workflow an agent builds from `spec`'s instruction when every unstated requirement is done otherwise
    than the reference does it: unstated filters not applied, unstated parameters at the estimator's default
    (the seed another one than its mutant's), an unstated scaler standard, unstated imputers the other
    strategy. Its predictions
    must be the reference's for the instruction to be complete."""
    unstated = set(spec.unstated)
    filters = [f for i, f in enumerate(spec.filters) if filter_requirement(i) not in unstated]
    params = {}
    for key, value in spec.model.params.items():
        if param_requirement(key) not in unstated:
            params[key] = value
        elif key == "random_state":
            params[key] = (value + 2) % 1000  # not the seed+1 its own mutant tried
    return spec.model_copy(
        update={
            "filters": filters,
            "model": spec.model.model_copy(update={"params": params}),
            "scaler": "standard" if SCALER in unstated else spec.scaler,
            "numeric_imputer": _flip_numeric(spec) if NUMERIC_IMPUTER in unstated else spec.numeric_imputer,
            "categorical_imputer": _flip_categorical(spec)
            if CATEGORICAL_IMPUTER in unstated
            else spec.categorical_imputer,
        }
    )


def _flip_numeric(spec: IFSpec) -> str:
    return "median" if spec.numeric_imputer == "mean" else "mean"


def _flip_categorical(spec: IFSpec) -> str:
    return "constant" if spec.categorical_imputer == "most_frequent" else "most_frequent"


_NEXT_SCALER = {"standard": "minmax", "minmax": "standard", "none": "standard"}


def mutants(spec: IFSpec) -> list[Mutant]:
    """One mutant per requirement of `spec` whose neighbour is a legal spec: each filter dropped, the last
    feature of each list dropped (while a feature is left), the last date part dropped, mean <-> median,
    most frequent <-> constant, the scaler swapped (standard <-> minmax, none -> standard), one-hot <-> ordinal,
    the cheapest other model class of the same kind (its first grid values, the same seed), each parameter at its
    neighbouring grid value (the estimator's default for a one-value grid), the seed plus one. Requirements
    with nothing to act on (an imputer or encoder without such features) have no mutant; an unstated
    scaler has one, which must not matter."""

    def mutant(requirement: str, **update: Any) -> Mutant:
        return Mutant(requirement, requirement not in spec.unstated, spec.model_copy(update=update))

    out = [
        mutant(filter_requirement(i), filters=spec.filters[:i] + spec.filters[i + 1 :])
        for i in range(len(spec.filters))
    ]
    features = len(spec.numeric_features) + len(spec.categorical)
    if spec.numeric and features > 1:
        out.append(mutant(NUMERIC, numeric=spec.numeric[:-1]))
    if spec.categorical and features > 1:
        out.append(mutant(CATEGORICAL, categorical=spec.categorical[:-1]))
    if spec.date_parts and features > 1:
        parts = spec.date_parts.parts[:-1]
        out.append(
            mutant(DATES, date_parts=spec.date_parts.model_copy(update={"parts": parts}) if parts else None)
        )
    if spec.numeric_features:
        out.append(mutant(NUMERIC_IMPUTER, numeric_imputer=_flip_numeric(spec)))
        out.append(mutant(SCALER, scaler=_NEXT_SCALER[spec.scaler]))
    if spec.categorical:
        out.append(mutant(CATEGORICAL_IMPUTER, categorical_imputer=_flip_categorical(spec)))
        out.append(mutant(ENCODER, encoder="ordinal" if spec.encoder == "onehot" else "onehot"))
    out.append(mutant(MODEL, model=_next_model(spec)))
    for key, value in spec.model.params.items():
        params = dict(spec.model.params)
        if key == "random_state":
            params[key] = (value + 1) % 1000
        else:
            grid = _grid(spec)[1].get(key, [value])
            if len(grid) > 1:
                index = grid.index(value) if value in grid else 0
                params[key] = grid[index + 1] if index + 1 < len(grid) else grid[index - 1]
            else:
                del params[key]
        out.append(mutant(param_requirement(key), model=spec.model.model_copy(update={"params": params})))
    # An unstated imputer acts on no missing value (its mutant could not differ); an unstated scaler is a claim
    # about the model that its mutant tests.
    return [m for m in out if m.stated or m.requirement == SCALER]


def _models(spec: IFSpec) -> dict[str, tuple[str, dict[str, list[Any]]]]:
    return CLASSIFIERS if spec.task_type == TaskType.CLASSIFICATION else REGRESSORS


def _grid(spec: IFSpec) -> tuple[str, dict[str, list[Any]]]:
    return _models(spec).get(spec.model.name, (spec.model.module, {}))


CHEAP_MODELS = ("DecisionTree", "LogisticRegression", "Ridge")
"""The model classes a model mutant takes, first that differs first: any other class tests the model
requirement, and these fit in a fraction of a forest's or boosting's time."""


def _next_model(spec: IFSpec) -> ModelSpec:
    """The cheapest other model class of the same kind (`CHEAP_MODELS`), at its first grid values and the spec's
    seed when both are seeded."""
    models = _models(spec)
    name = next(n for n in sorted(models) if n.startswith(CHEAP_MODELS) and n != spec.model.name)
    module, grid = models[name]
    params = {key: values[0] for key, values in sorted(grid.items())}
    if is_seeded(name):
        params["random_state"] = spec.model.params.get("random_state", 0)
    return ModelSpec(name=name, module=module, params=params)
