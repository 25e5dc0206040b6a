"""Question programs: seeded choices on a table, a precise question, and the pandas body that answers it.

Each program's `propose(table, rng)` draws one candidate `Question` (or None when the table has nothing for it):
the question's text states what to compute, the answer type and format (rounding, units, list order); its
`body` is Python that reads the table as `df` and sets `answer` (and `checks`, numbers the program's `problem`
judges: the gap behind a top-1, a test's p-value). Column names and values enter the code as Python literals
(`repr`), never by string pasting, so any column name is safe.

The body is the reference solution: `scripts.py` wraps it into the script the reference worker runs, and the
generator runs the same text to screen the candidate. Nothing here reads files.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dareforge.schema import AnswerType, ColumnKind, PreparedSource

QUESTIONS_VERSION = "1"
"""Part of every question task's spec, hence of its id: bump it when a program, its rendering or a degeneracy
rule changes, so stored questions are asked and judged again (prediction tasks keep their ids)."""
MAX_GROUPS = 30
MAX_LABEL_CHARS = 40
MIN_NUMERIC_DISTINCT = 5
MIN_GROUP_ROWS = 3
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
TIE_TOLERANCE = 1e-9
MIN_CORRELATION = 0.05
P_VALUE_BAND = (0.025, 0.1)
"""A test whose p-value falls here is too close to the 5% level: the verdict would hang on the test's details."""
MIN_RELATIVE_GAP = 0.01


@dataclass(frozen=True)
class Table:
    """A table as question programs see it: the frame (read as pandas reads the file) and its usable columns."""

    frame: pd.DataFrame
    numeric: list[str]
    categorical: list[str]
    dates: list[str] = field(default_factory=list)
    years: list[str] = field(default_factory=list)
    id_column: str | None = None

    @classmethod
    def of(cls, frame: pd.DataFrame, prepared: PreparedSource | None = None) -> Table:
        """Usable columns of `frame`: never the id or a framing's excluded column; numbers with enough distinct
        values; categories with 2..30 short values; ISO dates; integer year columns."""
        kinds = {c.name: c.kind for c in prepared.columns} if prepared else {}
        skip = {prepared.id_column, *prepared.excluded_columns} if prepared else set()
        numeric, categorical, dates, years = [], [], [], []
        for column in frame.columns:
            values = frame[column]
            if column in skip or values.notna().sum() < 2 * MIN_GROUP_ROWS:
                continue
            present = values.dropna()
            distinct = present.nunique()
            is_number = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
            if is_number and _is_year(column, present):
                years.append(column)
            if is_number and distinct >= MIN_NUMERIC_DISTINCT:
                numeric.append(column)
            text = is_text(values)
            dated = kinds.get(column) == ColumnKind.DATETIME or text
            if dated and present.astype(str).str.match(ISO_DATE).all():
                dates.append(column)
                continue
            integral = is_number and bool((present == present.round()).all())
            short = present.astype(str).str.len().max() <= MAX_LABEL_CHARS
            if 2 <= distinct <= MAX_GROUPS and short and (text or integral):
                categorical.append(column)
        return cls(
            frame,
            numeric,
            categorical,
            dates,
            years,
            prepared.id_column if prepared and prepared.id_column in frame.columns else None,
        )


def is_text(values: pd.Series) -> bool:
    """A column of texts, whichever string dtype pandas gave it (object, or pandas 3's `str`)."""
    return values.dtype == object or pd.api.types.is_string_dtype(values)


def _is_year(column: str, present: pd.Series) -> bool:
    if not (present == present.round()).all() or present.nunique() < 3:
        return False
    return "year" in column.lower() and bool(present.between(1000, 2200).all())


@dataclass(frozen=True)
class Question:
    """One candidate question: what it asks, how its answer is typed and formatted, and the code answering it."""

    program: str
    params: dict[str, Any]
    text: str
    answer_type: AnswerType
    body: str
    columns: tuple[str, ...]
    decimals: int | None = None
    unit: str | None = None
    order: str | None = None
    answer_in_data: bool = False
    """The answer is a value read off the data (a name, a maximum), not a computed one: it may appear in the
    data files, where a computed answer never should."""

    @property
    def format_note(self) -> str:
        """The answer's type and format, as the question states it."""
        if self.answer_type == "boolean":
            return "true or false (a JSON boolean)"
        if self.answer_type in ("list_exact", "list_approximate"):
            return f"a JSON list of the values as they appear in the data, {self.order}"
        if self.answer_type in ("string_exact", "string_approximate"):
            return "a JSON string: the value exactly as it appears in the data"
        if self.unit == "%":
            return f"a JSON number in percent (12.5 means 12.5%), rounded to {self.decimals} decimal places"
        if self.decimals is not None:
            return f"a JSON number rounded to {self.decimals} decimal places"
        if self.answer_in_data:
            return "a JSON number: the value as it appears in the data"
        return "a JSON integer"


