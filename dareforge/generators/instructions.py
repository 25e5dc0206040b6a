"""Render task prompts. IF prompts state every choice that changes the predictions; MM prompts state only the goal.

Several phrasings of the same spec exist so that models cannot key on one template; the choice is seeded.
"""

from __future__ import annotations

import random

import pandas as pd

from dareforge.reference_solutions.reference_code import PREDICTIONS, literal
from dareforge.reference_solutions.spec import (
    CATEGORICAL_IMPUTER,
    ENCODER,
    NUMERIC_IMPUTER,
    SCALER,
    CategoryFilter,
    IFSpec,
    filter_requirement,
    param_requirement,
)
from dareforge.schema import MetricSpec, PreparedSource, TaskLimits


def _names(columns: list[str]) -> str:
    return ", ".join(f"`{c}`" for c in columns) if columns else "none"


def _filters(spec: IFSpec) -> list[str]:
    lines = []
    for index, f in enumerate(spec.filters):
        if filter_requirement(index) in spec.unstated:
            continue  # dropping it changes no prediction (`sensitivity.settle`)
        if isinstance(f, CategoryFilter):
            allowed = ", ".join(repr(v) for v in f.allowed)
            lines.append(f"keep rows whose `{f.column}` is one of {allowed}")
        else:
            lines.append(
                f"keep rows whose `{f.column}` is between {literal(f.low)} and {literal(f.high)} inclusive"
            )
    return lines


def _steps(spec: IFSpec) -> list[str]:
    filters = "; then ".join(_filters(spec))
    clean = (
        " Clean the training rows by applying these filters in this order, always keeping a row whose value in "
        f"the filtered column is missing: {filters}."
    )
    steps = [f"Load `train.csv` and `test.csv` with pandas' `read_csv` defaults.{clean if filters else ''}"]
    if spec.date_parts:
        derived = ", ".join(
            f"`{name}` (its {part})"
            for part, name in zip(spec.date_parts.parts, spec.date_parts.derived, strict=True)
        )
        steps.append(
            f"In both files, parse `{spec.date_parts.column}` with `pd.to_datetime` and add the columns {derived}, "
            "taken from pandas' `.dt` accessor of the same name."
        )
    steps.append(
        f"Use these numeric features, in this order: {_names(spec.numeric_features)}; and these categorical "
        f"features, in this order: {_names(spec.categorical)}. Use no other column."
        + (
            " Read the categorical features as text (`.astype(str)`), keeping missing values missing."
            if spec.categorical
            else ""
        )
    )
    steps.append(_preprocessing(spec))
    params = ", ".join(
        f"{k}={v!r}" for k, v in spec.model.params.items() if param_requirement(k) not in spec.unstated
    )
    steps.append(
        f"Put the preprocessing and `{spec.model.module}.{spec.model.name}({params})` (all other parameters at "
        f"their defaults) in one `Pipeline`, fit it on the cleaned training rows to predict `{spec.target}`, and "
        "predict every row of `test.csv`."
    )
    steps.append(
        f"Write `{PREDICTIONS}` with exactly two columns, `{spec.id_column}` and `{spec.target}`, one row per row "
        "of `test.csv`."
    )
    return steps


NOTHING_TO_STATE = "any imputing or scaling you choose gives the same predictions"


def _preprocessing(spec: IFSpec) -> str:
    """The ColumnTransformer step, stating only the requirements the spec does not leave out (`IFSpec.unstated`:
    an imputer with no missing value to fill, the scaler of a scale-invariant model, the steps of a feature
    kind the task does not use), so that each stated one changes the predictions."""
    numeric = []
    if NUMERIC_IMPUTER not in spec.unstated:
        numeric.append(f"impute missing values with the {spec.numeric_imputer}")
    if SCALER not in spec.unstated:
        numeric.append(
            "leave the values unscaled"
            if spec.scaler == "none"
            else f"scale with scikit-learn's {'StandardScaler' if spec.scaler == 'standard' else 'MinMaxScaler'}"
        )
    categorical = []
    if CATEGORICAL_IMPUTER not in spec.unstated:
        imputer = (
            "the most frequent value"
            if spec.categorical_imputer == "most_frequent"
            else "the constant string 'missing'"
        )
        categorical.append(f"impute missing values with {imputer}")
    if ENCODER not in spec.unstated:
        categorical.append(
            "one-hot encode with `OneHotEncoder(handle_unknown='ignore')`"
            if spec.encoder == "onehot"
            else "ordinal encode with `OrdinalEncoder(handle_unknown='use_encoded_value', unknown_value=-1)`"
        )
    transformers = []
    if spec.numeric_features:
        transformers.append(f"one for the numeric features ({', then '.join(numeric) or NOTHING_TO_STATE})")
    if spec.categorical:
        transformers.append(f"one for the categorical features ({', then '.join(categorical)})")
    return (
        f"Preprocess with a scikit-learn `ColumnTransformer` with {' and then '.join(transformers)}; every step "
        "uses its default settings otherwise and is fitted on the cleaned training rows."
    )


