"""What every question program works with: the `Table` it reads (the frame and its usable columns), the
`Question` it proposes, the `Program` base it implements, and the helpers that draw values from a table and write
them into a question's text and code (Python literals, never pasted text)."""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from dareforge.generators.questions.scripts import Step
from dareforge.generators.rawtable import is_missing_marker
from dareforge.generators.table_split import ROW_ID
from dareforge.schema import AnswerType, ColumnKind, PreparedSource

MAX_GROUPS = 30
MAX_LABEL_CHARS = 40
MIN_NUMERIC_DISTINCT = 5
MIN_GROUP_ROWS = 3
MIN_KEPT_ROWS = MIN_GROUP_ROWS
"""The fewest rows a question's filter may keep, and the fewest values a statistic over them may have: the
smallest group a program draws a category from (`MIN_GROUP_ROWS`), so a filter is held to what a group is."""
MIN_EXTREME_VALUES = 5
"""The fewest values a group named by an extreme (the group with the highest mean, the top k by mean, the two
ends of a gap) may have, and the fewest most groups must have. A mean or total over one or two values swings with
one row, and among many thin groups the extreme is mostly the thinnest one (the winner's curse): "which group has
the lowest mean" over 2,000 rows then names a value seen once, a fact about one row, not about the groups. Five
keeps the small builtin tables (100-150 rows in a handful of groups) askable."""
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")
"""A date with its time of day and perhaps its offset from UTC (`2024-01-11 12:00:00+00:00`), as loggers and
price feeds write it: a date column as much as a bare date is."""
WORD = re.compile(r"[^\W\d_]{3,}")
"""A word of a free-text column that a question may look for: three letters or more."""
NUMBERED_IDS = (ROW_ID, f"__{ROW_ID}")
"""The ids prepare numbers rows with where a source has none: no column of the source, so no key a question
names a row by ("which `row_id` holds the largest price" asks about prepare's numbering)."""
MAX_WORD_SHARE = 0.9
"""A word in more of the rows than this is the column's boilerplate (`CUST` of every id), not a filter."""


@dataclass(frozen=True)
class Table:
    """A table as question programs see it: the frame (read as pandas reads the file) and its usable columns."""

    frame: pd.DataFrame
    numeric: list[str]
    categorical: list[str]
    dates: list[str] = field(default_factory=list)
    years: list[str] = field(default_factory=list)
    id_column: str | None = None
    markers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Per text column, the cells as written that mark a missing value (`MISSING_MARKERS`: `Unknown`, `-`, `?`)
    though pandas reads them as text: missing in `frame`, and named by every question on the column."""
    texts: list[str] = field(default_factory=list)
    """Free-text columns (names, descriptions, lists): too many distinct values to group by, each value its own
    row's, searched by a word they contain."""
    keys: list[str] = field(default_factory=list)
    """Columns naming each row once (the framing's id, or a text column of distinct codes without spaces, as
    `P951`): a question asks which row an extreme belongs to by them."""
    utc: tuple[str, ...] = ()
    """Date columns whose rows carry different UTC offsets (summer and winter time): pandas reads them only as
    UTC, and a column is a date column only where every row's year and month as written survive that."""

    @classmethod
    def of(cls, frame: pd.DataFrame, prepared: PreparedSource | None = None) -> Table:
        """Usable columns of `frame`: never the id or a framing's excluded column; numbers with enough distinct
        values; categories (booleans among them) with 2..30 short values; ISO dates, with or without a time of
        day; integer year columns; free text; row keys. Missing-value markers in a text column are missing
        values first (`markers`)."""
        frame, markers = _unmarked(frame)
        kinds = {c.name: c.kind for c in prepared.columns} if prepared else {}
        id_column = prepared.id_column if prepared and prepared.id_column in frame.columns else None
        skip = {prepared.id_column, *prepared.excluded_columns} if prepared else set()
        numeric, categorical, dates, years, texts, keys, utc = [], [], [], [], [], [], []
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
            reading = _date_reading(present) if dated else None
            if reading is not None:
                dates.append(column)
                utc += [column] if reading == "utc" else []
                continue
            integral = is_number and bool((present == present.round()).all())
            boolean = pd.api.types.is_bool_dtype(values)
            short = present.astype(str).str.len().max() <= MAX_LABEL_CHARS
            # Text whose every value is its own row's is no category, however few rows the table has.
            singular = text and distinct == len(present)
            if 2 <= distinct <= MAX_GROUPS and short and (text or integral or boolean) and not singular:
                categorical.append(column)
            elif singular and short and not present.astype(str).str.contains(r"\s").any():
                keys.append(column)
            elif text and (distinct > MAX_GROUPS or not short or singular):
                texts.append(column)
        return cls(
            frame,
            numeric,
            categorical,
            dates,
            years,
            id_column,
            markers,
            texts,
            ([id_column] if id_column and id_column not in NUMBERED_IDS else []) + keys,
            tuple(utc),
        )

    def kinds(self) -> set[str]:
        """The kinds of column few programs read, that this table holds: `time` (dates or years), `text` (free
        text) and `key` (row keys, asked beside a number and a category)."""
        found = {"time"} if self.dates or self.years else set()
        found |= {"text"} if self.texts else set()
        found |= {"key"} if self.keys and self.numeric and self.categorical else set()
        return found

    def when(self, column: str) -> str:
        """Code reading the date column `column` of `df` as datetimes (what every question on it writes)."""
        return f"pd.to_datetime({col(column)}{', utc=True' if column in self.utc else ''})"

    def parsed(self, column: str) -> pd.Series:
        """The date column `column` as `when`'s code reads it."""
        return pd.to_datetime(self.frame[column], utc=column in self.utc)