Checks = dict[str, float]


class Program(ABC):
    """A kind of question. Subclasses set `name` and implement `propose`; `problem` judges the run's `checks`."""

    name = ""

    @abstractmethod
    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        """One candidate question on `table` from `rng`'s choices, or None when the table has nothing for it."""

    def problem(self, checks: Checks) -> str | None:
        """Why the answered candidate is degenerate in this program's terms, or None."""
        return None


# --- helpers -------------------------------------------------------------------------------------------


def lit(value: Any) -> str:
    """A Python literal of a value from a frame (numpy scalars made native)."""
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def shown(value: Any) -> str:
    """How a value is written in a question: texts quoted, numbers plain."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}" if abs(value) < 1e15 else repr(value)
    return f'"{value}"' if isinstance(value, str) else f"{value}"


def col(name: str) -> str:
    return f"df[{name!r}]"


def nice_threshold(values: pd.Series, rng: np.random.Generator) -> float | int:
    """A round number between the 20th and 80th percentile of `values` (two significant digits)."""
    quantile = float(values.quantile(rng.uniform(0.2, 0.8)))
    if quantile == 0:
        return 0
    digits = 1 - math.floor(math.log10(abs(quantile)))
    rounded = round(quantile, digits)
    return int(rounded) if float(rounded).is_integer() else float(rounded)


def pick(rng: np.random.Generator, items: list[Any]) -> Any:
    return items[int(rng.integers(len(items)))]


def groups_of(table: Table, column: str) -> pd.Series:
    """Row counts of each value of a categorical column, most frequent first (ties by value text)."""
    counts = table.frame[column].dropna().value_counts()
    return counts.iloc[np.lexsort((counts.index.astype(str), -counts.to_numpy()))]


def frequent_value(table: Table, column: str, rng: np.random.Generator) -> Any | None:
    counts = groups_of(table, column)
    usable = [v for v, n in counts.items() if n >= MIN_GROUP_ROWS]
    return pick(rng, usable) if usable else None


def equals(column: str, value: Any) -> str:
    return f"({col(column)} == {lit(value)})"


# --- programs ------------------------------------------------------------------------------------------


class CountWhere(Program):
    """How many rows pass a numeric threshold or equal a category."""

    name = "count-where"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if table.numeric and (not table.categorical or rng.random() < 0.5):
            column = pick(rng, table.numeric)
            threshold = nice_threshold(table.frame[column].dropna(), rng)
            text = f"How many rows have a `{column}` value greater than {shown(threshold)}?"
            body = f"answer = int(({col(column)} > {lit(threshold)}).sum())"
            params = {"column": column, "op": ">", "value": threshold}
        elif table.categorical:
            column = pick(rng, table.categorical)
            value = frequent_value(table, column, rng)
            if value is None:
                return None
            text = f"How many rows have `{column}` equal to {shown(value)}?"
            body = f"answer = int({equals(column, value)}.sum())"
            params = {"column": column, "op": "==", "value": lit(value)}
        else:
            return None
        body += "\nchecks = {'rows': len(df), 'count': answer}"
        return Question(self.name, params, text, "numeric_exact", body, (params["column"],))

    def problem(self, checks: Checks) -> str | None:
        if checks["count"] == checks["rows"]:
            return "every row passes the filter: the count is the table's length"
        return None


STATS = {
    "mean": ("mean", "mean"),
    "median": ("median", "median"),
    "std": ("sample standard deviation (n - 1 in the denominator)", "std"),
    "sum": ("sum", "sum"),
}


class FilteredStat(Program):
    """A statistic of a numeric column over the rows of one category."""

    name = "filtered-stat"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        if number == group:
            return None
        value = frequent_value(table, group, rng)
        if value is None:
            return None
        stat = pick(rng, list(STATS))
        words, method = STATS[stat]
        decimals = 3
        text = (
            f"What is the {words} of `{number}` over the rows whose `{group}` is {shown(value)}, ignoring "
            f"missing values? Round to {decimals} decimal places."
        )
        body = f"answer = {col(number)}[{equals(group, value)}].{method}()"
        params = {"number": number, "group": group, "value": lit(value), "stat": stat}
        # A median is often a value of the column itself.
        return Question(
            self.name,
            params,
            text,
            "numeric_approximate",
            body,
            (number, group),
            decimals=decimals,
            answer_in_data=stat == "median",
        )


class GroupExtreme(Program):
    """Which category has the highest (or lowest) mean or total of a numeric column."""

    name = "group-argmax"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        if number == group:
            return None
        highest = bool(rng.random() < 0.5)
        how = pick(rng, ["mean", "sum"])
        text = (
            f"Which value of `{group}` has the {'highest' if highest else 'lowest'} "
            f"{'mean' if how == 'mean' else 'total'} `{number}` (missing values ignored)?"
        )
        body = (
            f"stats = df.groupby({group!r})[{number!r}].{how}().sort_values(ascending={not highest})\n"
            "answer = stats.index[0]\n"
            "checks = {'groups': len(stats), 'gap': abs(float(stats.iloc[0] - stats.iloc[1])) "
            "if len(stats) > 1 else 0.0, 'scale': abs(float(stats.iloc[0]))}"
        )
        params = {"number": number, "group": group, "highest": highest, "stat": how}
        return Question(self.name, params, text, "string_exact", body, (number, group), answer_in_data=True)

    def problem(self, checks: Checks) -> str | None:
        if checks["groups"] < 2:
            return "fewer than two groups: nothing to compare"
        if checks["gap"] <= TIE_TOLERANCE * max(1.0, checks["scale"]):
            return "a tie for the top place: two groups share the extreme value"
        return None


class TopK(Program):
    """The k most frequent categories, or the k with the largest mean of a numeric column."""

    name = "top-k"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.categorical:
            return None
        group = pick(rng, table.categorical)
        k = int(rng.integers(2, 4))
        if table.numeric and rng.random() < 0.5:
            number = pick(rng, [c for c in table.numeric if c != group] or [""])
            if not number:
                return None
            text = f"List the {k} values of `{group}` with the largest mean `{number}`, largest first."
            body = f"ranked = df.groupby({group!r})[{number!r}].mean().sort_values(ascending=False)\n"
            columns: tuple[str, ...] = (group, number)
            order = "largest mean first"
        else:
            text = f"List the {k} most frequent values of `{group}` (by number of rows), most frequent first."
            body = f"ranked = {col(group)}.value_counts()\n"
            columns = (group,)
            order = "most frequent first"
        body += (
            f"answer = list(ranked.index[:{k}])\n"
            f"checks = {{'groups': len(ranked), 'gap': float(ranked.iloc[{k - 1}] - ranked.iloc[{k}]) "
            f"if len(ranked) > {k} else 0.0}}"
        )
        params = {"group": group, "k": k, "by": columns[-1]}
        return Question(
            self.name, params, text, "list_exact", body, columns, order=order, answer_in_data=True
        )

    def problem(self, checks: Checks) -> str | None:
        if checks["gap"] <= TIE_TOLERANCE:
            return "a tie at the k-th place: the list is not unique"
        return None


class Share(Program):
    """The percentage of rows in one category."""

    name = "share"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.categorical:
            return None
        group = pick(rng, table.categorical)
        value = frequent_value(table, group, rng)
        if value is None:
            return None
        text = (
            f"What percentage of the rows have `{group}` equal to {shown(value)} (rows with a missing "
            f"`{group}` count in the total)?"
        )
        body = f"answer = 100 * {equals(group, value)}.mean()"
        params = {"group": group, "value": lit(value)}
        return Question(self.name, params, text, "numeric_approximate", body, (group,), decimals=2, unit="%")


class MissingAudit(Program):
    """How many values a column misses, or which columns miss any."""

    name = "missing-audit"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        frame = table.frame
        missing = [c for c in frame.columns if frame[c].isna().any() and c != table.id_column]
        if not missing:
            return None
        if rng.random() < 0.5:
            column = pick(rng, missing)
            text = f"How many values are missing (empty cells) in the column `{column}`?"
            body = f"answer = int({col(column)}.isna().sum())"
            return Question(self.name, {"column": column}, text, "numeric_exact", body, (column,))
        text = "Which columns have at least one missing (empty) value? List them in the order of the file."
        body = "answer = [c for c in df.columns if df[c].isna().any()]"
        return Question(
            self.name,
            {"columns": "any"},
            text,
            "list_exact",
            body,
            tuple(frame.columns),
            order="in the order of the file's columns",
            answer_in_data=True,
        )


class DuplicateAudit(Program):
    """How many rows repeat an earlier row in every column but the id."""

    name = "duplicate-audit"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        drop = [table.id_column] if table.id_column else []
        columns = [c for c in table.frame.columns if c not in drop]
        if len(columns) < 2:
            return None
        besides = f" except `{table.id_column}`" if table.id_column else ""
        text = (
            f"How many rows are exact duplicates of an earlier row in every column{besides}? Count each "
            "repetition, not the first occurrence."
        )
        body = f"answer = int(df.drop(columns={drop!r}).duplicated().sum())"
        return Question(self.name, {"ignore": drop}, text, "numeric_exact", body, tuple(columns))


class Correlation(Program):
    """Pearson's correlation of two numeric columns, or whether it is significant."""

    name = "correlation"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if len(table.numeric) < 2:
            return None
        first, second = (table.numeric[i] for i in rng.choice(len(table.numeric), 2, replace=False))
        pairs = "over the rows where both are present"
        test = bool(rng.random() < 0.4)
        body = (
            "from scipy import stats as _stats\n"
            f"both = df[[{first!r}, {second!r}]].dropna()\n"
            f"r, p = _stats.pearsonr(both[{first!r}], both[{second!r}])\n"
        )
        params = {"first": first, "second": second, "test": test}
        if test:
            text = (
                f"Is the Pearson correlation between `{first}` and `{second}` ({pairs}) significantly different "
                "from zero at the 5% level, by the two-sided test of scipy.stats.pearsonr?"
            )
            body += "answer = bool(p < 0.05)\nchecks = {'p_value': float(p), 'r': float(r), 'test': 1}"
            return Question(self.name, params, text, "boolean", body, (first, second))
        text = (
            f"What is the Pearson correlation coefficient between `{first}` and `{second}` ({pairs})? "
            "Round to 3 decimal places."
        )
        body += "answer = float(r)\nchecks = {'p_value': float(p), 'r': float(r), 'test': 0}"
        return Question(self.name, params, text, "numeric_approximate", body, (first, second), decimals=3)

    def problem(self, checks: Checks) -> str | None:
        r, p = checks["r"], checks["p_value"]
        if not math.isfinite(r):
            return "the correlation is undefined (a constant column)"
        if abs(r) > 1 - 1e-9:
            return "a perfect correlation: one column is a linear function of the other"
        if not checks["test"] and abs(r) < MIN_CORRELATION:
            return "a correlation near 0: its relative error would be meaningless"
        if checks["test"] and P_VALUE_BAND[0] <= p <= P_VALUE_BAND[1]:
            return f"the p-value ({p:.3f}) is too close to the 5% level"
        return None


