"""Columns withheld from every framing of a source and from its files: a competition's outcomes and the columns
`sources.<id>.exclude` names, each with the reason a framing records (`Proposal.withheld`)."""

from __future__ import annotations

from dareforge.config import SourceOverride
from dareforge.crawlers.inspect import competition_files
from dareforge.errors import DareforgeError
from dareforge.schema import Source
from dareforge.understand.columns import Sample


def outcomes(source: Source, sample: Sample) -> dict[str, str]:
    """A competition's train columns that its test file lacks (other than the targets): outcomes."""
    found = competition_files(source.files)
    if found.train is None or found.train.name != sample.file:
        return {}
    why = f"an outcome: {found.test.name if found.test else 'the test file'} lacks it, so it is known only afterwards"
    return {c: why for c in found.outcomes if sample.column(c) is not None}


def configured_exclusions(source: Source, sample: Sample, override: SourceOverride | None) -> dict[str, str]:
    """The columns `sources.<id>.exclude` names, each with the setting as its reason; a name the table lacks
    is an error naming the fix."""
    names = override.exclude if override else []
    missing = [n for n in names if sample.column(n) is None]
    if missing:
        shown = ", ".join(c.name for c in sample.columns[:30])
        raise DareforgeError(
            f"sources.{source.id}.exclude names {missing}, which {sample.file} lacks (columns: {shown}); fix "
            f"sources.{source.id}.exclude"
        )
    return dict.fromkeys(names, f"sources.{source.id}.exclude in dareforge.yaml leaves it out")