def _numbered(spec: IFSpec) -> str:
    intro = f"Build the following scikit-learn workflow to predict `{spec.target}` ({spec.task_type.value})."
    return intro + "\n\n" + "\n".join(f"{i}. {step}" for i, step in enumerate(_steps(spec), start=1))


def _prose(spec: IFSpec) -> str:
    return (
        f"Your job is to reproduce a {spec.task_type.value} pipeline for `{spec.target}` exactly. "
        + " ".join(_steps(spec))
    )


def _checklist(spec: IFSpec) -> str:
    return (
        "Follow every requirement below; the predictions are checked against a reference run of the same "
        "workflow, so deviations change the answer.\n\n" + "\n".join(f"- {step}" for step in _steps(spec))
    )


IF_TEMPLATES = (_numbered, _prose, _checklist)


def render_if(spec: IFSpec, limits: TaskLimits, note: str = "") -> str:
    template = random.Random(spec.seed).choice(IF_TEMPLATES)
    return template(spec) + (f" {note}" if note else "") + "\n\n" + _limits(limits)


def split_note(prepared: PreparedSource) -> str:
    """What an instruction says of a split that is not random (empty for a random or stratified one): the rows
    split in time, by which column, or the groups kept apart, so an agent validates the way it is tested."""
    if prepared.split == "chronological" and prepared.time_column:
        return (
            f"The rows are split in time by `{prepared.time_column}`: every row of `test.csv` comes after the "
            "rows of `train.csv`."
        )
    if prepared.split == "grouped" and prepared.group_column:
        return f"The rows are split by `{prepared.group_column}`: no value of it in `test.csv` occurs in `train.csv`."
    return ""


def notes(*parts: str) -> str:
    """Instruction sentences joined, the empty ones left out."""
    return " ".join(part for part in parts if part)


def boolean_note(answers: pd.DataFrame, targets: list[str]) -> str:
    """What a boolean target's instruction says of its spelling (empty for any other target): pandas reads a
    prepared boolean column (`True`/`False`) as bool, and the grader reads every spelling of one boolean alike."""
    booleans = [t for t in targets if t in answers.columns and pd.api.types.is_bool_dtype(answers[t])]
    if not booleans:
        return ""
    names = ", ".join(f"`{t}`" for t in booleans)
    return (
        f"{names} {'is' if len(booleans) == 1 else 'are'} true or false: write True or False (true/false, "
        "TRUE/FALSE, yes/no and 1/0 are read the same)."
    )


METRIC_WORDS = {
    "macro-f1": "macro-averaged F1 score",
    "clipped-r2": "R² (negative values count as 0)",
    "forecast-skill": (
        "forecast skill: 1 - MAE / (the MAE of the best forecast that needs no model: each series' training "
        "mean, its last value, or its last season repeated), floored at 0, so a perfect forecast scores 1"
    ),
}


def render_mm(
    *,
    target: list[str],
    task_words: str,
    metric: MetricSpec,
    limits: TaskLimits,
    test_note: str,
    bar: float,
) -> str:
    """A goal task's prompt: the goal, the files, the metric and `bar`, the score that passes (the task's own
    bar or its family's: the one its graders use)."""
    keys = ", ".join(f"`{c}`" for c in metric.key_columns)
    targets = ", ".join(f"`{c}`" for c in target)
    return (
        f"Train any model you like on `train.csv` to predict {targets} ({task_words}). {test_note} "
        f"Write `{PREDICTIONS}` with the columns {keys} and {targets}, one row per row of `test.csv`. "
        f"Submissions are scored by the {METRIC_WORDS.get(metric.name, metric.name)} on held-out answers; "
        f"{pass_sentence(bar)} You have CPU only.\n\n" + _limits(limits)
    )


def pass_sentence(bar: float) -> str:
    """How a goal task's instruction states its bar (tests find it by this wording)."""
    return f"a submission passes when it scores at least {bar:g}."


def _limits(limits: TaskLimits) -> str:
    return (
        f"You may run code at most {limits.turns} times; each run may take at most {limits.seconds_per_execution} "
        "seconds."
    )