class CompareGroups(Program):
    """Whether one category's mean exceeds another's."""

    name = "compare-groups"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        values = [v for v, n in groups_of(table, group).items() if n >= MIN_GROUP_ROWS]
        if number == group or len(values) < 2:
            return None
        first, second = (values[i] for i in rng.choice(len(values), 2, replace=False))
        text = (
            f"Is the mean `{number}` of the rows whose `{group}` is {shown(first)} higher than that of the rows "
            f"whose `{group}` is {shown(second)} (missing values ignored)?"
        )
        body = (
            f"a = {col(number)}[{equals(group, first)}].mean()\n"
            f"b = {col(number)}[{equals(group, second)}].mean()\n"
            "answer = bool(a > b)\n"
            "checks = {'gap': abs(float(a - b)), 'scale': max(abs(float(a)), abs(float(b)))}"
        )
        params = {"number": number, "group": group, "first": lit(first), "second": lit(second)}
        return Question(self.name, params, text, "boolean", body, (number, group))

    def problem(self, checks: Checks) -> str | None:
        if not checks["gap"] > MIN_RELATIVE_GAP * checks["scale"]:
            return "the two means are within 1% of each other: the verdict hangs on rounding"
        return None


class DistinctUnder(Program):
    """How many distinct categories occur among rows above a threshold."""

    name = "distinct-count"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        if number == group:
            return None
        threshold = nice_threshold(table.frame[number].dropna(), rng)
        text = (
            f"How many distinct values of `{group}` occur among the rows whose `{number}` is greater than "
            f"{shown(threshold)}? Missing values do not count as a value."
        )
        body = (
            f"answer = int({col(group)}[{col(number)} > {lit(threshold)}].nunique())\n"
            f"checks = {{'all': int({col(group)}.nunique()), 'count': answer}}"
        )
        params = {"number": number, "group": group, "value": threshold}
        return Question(self.name, params, text, "numeric_exact", body, (number, group))

    def problem(self, checks: Checks) -> str | None:
        if checks["count"] == checks["all"]:
            return "every value occurs above the threshold: the count is the column's number of values"
        return None


