"""The Arrow schema of a pydantic model, field by field: what the store writes a record table's Parquet with."""

from __future__ import annotations

import types
import typing
from datetime import date, datetime
from functools import cache
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel


@cache
def arrow_schema_of(cls: type[BaseModel]) -> pa.Schema:
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
