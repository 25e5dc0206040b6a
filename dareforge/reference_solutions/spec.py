"""The IF workflow grammar: a fully specified, seeded scikit-learn pipeline, sampled per task.

One sampled `IFSpec` is rendered twice: as an exact natural-language instruction (instructions.py) and as the
reference code (reference_solutions/reference_code.py). Everything that changes the predictions is in the spec,
so an agent that follows the instruction reproduces the reference predictions exactly.
"""

from __future__ import annotations

import random
from typing import Any, Literal

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

    @property
    def numeric_features(self) -> list[str]:
        """Numeric inputs as the model sees them: the chosen columns, then the derived date parts."""
        return self.numeric + (self.date_parts.derived if self.date_parts else [])


CLASSIFIERS: dict[str, tuple[str, dict[str, list[Any]]]] = {
    "LogisticRegression": ("sklearn.linear_model", {"C": [0.1, 1.0, 10.0], "max_iter": [2000]}),
    "DecisionTreeClassifier": ("sklearn.tree", {"max_depth": [3, 5, 8], "min_samples_leaf": [1, 5]}),
    "RandomForestClassifier": (
        "sklearn.ensemble",
        {"n_estimators": [25, 50], "max_depth": [4, 8], "n_jobs": [1]},
    ),
    "GradientBoostingClassifier": ("sklearn.ensemble", {"n_estimators": [30, 60], "max_depth": [2, 3]}),
    "KNeighborsClassifier": ("sklearn.neighbors", {"n_neighbors": [3, 5, 9]}),
}
REGRESSORS: dict[str, tuple[str, dict[str, list[Any]]]] = {
    "Ridge": ("sklearn.linear_model", {"alpha": [0.1, 1.0, 10.0]}),
    "DecisionTreeRegressor": ("sklearn.tree", {"max_depth": [3, 5, 8], "min_samples_leaf": [1, 5]}),
    "RandomForestRegressor": (
        "sklearn.ensemble",
        {"n_estimators": [25, 50], "max_depth": [4, 8], "n_jobs": [1]},
    ),
    "GradientBoostingRegressor": ("sklearn.ensemble", {"n_estimators": [30, 60], "max_depth": [2, 3]}),
    "KNeighborsRegressor": ("sklearn.neighbors", {"n_neighbors": [3, 5, 9]}),
}
SEEDED = {"DecisionTree", "RandomForest", "GradientBoosting", "LogisticRegression"}


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
    if any(name.startswith(prefix) for prefix in SEEDED):
        params["random_state"] = rng.randrange(1000)
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
        scaler=rng.choice(["standard", "minmax", "none"]),
        encoder=rng.choice(["onehot", "ordinal"]),
        model=ModelSpec(name=name, module=module, params=params),
        seed=seed,
    )


def _filter_for(train: pd.DataFrame, column: str, is_numeric: bool) -> RangeFilter | CategoryFilter:
    values = train[column].dropna()
    if is_numeric:
        return RangeFilter(column=column, low=float(values.min()), high=float(values.max()))
    return CategoryFilter(column=column, allowed=sorted(values.astype(str).unique().tolist()))
