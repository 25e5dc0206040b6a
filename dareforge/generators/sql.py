"""DuckDB SQL for the prepare engine: quoting, column types and how they widen, a loaded column (`Column`),
seeded hashing for splits, and timing of steps."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


INTEGER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER"}
INTEGER_TYPES |= {"UBIGINT", "UHUGEINT"}


FLOAT_TYPES = {"FLOAT", "DOUBLE", "REAL"}


DATETIME_TYPES = {"DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_S", "TIMESTAMP_MS"}
DATETIME_TYPES |= {"TIMESTAMP_NS", "TIMESTAMP_TZ"}


UTC_OFFSET = r"[+-]\d{2}:?\d{2}$"
"""A time axis written with a UTC offset (`%z`) is read as the wall-clock time its text shows, the offset
dropped: a stock table's `2002-05-23 00:00:00-04:00` is the trading day 2002-05-23 wherever the reader is
(converted to UTC, a +09:00 midnight would fall on the day before)."""


FALLBACK = {"DATE": "TIMESTAMP"}
"""A sniffed type that fails on some row is widened: integers to DOUBLE, DATE to TIMESTAMP, else VARCHAR."""


def sql_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def is_numeric(dtype: str) -> bool:
    return dtype in INTEGER_TYPES or dtype in FLOAT_TYPES or dtype.startswith("DECIMAL")


def is_datetime(dtype: str) -> bool:
    return dtype in DATETIME_TYPES


def widen(dtype: str) -> str:
    if dtype in INTEGER_TYPES:
        return "DOUBLE"
    return FALLBACK.get(dtype, "VARCHAR")


@dataclass
class Column:
    name: str
    stored: str
    """Its type in the scratch table (VARCHAR for every CSV column)."""
    dtype: str
    """Its value type: the stored type, or for CSV text the sniffed type every row casts to."""
    tried_timestamp: bool = False

    @property
    def typed(self) -> str:
        """SQL for the column's values in `dtype`."""
        if self.stored == "VARCHAR" and self.dtype != "VARCHAR":
            return f"TRY_CAST({sql_ident(self.name)} AS {self.dtype})"
        if is_numeric(self.dtype) or is_datetime(self.dtype) or self.dtype in ("VARCHAR", "BOOLEAN"):
            return sql_ident(self.name)
        return f"CAST({sql_ident(self.name)} AS VARCHAR)"  # nested Parquet types: measured as text

    @property
    def text(self) -> str:
        """SQL for the column's values as text (as written in the source for CSV)."""
        return (
            sql_ident(self.name) if self.stored == "VARCHAR" else f"CAST({sql_ident(self.name)} AS VARCHAR)"
        )


@contextmanager
def timed(source_id: str, step: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    log.debug("%s: %s took %.2fs", source_id, step, time.perf_counter() - started)


def seeded_hash(seed: int, text_sql: str) -> str:
    """A stable 60-bit number from md5 of the seed and a text (md5, unlike DuckDB's hash(), never changes)."""
    return f"CAST('0x' || left(md5({sql_text(f'{seed}:')} || {text_sql}), 15) AS BIGINT)"


def finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None
