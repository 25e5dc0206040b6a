"""Reference code: the scripts whose outputs are the reference predictions and the strong baseline scores.

Each builder returns the full source of a standalone script that reads `train.csv` and `test.csv` from its
working directory and writes `predictions.csv`. The script is stored with the task (private part), run by the
reference runner, and is what `dareforge resimulate` re-runs on another stack.
"""

from __future__ import annotations

import ast
import re
import string
from dataclasses import dataclass

from dareforge.reference_solutions import forecast as forecast_source
from dareforge.reference_solutions.spec import CategoryFilter, IFSpec, RangeFilter

PREDICTIONS = "predictions.csv"
REFERENCE_PREDICTIONS = "reference_predictions.csv"
"""An IF reference run's predictions, kept privately: what an IF attempt must reproduce."""
STRONG_SCRIPT = "strong_reference.py"
"""A goal task's strong reference script, kept privately (the solver ladder reads its spec back from it)."""
STRONG_PREDICTIONS = "strong_predictions.csv"
"""The strong reference's predictions of a goal task, kept privately (its score is the task's `strong`)."""

HEADER = """\
import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, OrdinalEncoder, StandardScaler
"""
"""The imports every reference script starts with (an IF script then imports its model's class)."""


def literal(value: float) -> str:
    """A number as the instruction and the code both write it: integers without a decimal point."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _filter_line(f: RangeFilter | CategoryFilter) -> str:
    column = repr(f.column)
    if isinstance(f, RangeFilter):
        keep = f"train[{column}].between({literal(f.low)}, {literal(f.high)})"
    else:
        keep = f"train[{column}].astype(str).isin({f.allowed!r})"
    return f"train = train[train[{column}].isna() | {keep}]"


@dataclass(frozen=True)
class Section:
    """One step of the IF reference script, in order: `kind` names the step (`SECTION_KINDS`), `title` says it
    in words, `code` is its lines. Gold trajectories run the sections as separate cells of one kernel."""

    kind: str
    title: str
    code: str


SECTION_KINDS = ("imports", "load", "filter", "dates", "features", "pipeline", "fit", "predict")


def if_reference_sections(spec: IFSpec) -> list[Section]:
    """The IF reference script as ordered sections (one per filter); joined, they are `if_reference_code`."""
    numeric, categorical = spec.numeric_features, spec.categorical
    sections: list[Section] = []

    def add(kind: str, title: str, *lines: str) -> None:
        sections.append(Section(kind, title, "\n".join(lines) + "\n"))

    add(
        "imports",
        "import pandas, numpy and scikit-learn",
        HEADER,
        f"from {spec.model.module} import {spec.model.name}",
        "",
    )
    add(
        "load",
        "load train.csv and test.csv",
        'train = pd.read_csv("train.csv")',
        'test = pd.read_csv("test.csv")',
    )
    for f in spec.filters:
        add("filter", f"filter the training rows on {f.column!r}", _filter_line(f))
    if spec.date_parts:
        column = repr(spec.date_parts.column)
        parts = zip(spec.date_parts.parts, spec.date_parts.derived, strict=True)
        add(
            "dates",
            f"derive date parts of {spec.date_parts.column!r}",
            "for frame in (train, test):",
            f"    when = pd.to_datetime(frame[{column}])",
            *(f"    frame[{derived!r}] = when.dt.{part}" for part, derived in parts),
        )
    lines = [
        f"features = {numeric + categorical!r}",
        "X, X_test = train[features].copy(), test[features].copy()",
    ]
    if categorical:
        # As text, missing values kept missing: pandas reads a column of True/False with blanks as bools beside
        # NaN, which the imputer's "missing" would mix with a str (encoders refuse mixed types), and numbers
        # with gaps as floats beside it.
        lines.append(
            f"for frame in (X, X_test):\n    frame[{categorical!r}] = "
            f"frame[{categorical!r}].astype(str).where(frame[{categorical!r}].notna(), np.nan)"
        )
    add("features", "select the features", *lines)
    add(
        "pipeline",
        f"build the preprocessing and {spec.model.name} pipeline",
        f"preprocess = {preprocess_code(spec)}",
        f'model = Pipeline([("preprocess", preprocess), ("model", {estimator_code(spec)})])',
    )
    add("fit", "fit on the cleaned training rows", f"model.fit(X, train[{spec.target!r}])")
    add(
        "predict",
        f"predict the test rows and write {PREDICTIONS}",
        f"pd.DataFrame({{{spec.id_column!r}: test[{spec.id_column!r}], {spec.target!r}: model.predict(X_test)}})"
        f'.to_csv("{PREDICTIONS}", index=False)',
    )
    return sections


def preprocess_code(spec: IFSpec) -> str:
    """The reference's preprocessing step, a ColumnTransformer expression: what the model is fitted on."""
    numeric, categorical = spec.numeric_features, spec.categorical
    numeric_steps = [f'("impute", SimpleImputer(strategy={spec.numeric_imputer!r}))']
    if spec.scaler != "none":
        numeric_steps.append(
            f'("scale", {"StandardScaler" if spec.scaler == "standard" else "MinMaxScaler"}())'
        )
    imputer = (
        'SimpleImputer(strategy="most_frequent")'
        if spec.categorical_imputer == "most_frequent"
        else 'SimpleImputer(strategy="constant", fill_value="missing")'
    )
    encoder = (
        'OneHotEncoder(handle_unknown="ignore")'
        if spec.encoder == "onehot"
        else 'OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)'
    )
    transformers = []
    if numeric:
        transformers.append(f'("numeric", Pipeline([{", ".join(numeric_steps)}]), {numeric!r})')
    if categorical:
        transformers.append(
            f'("categorical", Pipeline([("impute", {imputer}), ("encode", {encoder})]), {categorical!r})'
        )
    return f"ColumnTransformer([{', '.join(transformers)}])"


