"""What the data says about each column of a sampled table: type, cardinality, missing values, position, and
whether it looks like an id, a constant, free text or a number. Computed once per source on the text sample
the stage reads, so every later step (time axes, candidates, checks) shares it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd
import pyarrow as pa

from dareforge.generators.rawtable import MISSING_MARKERS
from dareforge.reference_solutions.leaks import encode_column

ID_NAME = re.compile(
    r"(?i)^(id|rownames|index|row|row_?num(ber)?|unnamed: ?0|key|uuid|guid)$|[ _.-]id$|[a-z0-9](Id|ID)$"
)
TEXT_MIN_LENGTH = 20
NUMERIC_SHARE = 0.98
"""A column counts as numeric when this share of its values parse as numbers (stray 'NA', '?' tolerated)."""


@dataclass(frozen=True)
class Column:
    name: str
    position: int
    text: pd.Series
    """The sampled values as text; missing values (and common markers such as 'NA' or '?') are None."""

    @cached_property
    def nonnull(self) -> int:
        return int(self.text.notna().sum())

    @cached_property
    def distinct(self) -> int:
        return int(self.text.nunique(dropna=True))

    @cached_property
    def numbers(self) -> pd.Series:
        """The values as floats (NaN where they do not parse)."""
        return pd.to_numeric(self.text, errors="coerce")

    @cached_property
    def numeric(self) -> bool:
        parsed = int(self.numbers.notna().sum())
        return self.nonnull > 0 and parsed >= NUMERIC_SHARE * self.nonnull

    @cached_property
    def codes(self) -> np.ndarray:
        """The column as a one-feature tree input (numbers, or text codes in natural order), computed once per
        source for every candidate's leak check."""
        return encode_column(self.numbers if self.numeric else self.text)

    @cached_property
    def integral(self) -> bool:
        values = self.numbers.dropna().to_numpy()
        return self.numeric and bool(np.all(np.isfinite(values)) and np.all(values == np.round(values)))

    @cached_property
    def avg_length(self) -> float:
        lengths = self.text.dropna().str.len()
        return float(lengths.mean()) if len(lengths) else 0.0

    @property
    def missing_share(self) -> float:
        return 1 - self.nonnull / len(self.text) if len(self.text) else 1.0

    @property
    def constant(self) -> bool:
        return self.distinct <= 1

    @property
    def unique(self) -> bool:
        return self.nonnull == len(self.text) and self.distinct == self.nonnull

    @cached_property
    def sequential(self) -> bool:
        """Integers that number the rows (1..n or any run of consecutive values)."""
        if not (self.integral and self.unique):
            return False
        values = np.sort(self.numbers.to_numpy())
        return bool(len(values) > 1 and np.all(np.diff(values) == 1))

    @property
    def text_like(self) -> bool:
        """Free text: long values, most of them different."""
        return (
            not self.numeric
            and self.avg_length >= TEXT_MIN_LENGTH
            and self.distinct >= max(10, 0.5 * self.nonnull)
        )

    @property
    def id_like(self) -> bool:
        """A row key: unique, and named like an id, numbering the rows, or unique text that is not prose."""
        if not self.unique:
            return False
        if ID_NAME.search(self.name.strip()) or self.sequential:
            return True
        return not self.numeric and not self.text_like and self.avg_length < TEXT_MIN_LENGTH

    def classes(self, max_classes: int) -> int | None:
        """Number of classes when the column reads as a label (text, or few integer values), else None."""
        if not self.numeric:
            return self.distinct if 2 <= self.distinct <= max(max_classes, 50) else None
        if self.integral and 2 <= self.distinct <= max_classes:
            return self.distinct
        return None

    def describe(self) -> str:
        kind = "numeric" if self.numeric else ("text" if self.text_like else "categorical")
        examples = ", ".join(map(str, self.text.dropna().unique()[:3]))
        return f"{self.name} ({kind}, {self.distinct} distinct, {self.missing_share:.0%} missing; e.g. {examples})"


@dataclass(frozen=True)
class Sample:
    """A sampled table: its columns in file order and the row count of the whole table."""

    file: str
    columns: list[Column]
    total_rows: int

    @classmethod
    def from_arrow(cls, file: str, table: pa.Table, total_rows: int) -> Sample:
        import pyarrow.compute as pc

        markers = pa.array(sorted(MISSING_MARKERS))
        columns = []
        for i, name in enumerate(table.column_names):
            values = table.column(i)
            missing = pc.is_in(pc.utf8_lower(pc.utf8_trim_whitespace(values)), value_set=markers)
            cleaned = pc.if_else(pc.fill_null(missing, False), pa.scalar(None, pa.string()), values)
            text = pd.Series(cleaned.to_numpy(zero_copy_only=False), dtype=object)
            columns.append(Column(name=name, position=i, text=text.where(text.notna(), None)))
        return cls(file=file, columns=columns, total_rows=total_rows)

    @property
    def rows(self) -> int:
        return len(self.columns[0].text) if self.columns else 0

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)
