"""Upper bounds of the config's limits (`dareforge.config`).

Every limit has one, so a typo (or a hostile file) is refused at load, in one line naming the key and where it
was set, instead of crashing every kernel later (bubblewrap refuses a 1e20 MB tmpfs; setrlimit overflows).
"""

from __future__ import annotations

import os
import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Share = Annotated[float, Field(ge=0, le=1)]
"""A fraction of something: 0 (none) to 1 (all)."""


class Section(BaseModel):
    """A part of the config: an unknown key is an error (a typo must not pass silently)."""

    model_config = ConfigDict(extra="forbid")


PHYSICAL_MB = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024**2
"""This machine's physical memory: no memory limit may be more (a tmpfs workspace is memory too)."""
DAY_S = 86_400
SQL_MAX_TIMEOUT_S = 3600
MAX_DISK_BYTES = 1000**5
"""1 PB: more disk than a run may use."""
MemoryMB = Annotated[int, Field(gt=0, le=PHYSICAL_MB)]
Seconds = Annotated[float, Field(gt=0, le=DAY_S)]
"""A time limit or a wait: more than 0, at most a day."""
CpuSeconds = Annotated[int, Field(gt=0, le=DAY_S)]
Wait = Annotated[float, Field(ge=0, le=DAY_S)]
DiskBytes = Annotated[int, Field(gt=0, le=MAX_DISK_BYTES)]
Workers = Annotated[int, Field(gt=0, le=1024)]
"""Processes, threads or concurrent requests."""
Retries = Annotated[int, Field(ge=0, le=100)]
Tokens = Annotated[int, Field(gt=0, le=1_000_000)]
Count = Annotated[int, Field(gt=0, le=1_000_000)]
"""How many of something a stage makes or reads per item (pages, rows sampled, attempts...)."""
Some = Annotated[int, Field(ge=0, le=1_000_000)]
"""As `Count`, where 0 means none."""
MEMORY_TEXT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT])(i?)B\s*", re.IGNORECASE)


def _memory_text(text: str) -> str:
    """A DuckDB memory size ("512MB", "2GiB") that is no more than the machine's physical memory."""
    match = MEMORY_TEXT.fullmatch(text)
    if match is None:
        raise ValueError("expected a size such as 512MB or 2GB")
    number, unit, binary = match.groups()
    size = float(number) * (1024 if binary else 1000) ** (" KMGT".index(unit.upper()))
    if size > PHYSICAL_MB * 1024**2:
        raise ValueError(f"more than this machine's physical memory ({PHYSICAL_MB} MB)")
    return text


MemoryText = Annotated[str, AfterValidator(_memory_text)]

BOUND_WHY = {PHYSICAL_MB: "this machine's physical memory in MB", DAY_S: "a day in seconds"}
"""What an upper bound stands for, where its number alone does not say."""