def estimator_code(spec: IFSpec) -> str:
    """The reference's model, a constructor expression of the class `spec.model.module` exports."""
    params = ", ".join(f"{k}={v!r}" for k, v in spec.model.params.items())
    return f"{spec.model.name}({params})"


def if_reference_code(spec: IFSpec) -> str:
    """The standalone IF reference script (byte for byte what certified tasks were generated with)."""
    return "".join(section.code for section in if_reference_sections(spec))


@dataclass(frozen=True)
class StrongSpec:
    """A strong default model for MM and time-series tasks, on every usable column.

    MM: gradient boosting with defaults. Forecasts (`time_column` set): trees cannot extrapolate a trend, and a
    forecaster tries exponential smoothing too, so the script fits gradient boosting, a linear trend-and-season
    model and Holt-Winters smoothing per series of `entity` (`forecast.smoothing_source`), keeps whichever has
    the smallest absolute error on the latest fifth of the training rows (forecasts are scored by it), then
    refits it on all of them; the test rows are never looked at.
    """

    classification: bool
    id_column: str
    targets: list[str]
    numeric: list[str]
    categorical: list[str]
    dates: list[str]
    output_keys: list[str]
    time_column: str | None = None
    entity: str | None = None


_STRONG = """from sklearn.base import is_classifier
from sklearn.ensemble import {estimator}
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_absolute_error

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
numeric, categorical, seasons = {numeric!r}, {categorical!r}, []
for column in {dates!r}:
    for frame in (train, test):
        # In UTC: dates written with an offset ("2021-02-01T00:00:00Z") read as aware, and aware and naive
        # times do not subtract
        when = pd.to_datetime(frame[column], utc=True)
        for part in ("year", "month", "day", "dayofweek", "hour"):
            frame[f"{{column}}_{{part}}"] = getattr(when.dt, part)
        # Timestamp.toordinal's day number (0001-01-01 is day 1), NaN where the date is missing
        frame[f"{{column}}_ordinal"] = (when.dt.normalize() - pd.Timestamp("1970-01-01", tz="UTC")).dt.days + 719163 + when.dt.hour / 24
    numeric += [f"{{column}}_{{part}}" for part in ("year", "month", "day", "dayofweek", "hour", "ordinal")]
    seasons += [f"{{column}}_month", f"{{column}}_dayofweek", f"{{column}}_hour"]
for frame in (train, test):
    # As text: a column of numbers with gaps would otherwise mix floats with the imputer's "missing"
    frame[categorical] = frame[categorical].astype(str).where(frame[categorical].notna(), np.nan)
    frame[seasons] = frame[seasons].astype(str)


def boosting():
    encode = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)
    categories = Pipeline([("impute", SimpleImputer(strategy="constant", fill_value="missing")), ("encode", encode)])
    columns = ColumnTransformer([("numeric", "passthrough", numeric), ("categorical", categories, categorical)])
    return Pipeline([("preprocess", columns), ("model", {boosted})])


def trend_and_season():
    scale = Pipeline([("impute", SimpleImputer()), ("scale", StandardScaler())])
    categories = Pipeline([
        ("impute", SimpleImputer(strategy="constant", fill_value="missing")),
        ("encode", OneHotEncoder(handle_unknown="ignore")),
    ])
    plain = [c for c in numeric if c not in seasons]
    columns = ColumnTransformer([("numeric", scale, plain), ("categorical", categories, categorical + seasons)])
    return Pipeline([("preprocess", columns), ("model", {linear})])

{smoothing}
features = numeric + categorical
# The models read the features; smoothing reads the time and series columns (the pipelines drop them)
inputs = features + [c for c in ({time_column!r}, {entity!r}) if c is not None and c not in features]
candidates = {candidates}
out = test[{keys!r}].copy()
for target in {targets!r}:
    build = candidates[0]
    if len(candidates) > 1:
        ordered = train.sort_values({time_column!r}, kind="stable")
        cut = int(len(ordered) * 0.8)
        fit, hold = ordered.iloc[:cut], ordered.iloc[cut:]
        errors = [mean_absolute_error(hold[target], make().fit(fit[inputs], fit[target]).predict(hold[inputs])) for make in candidates]
        build = candidates[int(np.argmin(errors))]
    fit = train
    if is_classifier(build()):
        # A class with one training row cannot be learned, and it fails early stopping's stratified holdout
        seen = train[target].map(train[target].value_counts())
        fit = train[seen > 1] if train[target][seen > 1].nunique() > 1 else train
    out[target] = build().fit(fit[inputs], fit[target]).predict(test[inputs])
out.to_csv("{predictions}", index=False)
"""