def _date_reading(present: pd.Series) -> str | None:
    """How a column of written dates reads as datetimes: "local" (as pandas reads it), "utc" (rows in several
    UTC offsets, read as UTC, where every row keeps the year and month it is written in), or None (no dates)."""
    written = present.astype(str)
    if written.str.match(ISO_DATE).all():
        return "local"
    if not written.str.match(ISO_TIME).all():
        return None
    try:
        pd.to_datetime(written)
        return "local"
    except ValueError:  # several UTC offsets: pandas reads them only as UTC
        pass
    try:
        months = pd.to_datetime(written, utc=True).dt.strftime("%Y-%m")
    except ValueError:
        return None
    return "utc" if bool((months == written.str[:7]).all()) else None


def words_of(values: pd.Series) -> pd.Series:
    """Per word of a free-text column, how many rows contain it (at least `MIN_GROUP_ROWS`, at most
    `MAX_WORD_SHARE` of the rows), most common first (ties by the word): the words a question may look for."""
    present = values.dropna().astype(str)
    counts = pd.Series(
        [w for text in present for w in sorted(set(WORD.findall(text)))], dtype=object
    ).value_counts()
    counts = counts[(counts >= MIN_GROUP_ROWS) & (counts <= MAX_WORD_SHARE * len(present))]
    return counts.iloc[np.lexsort((counts.index.astype(str), -counts.to_numpy()))]


def _unmarked(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, tuple[str, ...]]]:
    """`frame` with the missing-value markers of its text columns made missing, and the markers per column."""
    markers: dict[str, tuple[str, ...]] = {}
    for column in frame.columns:
        if is_text(frame[column]) and (hit := is_missing_marker(frame[column])).any():
            markers[column] = tuple(sorted(frame[column][hit].astype(str).unique()))
    if not markers:
        return frame, markers
    return frame.assign(**{c: frame[c].mask(frame[c].isin(v)) for c, v in markers.items()}), markers


def is_text(values: pd.Series) -> bool:
    """A column of texts, whichever string dtype pandas gave it (object, or pandas 3's `str`)."""
    return values.dtype == object or pd.api.types.is_string_dtype(values)


def _is_year(column: str, present: pd.Series) -> bool:
    if not (present == present.round()).all() or present.nunique() < 3:
        return False
    return "year" in column.lower() and bool(present.between(1000, 2200).all())


@dataclass(frozen=True)
class SubQuestion:
    """A key intermediate result of a question's pipeline, asked on its own (a sub-task): its text, and the
    code that computes it from `df` as the main body does."""

    text: str
    step: Step
    answer_in_data: bool = False
    note: str | None = None
    """How the answer is written, when the answer type's own format note does not say it."""


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
    steps: tuple[SubQuestion, ...] = ()
    """The pipeline's key intermediate results, each a sub-task with its own certified answer."""

    @property
    def format_note(self) -> str:
        """The answer's type and format, as the question states it."""
        return format_note(self.answer_type, self.decimals, self.unit, self.order, self.answer_in_data)


OPERATIONS = (
    "filter",
    "derive",
    "group-aggregate",
    "aggregate",
    "rank",
    "compare",
    "combine",
    "join",
    "clean",
)
"""The operations a question task is made of. A statistic over groups is one `group-aggregate`; choosing
the top one of them is a further `rank`; a difference or change between two results is a `compare`; a new
column computed per row is a `derive`. A Lake task's files first need to `combine` (parts) or `join` (two
tables), and `clean`."""


def format_note(
    answer_type: AnswerType,
    decimals: int | None = None,
    unit: str | None = None,
    order: str | None = None,
    answer_in_data: bool = False,
) -> str:
    """An answer's type and format, as a question states it."""
    if answer_type == "boolean":
        return "true or false (a JSON boolean)"
    if answer_type in ("list_exact", "list_approximate"):
        return f"a JSON list of the values as they appear in the data, {order}"
    if answer_type in ("string_exact", "string_approximate"):
        return "a JSON string: the value exactly as it appears in the data"
    if unit == "%":
        return f"a JSON number in percent (12.5 means 12.5%), rounded to {decimals} decimal places"
    if decimals is not None:
        return f"a JSON number rounded to {decimals} decimal places"
    if answer_in_data:
        return "a JSON number: the value as it appears in the data"
    return "a JSON integer"


Checks = dict[str, float]