class ExtremeWhere(Program):
    """The largest or smallest value of a numeric column within one category."""

    name = "extreme-where"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        value = frequent_value(table, group, rng)
        if number == group or value is None:
            return None
        largest = bool(rng.random() < 0.5)
        text = (
            f"What is the {'largest' if largest else 'smallest'} `{number}` among the rows whose `{group}` is "
            f"{shown(value)}?"
        )
        body = f"answer = {col(number)}[{equals(group, value)}].{'max' if largest else 'min'}()"
        params = {"number": number, "group": group, "value": lit(value), "largest": largest}
        return Question(self.name, params, text, "numeric_exact", body, (number, group), answer_in_data=True)


def _periods(table: Table, rng: np.random.Generator) -> tuple[str, str, str] | None:
    """(time column, code giving each row's year, words) for a table with dates or a year column."""
    if table.dates and (not table.years or rng.random() < 0.5):
        column = pick(rng, table.dates)
        return column, f"pd.to_datetime({col(column)}).dt.year", f"whose `{column}` falls in the year"
    if table.years:
        column = pick(rng, table.years)
        return column, col(column), f"whose `{column}` is"
    return None


def _year_counts(table: Table, column: str, is_date: bool) -> pd.Series:
    values = table.frame[column].dropna()
    years = pd.to_datetime(values).dt.year if is_date else values.astype(int)
    counts = years.value_counts().sort_index()
    return counts[counts >= MIN_GROUP_ROWS]