@dataclass(frozen=True)
class Estimator:
    """One model in place of the strong reference's choice (a solver ladder's rung): `expression` builds it,
    `imports` are the lines it needs; it runs on the strong reference's own features, through the pipeline
    trees use (ordinal codes, missing values kept) or, when `linear`, the one linear models use (imputed and
    scaled numbers, one-hot categories and seasons)."""

    expression: str
    imports: str = ""
    linear: bool = False


SMOOTHING_ONLY = "smoothing"
"""`strong_reference_code`'s `only` for a forecast's script that runs its smoothing candidate alone."""


def strong_reference_code(
    spec: StrongSpec, estimator: Estimator | None = None, only: str | None = None
) -> str:
    """The strong reference script of `spec`, or with `estimator` in place of its boosted model (same files,
    features and output). A forecast still chooses among that model, the linear trend-and-season one (trees
    cannot carry a trend past the training rows) and exponential smoothing, unless `estimator` is the linear
    one or `only` is `SMOOTHING_ONLY` (that model alone)."""
    boosted = "HistGradientBoostingClassifier" if spec.classification else "HistGradientBoostingRegressor"
    forecast = spec.time_column is not None
    models = {
        "boosted": f"{boosted}(random_state=0)",
        "linear": "Ridge(alpha=1.0)",
        "candidates": "[boosting, trend_and_season, Smoothing]" if forecast else "[boosting]",
        "smoothing": forecast_source.smoothing_source(spec.time_column, spec.entity) if forecast else "",
    }
    if estimator is not None:
        models["linear" if estimator.linear else "boosted"] = estimator.expression
        if estimator.linear:
            models["candidates"] = "[trend_and_season]"
    if only == SMOOTHING_ONLY:
        if not forecast:
            raise ValueError("only a forecast's strong reference has a smoothing candidate (no time_column)")
        models["candidates"] = "[Smoothing]"
    return (
        (estimator.imports if estimator else "")
        + HEADER
        + _STRONG.format(
            estimator=boosted,
            **models,
            numeric=list(spec.numeric),
            categorical=list(spec.categorical),
            dates=list(spec.dates),
            time_column=spec.time_column,
            entity=spec.entity,
            keys=list(spec.output_keys),
            targets=list(spec.targets),
            predictions=PREDICTIONS,
        )
    )


_TEXT = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_REPR = {
    "time_column": f"None|{_TEXT}",
    "entity": f"None|{_TEXT}",
    "list": rf"\[(?:(?:{_TEXT})(?:, (?:{_TEXT}))*)?\]",
}
"""What `repr` writes for a field: a column name or None, or a list of names (so a comma inside a name cannot
end a list early)."""


def _template_pattern() -> re.Pattern:
    """The strong script's template as a pattern: a `!r` field matches its repr, any other field lazily, a
    repeated field is a back-reference."""
    parts, seen = [re.escape(HEADER)], set()
    for text, field, _, conversion in string.Formatter().parse(_STRONG):
        parts.append(re.escape(text))
        if field is None:
            continue
        value = _REPR.get(field, _REPR["list"]) if conversion == "r" else ".*?"
        parts.append(f"(?P={field})" if field in seen else f"(?P<{field}>{value})")
        seen.add(field)
    return re.compile("".join(parts), re.DOTALL)


def strong_spec_of(code: str, id_column: str) -> StrongSpec | None:
    """The spec a stored strong reference script was written from (None when `code` is not one): tasks store
    the script, not the spec, and their ids and files stay as they were. The spec is trusted only when it
    writes `code` back byte for byte. `id_column` is not in the script (its output keys are)."""
    match = _template_pattern().fullmatch(code)
    if match is None:
        return None
    try:
        fields = {name: ast.literal_eval(match[name]) for name in _LITERAL_FIELDS}
    except (ValueError, SyntaxError):
        return None
    spec = StrongSpec(
        classification=match["estimator"].endswith("Classifier"),
        id_column=id_column,
        targets=fields["targets"],
        numeric=fields["numeric"],
        categorical=fields["categorical"],
        dates=fields["dates"],
        output_keys=fields["keys"],
        time_column=fields["time_column"],
        entity=fields["entity"],
    )
    return spec if strong_reference_code(spec) == code else None


_LITERAL_FIELDS = ("targets", "numeric", "categorical", "dates", "keys", "time_column", "entity")
