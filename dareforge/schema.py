"""The records every stage reads and writes, and their Arrow schemas (derived here, so each is defined once)."""

from __future__ import annotations

import types
import typing
from datetime import UTC, date, datetime
from enum import StrEnum
from functools import cache
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator


class Origin(StrEnum):
    KAGGLE_COMPETITION = "kaggle-competition"
    KAGGLE_DATASET = "kaggle-dataset"
    MIRROR = "mirror"
    BUILTIN = "builtin"


class SourceStatus(StrEnum):
    OK = "ok"
    NEEDS_RULES = "needs-rules"
    FAILED = "failed"


class Record(BaseModel):
    """A row of a store table; `table` names the table, `key_field` the column that partitions it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    table: ClassVar[str]

    @classmethod
    def arrow_schema(cls) -> pa.Schema:
        return _schema_of(cls)


class SourceFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Path relative to the source's file root, with forward slashes.")
    size: int
    sha256: str
    encoding: str | None = Field(
        None, description="Text encoding of a table file; 'undecodable' when unknown."
    )
    columns: list[str] | None = Field(None, description="Header of a CSV/TSV table.")
    rows: int | None = Field(None, description="Data lines of a text table (quoted line breaks count extra).")


class LeaderboardEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    team: str
    score: str = Field(description="As the competition reports it (text: metrics differ in form).")
    submitted: datetime | None = None


class Source(Record):
    table: ClassVar[str] = "sources"

    id: str = Field(description="Stable id: '<origin>.<slug>', safe as a path component.")
    origin: Origin
    kind: Literal["competition", "dataset"]
    ref: str = Field(description="The origin's own reference (Kaggle slug, owner/name, package:name).")
    title: str
    description: str = ""
    category: str | None = None
    url: str | None = None
    deadline: datetime | None = None
    last_updated: datetime | None = None
    evaluation_metric: str | None = None
    license: str | None = None
    total_bytes: int = 0
    files: list[SourceFile] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    team_count: int | None = None
    has_leaderboard: bool | None = None
    leaderboard: list[LeaderboardEntry] = Field(
        default_factory=list, description="Top public leaderboard rows."
    )
    accepts_submissions: bool | None = None
    n_rows: int | None = None
    target_columns: list[str] = Field(default_factory=list)
    id_column: str | None = None
    time_column: str | None = None
    entity_column: str | None = Field(None, description="Series key of a panel (one series per value).")
    task_hint: str | None = Field(None, description="classification, regression or time-series, when known.")
    origin_package: str | None = Field(None, description="For builtin sources: the package and version.")
    version: str = Field(
        description="Fingerprint of what defines the source's data; a change means re-download."
    )
    raw_version: str | None = Field(
        None, description="Version of the files held in the store (may lag on failure)."
    )
    status: SourceStatus = SourceStatus.OK
    status_detail: str | None = None
    rules_url: str | None = None

    @field_validator("deadline", "last_updated")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        # Kaggle sends naive UTC timestamps; Arrow columns are tz-aware, so make every value comparable.
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @property
    def tables(self) -> list[SourceFile]:
        return [f for f in self.files if f.columns is not None]


class FilterDecision(Record):
    table: ClassVar[str] = "filter_decisions"

    source_id: str
    source_version: str
    rule: str
    kept: bool
    reason: str
    measured: str | None = None
    rules_fingerprint: str


@cache
def _schema_of(cls: type[BaseModel]) -> pa.Schema:
    return pa.schema([pa.field(name, *_arrow_type(f.annotation)) for name, f in cls.model_fields.items()])


def _arrow_type(annotation: Any) -> tuple[pa.DataType, bool]:
    """Map a field annotation to (arrow type, nullable)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner, _ = _arrow_type(args[0])
        return inner, True
    if origin is list:
        (item,) = typing.get_args(annotation)
        inner, _ = _arrow_type(item)
        return pa.list_(inner), False
    if origin is Literal:
        return pa.string(), False
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            fields = [pa.field(n, *_arrow_type(f.annotation)) for n, f in annotation.model_fields.items()]
            return pa.struct(fields), False
        scalar = {
            bool: pa.bool_(),
            int: pa.int64(),
            float: pa.float64(),
            str: pa.string(),
            datetime: pa.timestamp("us", tz="UTC"),
            date: pa.date32(),
        }
        for py_type, arrow in scalar.items():
            if issubclass(annotation, py_type):
                return arrow, False
    raise TypeError(f"no Arrow type for annotation {annotation!r}")


RECORDS: dict[str, type[Record]] = {cls.table: cls for cls in (Source, FilterDecision)}