class YearStat(Program):
    """The mean of a numeric column in one year (a time window)."""

    name = "time-window"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        periods = _periods(table, rng)
        numbers = [c for c in table.numeric if periods and c != periods[0]]
        if periods is None or not numbers:
            return None
        column, year_code, words = periods
        counts = _year_counts(table, column, column in table.dates)
        if counts.empty:
            return None
        year, number = int(pick(rng, list(counts.index))), pick(rng, numbers)
        text = (
            f"What is the mean `{number}` over the rows {words} {year}, ignoring missing values? "
            "Round to 3 decimal places."
        )
        body = f"year = {year_code}\nanswer = {col(number)}[year == {year}].mean()"
        params = {"number": number, "time": column, "year": year}
        return Question(self.name, params, text, "numeric_approximate", body, (number, column), decimals=3)


class Growth(Program):
    """The percentage change of a yearly mean between two years."""

    name = "growth-rate"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        periods = _periods(table, rng)
        numbers = [c for c in table.numeric if periods and c != periods[0]]
        if periods is None or not numbers:
            return None
        column, year_code, words = periods
        counts = _year_counts(table, column, column in table.dates)
        if len(counts) < 2:
            return None
        first, second = sorted(int(counts.index[i]) for i in rng.choice(len(counts), 2, replace=False))
        number = pick(rng, numbers)
        text = (
            f"By what percentage did the mean `{number}` change from the rows {words} {first} to the rows "
            f"{words} {second}? Compute 100 * (mean in {second} - mean in {first}) / mean in {first}, ignoring "
            "missing values; a fall is negative."
        )
        body = (
            f"year = {year_code}\n"
            f"before = {col(number)}[year == {first}].mean()\n"
            f"after = {col(number)}[year == {second}].mean()\n"
            "answer = 100 * (after - before) / before\n"
            "checks = {'base': abs(float(before))}"
        )
        params = {"number": number, "time": column, "from": first, "to": second}
        return Question(
            self.name, params, text, "numeric_approximate", body, (number, column), decimals=2, unit="%"
        )

    def problem(self, checks: Checks) -> str | None:
        if not checks["base"] > 1e-9:
            return "the first year's mean is 0: the percentage change is undefined"
        return None


PROGRAMS: dict[str, Program] = {
    p.name: p
    for p in (
        CountWhere(),
        FilteredStat(),
        GroupExtreme(),
        TopK(),
        Share(),
        MissingAudit(),
        DuplicateAudit(),
        Correlation(),
        CompareGroups(),
        DistinctUnder(),
        ExtremeWhere(),
        YearStat(),
        Growth(),
    )
}
