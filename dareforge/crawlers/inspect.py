"""Identify the target of a source from explicit facts (the config, the crawler, a sample submission)."""

from __future__ import annotations

import re
from pathlib import Path

from dareforge.schema import Source, SourceFile

SAMPLE_SUBMISSION = re.compile(r"sample_?submission|submission_?(format|sample|example)", re.IGNORECASE)


def identify_target(
    source: Source, files: list[SourceFile], override: list[str] | None
) -> tuple[list[str], str | None]:
    """(target columns, id column) from explicit facts only: the config, the crawler's own record, a
    competition's sample submission. Everything else (names, descriptions, the data) is the understand
    stage's job; empty targets leave it to that stage."""
    if override:
        return override, source.id_column
    if source.target_columns:
        return source.target_columns, source.id_column
    tables = [f for f in files if f.columns]
    samples = [f for f in tables if SAMPLE_SUBMISSION.search(Path(f.name).stem)]
    if samples:
        # A competition's sample submission names the id column first and the targets after it.
        header = samples[0].columns or []
        train_columns = {c for f in tables if f not in samples for c in f.columns or []}
        targets = [c for c in header[1:] if c in train_columns] or header[1:]
        return targets, header[0] if header else None
    return [], source.id_column
