"""Rank candidate framings of one sampled source and check them, cheapest evidence first.

Evidence weights (summed per candidate; the config override beats everything, a crawler's own knowledge such
as a competition's sample submission beats the rest): config 1000, source 100, the description's explicit
sentences 6-12, a model's proposal 6 x its confidence, a variable list 4, the title 1.5-3, the column's name
1-5 (and +-2 for words that mark an outcome or a value known beforehand), its position 1-1.5 (last for a label,
first measured column for a series), -2 for a copy of an earlier column. Candidates are checked in
rank order; the first one per problem family (tabular, time series) that passes the data checks is chosen,
the others are kept with why they lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from dareforge.config import Config, SourceOverride
from dareforge.reference_solutions.spec import MAX_CATEGORIES
from dareforge.schema import Source, TaskType
from dareforge.understand.checks import Outcome, check_series, check_tabular
from dareforge.understand.columns import Column, Sample
from dareforge.understand.evidence import TextEvidence, normalize
from dareforge.understand.timeaxis import Axis, find_axes, series_key
from dareforge.understand.withheld import configured_exclusions, outcomes

STRONG_NAMES = {
    "target",
    "label",
    "labels",
    "class",
    "y",
    "outcome",
    "response",
    "dependent",
    "dv",
    "class_label",
}
OUTCOME_NAMES = {
    "survived",
    "churn",
    "churned",
    "default",
    "diagnosis",
    "species",
    "quality",
    "saleprice",
    "price",
    "vote",
    "fraud",
    "is_fraud",
    "disease",
    "death",
    "died",
    "attrition",
    "approved",
    "loan_status",
    "exited",
    "purchased",
    "clicked",
    "converted",
    "readmitted",
    "failure",
    "defect",
    "won",
    "winner",
    "success",
    "sentiment",
    "digit",
}
WEAK_NAMES = {"status", "result", "category", "grade", "rating", "score", "sales", "income", "salary", "cost"}
SERIES_NAMES = {
    "value",
    "values",
    "price",
    "close",
    "sales",
    "demand",
    "count",
    "volume",
    "load",
    "consumption",
    "passengers",
    "revenue",
    "cases",
    "temp",
    "temperature",
    "units",
    "quantity",
    "amount",
    "traffic",
    "level",
    "index",
}
OUTCOME_WORDS = {
    "target",
    "label",
    "outcome",
    "response",
    "result",
    "selling",
    "sale",
    "sold",
    "close",
    "closing",
    "final",
    "actual",
    "realized",
    "realised",
}
"""Words in a column's name that mark what happened in the end (`Selling_Price`, `Close`, `Units_Sold`,
`target_price_market`): by convention the value to predict."""
KNOWN_WORDS = {
    "present",
    "current",
    "open",
    "opening",
    "initial",
    "original",
    "list",
    "msrp",
    "previous",
    "prev",
    "prior",
    "lag",
    "lagged",
    "baseline",
    "starting",
    "expected",
    "estimated",
    "planned",
    "budget",
    "budgeted",
    "predicted",
    "forecast",
}
"""Words that mark a value known before the outcome (`Present_Price` beside `Selling_Price`, `Open` beside
`Close`, a lag, someone's forecast): by convention a feature. Both sets break ties between columns whose other
evidence is equal; they never outweigh what a description says."""
NAME_MARK = 2.0
COPY_CHECKED = 12
CALENDAR_VALUES = 60
TWIN_CORRELATION = 0.9999
ONE_HOT_PREFIX = 4
NOT_OUTCOMES = re.compile(
    r"(?i)^(lat|latitude|lon|lng|long|longitude|x_?coord|y_?coord|zip|zip_?code|postal_?code|postcode|"
    r"phone|fax|e_?mail|url|website|address|street)$"
)
"""Places and contact details: features, never a prediction target."""
TIME_PARTS = re.compile(r"(?i)^(year|yr|month|mon|day|week|weekday|quarter|qtr|date|hour|minute)s?$")
"""Parts of a date say when a row was recorded; predicting them is no task."""


@dataclass(eq=False)
class Candidate:
    task_type: TaskType
    target: str
    score: float = 0.0
    proposers: set[str] = field(default_factory=set)
    evidence: list[str] = field(default_factory=list)
    axis: Axis | None = None
    entity: str | None = None
    outcome: Outcome | None = None
    named: bool = False
    """Words point at it (the config, the source, its description or title, a model, its own name), not only
    its type and position: what a second target of the same table needs."""

    def add(self, proposer: str, weight: float, sentence: str) -> None:
        self.score += weight
        self.proposers.add(proposer)
        if weight > 0 and proposer not in ("data", "tags"):
            self.named = True
        self.evidence.append(f"{sentence} ({weight:+g})")

    @property
    def confidence(self) -> float:
        return round(self.score / (self.score + 4.0), 3) if self.score > 0 else 0.0

    @property
    def family(self) -> str:
        return "series" if self.task_type == TaskType.TIME_SERIES else "tabular"


@dataclass
class Proposal:
    """What the stage learned about one source: candidates (checked or not), the id column, exclusions."""

    candidates: list[Candidate]
    id_column: str | None
    excluded: dict[str, str]
    """Columns no framing uses as a feature, with why."""
    axes: list[Axis]
    series_evidence: list[str]
    keys: list[str] = field(default_factory=list)
    """The id and the columns left out as keys or row numbers: no features, but checked for leaks."""
    time_index: Axis | None = None
    """The axis that indexes the rows (one row per time, or per time and entity, over a run of times): a
    tabular framing is then checked and split in time, so a date cannot interpolate the answer."""
    withheld: dict[str, str] = field(default_factory=dict)
    """Columns in no framing's files, with why: a competition's outcomes (its train columns that its test file
    lacks, known only afterwards; each may still be a target) and those `sources.<id>.exclude` names."""

    def left_out(self, target: str) -> dict[str, str]:
        """The columns a framing of `target` uses as no feature, with why (`excluded` and `withheld`)."""
        return {k: v for k, v in {**self.excluded, **self.withheld}.items() if k != target}


def label_type(column: Column, config: Config, text: TextEvidence) -> TaskType | None:
    """Classification or regression for a column as a target; None when it cannot be one."""
    hinted = {t for t in text.task_type if t != TaskType.TIME_SERIES}
    classes = column.classes(config.prepare.max_classes)
    if not column.numeric:
        return TaskType.CLASSIFICATION if classes else None
    if classes and not (hinted == {TaskType.REGRESSION} and column.distinct > 2):
        return TaskType.CLASSIFICATION
    return TaskType.REGRESSION


def propose(
    source: Source,
    sample: Sample,
    text: TextEvidence,
    config: Config,
    override: SourceOverride | None,
    model_hints: list[dict] | None = None,
) -> Proposal:
    cfg = config.understand
    hints = cfg.source_hints
    excluded: dict[str, str] = {}
    for column in sample.columns:
        if column.constant:
            excluded[column.name] = "constant" if column.nonnull else "empty"
        elif column.text_like:
            excluded[column.name] = "free text"
    for hint in text.excluded:
        excluded.setdefault(hint.column, hint.sentence)
    configured = configured_exclusions(source, sample, override)
    excluded.update(configured)
    id_column = _id_column(sample, source if hints else None, override)
    keys = [id_column] if id_column else []
    for column in sample.columns:
        if column.name == id_column or column.name in excluded:
            continue
        if column.sequential:
            excluded[column.name] = "numbers the rows in file order (which may follow the target)"
            keys.append(column.name)
        elif column.id_like:
            excluded[column.name] = "unique per row: a key, not a feature"
            keys.append(column.name)
    axes = find_axes(sample, text.series_object)
    axis = _series_axis(axes, source if hints else None, override)
    candidates: list[Candidate] = []
    skip = {id_column, *excluded}
    tabular = [c for c in sample.columns if c.name not in skip and c.missing_share <= 0.5]
    axis_parts = axis.parts if axis is not None else set()
    calendar = _calendar(axes)
    for position, column in enumerate(tabular):
        if (
            column.name in axis_parts
            or NOT_OUTCOMES.match(column.name.strip())
            or TIME_PARTS.search(column.name)
            or _calendar_part(column, calendar)
        ):
            continue
        task_type = label_type(column, config, text)
        if task_type is None:
            continue
        candidate = Candidate(task_type, column.name)
        _score_label(candidate, column, text, position, len(tabular), sample)
        candidates.append(candidate)
    entity, time_index = None, None
    if axis is not None:
        entity, unique = series_key(sample, axis, skip)
        if _indexes_rows(sample, axis, entity, unique, cfg.min_timestamps):
            time_index = axis
        if unique >= 0.95 and (
            text.series or axis.regular_share >= 0.7 or _hinted_series(source if hints else None, override)
        ):
            # Measured quantities: numbers that are neither the time, the series key nor a small integer code.
            measured = [
                c
                for c in tabular
                if c.numeric
                and c.name not in axis.parts
                and c.name != entity
                and (not c.integral or c.distinct > config.prepare.max_classes)
            ]
            for rank, column in enumerate(measured):
                candidate = Candidate(TaskType.TIME_SERIES, column.name, axis=axis, entity=entity)
                _score_series(candidate, column, text, rank, axis)
                candidates.append(candidate)
    _penalize_copies(candidates, sample)
    _apply_model(candidates, model_hints or [])
    _apply_source(candidates, source if hints else None, override, sample, config, text, axis, entity)
    if override and override.target:
        # The config said what the task is: nothing else is proposed beside it.
        candidates = [c for c in candidates if "config" in c.proposers]
    candidates.sort(key=lambda c: (-c.score, c.family, -_position(sample, c.target)))
    withheld = {**outcomes(source, sample), **configured}
    return Proposal(candidates, id_column, excluded, axes, text.series, keys, time_index, withheld)


def _position(sample: Sample, name: str) -> int:
    column = sample.column(name)
    return column.position if column is not None else -1


def _id_column(sample: Sample, source: Source | None, override: SourceOverride | None) -> str | None:
    for wanted in (override.id_column if override else None, source.id_column if source else None):
        if wanted and sample.column(wanted) is not None:
            return wanted
    # A column that numbers the rows in file order is no id to keep: files are often sorted by the label, and
    # such a number would give it away (prepare numbers rows in hash order instead).
    keys = [c for c in sample.columns if c.id_like and not c.sequential and re.search(r"(?i)id|key", c.name)]
    return keys[0].name if keys else None


def _series_axis(axes: list[Axis], source: Source | None, override: SourceOverride | None) -> Axis | None:
    for wanted in (override.time_column if override else None, source.time_column if source else None):
        if wanted:
            named = [a for a in axes if a.name == wanted or wanted in a.parts]
            if named:
                return named[0]
    if not axes:
        return None
    # The most regular axis with the most distinct times: a date column beats a year column beside it.
    return max(axes, key=lambda a: (a.regular_share >= 0.7, a.distinct, -axes.index(a)))


def _calendar(axes: list[Axis]) -> list[np.ndarray]:
    """The calendar fields of the first datetime axis as codes per sampled row (-1 where the time is missing)."""
    for axis in axes:
        if np.issubdtype(np.asarray(axis.values).dtype, np.datetime64):
            when = pd.Series(pd.to_datetime(axis.values))
            fields = [getattr(when.dt, f) for f in ("year", "quarter", "month", "day", "day_of_week", "hour")]
            fields += [when.dt.day_of_week >= 5, when.dt.isocalendar().week]
            return [pd.factorize(f, use_na_sentinel=True)[0] for f in fields]
    return []


def _calendar_part(column: Column, calendar: list[np.ndarray]) -> bool:
    """The column only restates when a row was recorded (`day_of_week`, `is_weekend`, a month name): it is a
    function of one calendar field of the table's dates, and predicting it is no task. Only a column of few
    values can be one (a week of the year has 53)."""
    if not calendar or not 2 <= column.distinct <= CALENDAR_VALUES:
        return False
    values = pd.factorize(column.text, use_na_sentinel=True)[0]
    for codes in calendar:
        rows = (codes >= 0) & (values >= 0)
        fields = np.unique(codes[rows])
        if 0 < len(fields) < rows.sum():
            pairs = np.unique(codes[rows].astype(np.int64) * (values.max() + 1) + values[rows])
            if len(pairs) == len(fields):
                return True
    return False


def _indexes_rows(sample: Sample, axis: Axis, entity: str | None, unique: float, min_times: int) -> bool:
    """Rows are observations in time: (time, entity) is unique, there are enough distinct times, and each
    series has several of them (a year of manufacture beside a car's name repeats too few times per name)."""
    if axis.spec.kind == "index" or unique < 0.95 or axis.distinct < min_times:
        return False
    column = sample.column(entity) if entity else None
    per_series = sample.rows / column.distinct if column is not None and column.distinct else sample.rows
    return per_series >= min_times / 2


def _hinted_series(source: Source | None, override: SourceOverride | None) -> bool:
    kinds = [override.task_type if override else None, source.task_hint if source else None]
    return TaskType.TIME_SERIES.value in kinds


def _score_label(
    candidate: Candidate, column: Column, text: TextEvidence, position: int, count: int, sample: Sample
) -> None:
    name = column.name.strip().lower().replace(" ", "_")
    for hint in text.targets:
        if hint.column == column.name:
            proposer = "title" if hint.sentence.startswith("the title") else "description"
            candidate.add(proposer, hint.weight, hint.sentence)
    for task_type, sentences in text.task_type.items():
        if task_type == candidate.task_type:
            candidate.add("tags", 1.0, f"the source is {'; '.join(sentences)}")
    if name in STRONG_NAMES:
        candidate.add("name", 5.0, f"the column is named {column.name!r}")
    elif name in OUTCOME_NAMES or name.removeprefix("is_") in OUTCOME_NAMES:
        candidate.add("name", 2.5, f"{column.name!r} names an outcome")
    elif name in WEAK_NAMES:
        candidate.add("name", 1.0, f"{column.name!r} often names an outcome")
    elif words := sorted(name_words(column.name) & (OUTCOME_NAMES | WEAK_NAMES)):
        candidate.add("name", 1.0, f"{words[0]!r} in its name often names an outcome")
    _name_marks(candidate, column)
    if position == count - 1:
        candidate.add("data", 1.5, "it is the table's last column (where labels usually stand)")
    elif position == 0:
        candidate.add("data", 1.0, "it is the table's first column (where responses often stand)")
    if candidate.task_type == TaskType.CLASSIFICATION and not column.numeric:
        candidate.add("data", 0.5, f"it holds {column.distinct} text labels")
    if _one_hot_member(column, sample):
        candidate.add("data", -1.5, "it is one dummy of a one-hot group")


def name_words(name: str) -> set[str]:
    """The words of a column's name: `Selling_Price` -> {selling, price}, `adjClose` -> {adj, close}."""
    return set(normalize(name).split())


def _name_marks(candidate: Candidate, column: Column) -> None:
    words = name_words(column.name)
    outcome, known = sorted(words & OUTCOME_WORDS), sorted(words & KNOWN_WORDS)
    if outcome and not known:
        candidate.add("name", NAME_MARK, f"{outcome[0]!r} in its name marks an outcome")
    elif known and not outcome:
        candidate.add("name", -NAME_MARK, f"{known[0]!r} in its name marks a value known beforehand")


def _penalize_copies(candidates: list[Candidate], sample: Sample) -> None:
    """A label that copies an earlier column (a unit twin such as a Fahrenheit copy of a Celsius reading, or a
    recoding of a label) is ranked below it: the original comes first in real tables, copies are appended.
    Only the COPY_CHECKED best-ranked candidates are compared, and only with columns of about as many values."""
    ranked = sorted(
        (c for c in candidates if c.family == "tabular"),
        key=lambda c: (-c.score, -_position(sample, c.target)),
    )
    for candidate in ranked[:COPY_CHECKED]:
        column = sample.column(candidate.target)
        original = next(
            (
                c
                for c in sample.columns[: column.position]
                if abs(c.distinct - column.distinct) <= 0.1 * column.distinct and copies(column, c)
            ),
            None,
        )
        if original is not None:
            candidate.add("data", -NAME_MARK, f"it copies {original.name!r}, an earlier column (a unit twin)")


def copies(column: Column, other: Column) -> bool:
    """One column is the other in other units or codes: an affine function of it, or its values map one to one."""
    if column.distinct < 2 or other.distinct < 2:
        return False
    if column.numeric and other.numeric:
        x, y = column.numbers.to_numpy(dtype=float), other.numbers.to_numpy(dtype=float)
        both = np.isfinite(x) & np.isfinite(y)
        if both.sum() < 3 or np.std(x[both]) == 0 or np.std(y[both]) == 0:
            return False
        return bool(abs(np.corrcoef(x[both], y[both])[0, 1]) >= TWIN_CORRELATION)
    rows = pd.DataFrame({"a": column.text, "b": other.text}).dropna()
    pairs = rows.drop_duplicates()
    # Two columns whose every value is its row's own (a date and a measured number) map one to one whatever
    # they hold: only values seen on several rows can show one column recodes the other.
    return len(pairs) < len(rows) and len(pairs) == pairs["a"].nunique() == pairs["b"].nunique()


def _one_hot_member(column: Column, sample: Sample) -> bool:
    if not (column.integral and column.distinct == 2):
        return False
    prefix = column.name[:ONE_HOT_PREFIX].lower()
    siblings = [
        c
        for c in sample.columns
        if c is not column and c.name[:ONE_HOT_PREFIX].lower() == prefix and c.integral and c.distinct == 2
    ]
    return len(siblings) >= 2


def _score_series(candidate: Candidate, column: Column, text: TextEvidence, rank: int, axis: Axis) -> None:
    for hint in text.targets:
        if hint.column == column.name:
            proposer = "title" if hint.sentence.startswith("the title") else "description"
            candidate.add(proposer, hint.weight, hint.sentence)
    for sentence in text.series[:2]:
        candidate.add(
            "description" if "description" in sentence else "tags", 1.0, f"a time series: {sentence}"
        )
    candidate.add("data", 0.5, axis.evidence + (f" ({axis.spec.frequency})" if axis.spec.frequency else ""))
    _name_marks(candidate, column)
    if column.name.strip().lower() in SERIES_NAMES:
        candidate.add("name", 1.5, f"{column.name!r} names a measured quantity")
    if rank == 0:
        candidate.add("data", 1.5, "it is the first measured column after the time")


def _apply_model(candidates: list[Candidate], hints: list[dict]) -> None:
    for hint in hints:
        for candidate in candidates:
            if candidate.target == hint["target"] and candidate.task_type == hint["task_type"]:
                weight = round(6.0 * hint["confidence"], 2)
                candidate.add("model", weight, f"the model proposed it: {hint['why']}")


def _apply_source(
    candidates: list[Candidate],
    source: Source | None,
    override: SourceOverride | None,
    sample: Sample,
    config: Config,
    text: TextEvidence,
    axis: Axis | None,
    entity: str | None,
) -> None:
    if override and override.target:
        # The config always wins: its target becomes a candidate whatever the data says of the column (the
        # checks still run and are recorded); a column the table lacks fails its check with the fix.
        for target in override.target:
            column = sample.column(target)
            if override.task_type:
                wanted = TaskType(override.task_type)
            elif column is not None and override.time_column:
                wanted = TaskType.TIME_SERIES
            else:
                wanted = (
                    label_type(column, config, text) if column is not None else None
                ) or TaskType.REGRESSION
            match = next((c for c in candidates if c.target == target and c.task_type == wanted), None)
            if match is None:
                match = Candidate(wanted, target)
                if wanted == TaskType.TIME_SERIES:
                    match.axis, match.entity = axis, entity
                candidates.append(match)
            match.add("config", 1000.0, "sources.<id>.target names it in dareforge.yaml")
        return
    if source is None or not source.target_columns:
        return
    what = "the source names it as its target" + (f" ({source.task_hint})" if source.task_hint else "")
    for candidate in candidates:
        if candidate.target in source.target_columns and source.task_hint in (
            None,
            candidate.task_type.value,
        ):
            candidate.add("source", 100.0, what)


def check(candidate: Candidate, sample: Sample, proposal: Proposal, config: Config) -> Outcome:
    outcome = _check(candidate, sample, proposal, config)
    if not outcome.passed and outcome.formula and {"config", "source"} & candidate.proposers:
        # A target named by the config or a competition's submission is posed, but never beside the columns
        # that compute it: they leave its files as leaks, and what is left is checked again.
        formula = outcome.formula
        parts = dict.fromkeys(formula.columns, "computes the target")
        outcome = _check(
            candidate, sample, replace(proposal, excluded={**proposal.excluded, **parts}), config
        )
        outcome.excluded = [*formula.columns, *outcome.excluded]
        outcome.checks.insert(0, f"leak: {formula.text} (left out)")
    if not outcome.passed and outcome.soft and "config" in candidate.proposers:
        # The config names this target: a person has overruled the learnability check, which is recorded.
        outcome.passed = True
        outcome.checks.append(
            f"kept because dareforge.yaml names it as the target, although {outcome.reason}"
        )
    return outcome


def _check(candidate: Candidate, sample: Sample, proposal: Proposal, config: Config) -> Outcome:
    target = sample.column(candidate.target)
    if target is None:
        return Outcome(passed=False, reason=f"{candidate.target!r} is not a column of {sample.file}")
    skip = {candidate.target, proposal.id_column, *proposal.left_out(candidate.target)}
    if candidate.task_type == TaskType.TIME_SERIES:
        axis = candidate.axis
        if axis is None:
            return Outcome(
                passed=False,
                reason=f"no time column found in {sample.file}; name it under sources.<id>.time_column",
            )
        others = [
            c
            for c in sample.columns
            if c.name not in skip and c.name not in axis.parts and c.name != candidate.entity
        ]
        return check_series(sample, target, axis.values, candidate.entity, others, config)
    features = [
        c
        for c in sample.columns
        if c.name not in skip and c.missing_share < 0.5 and (c.numeric or c.distinct <= MAX_CATEGORIES)
    ]
    keys = [c for c in sample.columns if c.name in proposal.keys and c.name != candidate.target]
    times = proposal.time_index.values if proposal.time_index is not None else None
    outcome = check_tabular(sample, target, candidate.task_type, features, config, keys, times)
    if outcome.passed and proposal.axes:
        parts = set().union(*(a.parts for a in proposal.axes))
        if all(c.name in parts or c.name in outcome.excluded for c in features):
            outcome.passed = False
            outcome.reason = "its only features are the time: a forecast, not a tabular task"
    return outcome