class Program(ABC):
    """A kind of question. Subclasses set `name` and `operations` (what every question of the kind does, in
    order, from `OPERATIONS`: their number sets the question's tier) and implement `propose`; `problem` judges
    the run's `checks`."""

    name = ""
    operations: tuple[str, ...] = ()
    kind: str | None = None
    """The kind of column (`Table.kinds`) this program is one of the few to ask about: a table holding such a
    column gets a question of one of them beyond `generate.qa_per_source` (`table_questions.kind_questions`)."""

    @abstractmethod
    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        """One candidate question on `table` from `rng`'s choices, or None when the table has nothing for it."""

    def problem(self, checks: Checks) -> str | None:
        """Why the answered candidate is degenerate in this program's terms, or None."""
        return None

    def draw(self, table: Table, rng: np.random.Generator) -> Question | None:
        """`propose`, with the table's missing-value markers stated and applied (`with_markers`): what the
        builders ask."""
        question = self.propose(table, rng)
        return None if question is None else with_markers(question, table)


def with_markers(question: Question, table: Table) -> Question:
    """`question` where the columns it reads hold missing-value markers (`Table.markers`): its text and each
    sub-question's name the markers as missing values, and its code (main and sub-questions) makes them
    missing before anything else, so the text and the reference agree on what "missing" is."""
    marked = {c: list(table.markers[c]) for c in question.columns if c in table.markers}
    if not marked:
        return question
    rule = " ".join(
        f"In `{column}`, {' and '.join(json.dumps(v) for v in values)} "
        f"{'marks' if len(values) == 1 else 'mark'} a missing value, like an empty cell."
        for column, values in marked.items()
    )
    code = (
        f"markers = {marked!r}  # missing-value markers, as the question states\n"
        "df = df.assign(**{c: df[c].mask(df[c].isin(v)) for c, v in markers.items()})\n"
    )
    steps = tuple(
        replace(sub, text=f"{sub.text} {rule}", step=replace(sub.step, body=code + sub.step.body))
        for sub in question.steps
    )
    return replace(question, text=f"{question.text} {rule}", body=code + question.body, steps=steps)


# --- what makes a filter or an extreme a question (`shared_problem`) ------------------------------------

FILTER_CHECK = "filter"
EXTREME_CHECK = "extreme"


def filter_checks(mask: str, column: str, values: str | None = None, name: str = FILTER_CHECK) -> str:
    """Code recording a filter for `shared_problem`, run after the body: the rows it judges (its `column`
    present), the rows its `mask` keeps, and, for a statistic over them, the values `values` (a Series) holds."""
    lines = [
        f"checks[{f'{name}:judged'!r}] = int({col(column)}.notna().sum())",
        f"checks[{f'{name}:kept'!r}] = int(({mask}).sum())",
    ]
    if values is not None:
        lines.append(f"checks[{f'{name}:values'!r}] = int(({values}).notna().sum())")
    return "\n".join(lines)


def extreme_checks(sizes: str, named: str) -> str:
    """Code recording an extreme for `shared_problem`, run after the body: `sizes` is a Series of each group's
    number of values (a groupby's count), `named` the groups the answer names (a list)."""
    return (
        f"_sizes = {sizes}\n_sizes = _sizes[_sizes > 0]\n"
        f"checks[{f'{EXTREME_CHECK}:named'!r}] = int(min((_sizes.get(g, 0) for g in ({named})), default=0))\n"
        f"checks[{f'{EXTREME_CHECK}:thin'!r}] = float((_sizes < {MIN_EXTREME_VALUES}).mean())"
    )


def shared_problem(checks: Checks) -> str | None:
    """Why a filter or an extreme recorded by `filter_checks` / `extreme_checks` asks nothing, or None.

    A filter must remove rows: one that keeps every row it judges ("in 2025" on a table of 2025 alone) is no
    step, and one that keeps fewer than `MIN_KEPT_ROWS` rows (or values) leaves a statistic of one or two rows.
    An extreme must be decided by groups with values: the groups it names hold `MIN_EXTREME_VALUES` values or
    more, and so do most groups."""
    filters = sorted({key.split(":")[0] for key in checks if key.endswith(":kept")})
    for name in filters:
        kept, judged = checks[f"{name}:kept"], checks[f"{name}:judged"]
        values = checks.get(f"{name}:values", kept)
        if kept >= judged:
            return f"the filter keeps every row that has a value ({kept:g} of {judged:g}): it removes nothing"
        if min(kept, values) < MIN_KEPT_ROWS:
            return (
                f"the filter keeps {kept:g} row(s) with {values:g} value(s), fewer than {MIN_KEPT_ROWS}: "
                "a statistic of one or two rows"
            )
    if f"{EXTREME_CHECK}:named" in checks:
        named, thin = checks[f"{EXTREME_CHECK}:named"], checks[f"{EXTREME_CHECK}:thin"]
        if named < MIN_EXTREME_VALUES:
            return (
                f"the extreme is decided by a group of {named:g} value(s), fewer than {MIN_EXTREME_VALUES}: "
                "a value seen (nearly) once"
            )
        if thin > 0.5:
            return (
                f"{thin:.0%} of the groups hold fewer than {MIN_EXTREME_VALUES} values: the extreme is noise"
            )
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
