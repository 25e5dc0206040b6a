"""Rule filter: every rule judges every source and says why, so an auditor can ask about any drop.

A rule is a small object with a `name` and a `check(source, config)` that returns a RuleOutcome: kept or not, a
reason a person can act on, and the measured value the threshold was applied to. A source is accepted when
every rule keeps it. Rules come from the DSGym paper's source filter, plus our own (readable tables). Whether a
source holds a task at all (its target, its time axis) is the understand stage's verdict, not a rule's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import PurePosixPath
from typing import Protocol

from dareforge.config import Config
from dareforge.crawlers.documents import derived_names
from dareforge.crawlers.inspect import SAMPLE_SUBMISSION, competition_files
from dareforge.describe import BINARY, TEXT_TABLES, UNDECODABLE, is_binary, unread, unread_notes
from dareforge.errors import ConfigError
from dareforge.schema import Source, SourceStatus

NOT_A_COMPETITION = "not a competition: the task defines its own CSV predictions"


@dataclass(frozen=True)
class RuleOutcome:
    kept: bool
    reason: str
    measured: str | None = None


class Rule(Protocol):
    name: str

    def check(self, source: Source, config: Config) -> RuleOutcome: ...


class Fetched(Rule):
    name = "fetched"

    def check(self, source, config):
        if source.status == SourceStatus.OK:
            return RuleOutcome(True, f"{len(source.files)} files stored", source.status.value)
        if source.status == SourceStatus.NEEDS_RULES:
            where = source.rules_url or "the competition's Kaggle page"
            return RuleOutcome(
                False, f"accept the competition rules at {where}, then re-crawl", source.status.value
            )
        return RuleOutcome(False, f"crawl failed: {source.status_detail}", source.status.value)


class SubmissionCsv(Rule):
    name = "submission-csv"

    def check(self, source, config):
        if source.kind != "competition":
            return RuleOutcome(True, NOT_A_COMPETITION)
        override = config.sources.get(source.id)
        if override and override.target:
            return RuleOutcome(True, f"sources.{source.id}.target names the target", None)
        sample = competition_files(source.files).sample
        if sample is None:
            named = sorted(
                f.name for f in source.files if SAMPLE_SUBMISSION.search(PurePosixPath(f.name).stem)
            )
            if named:
                suffix = PurePosixPath(named[0]).suffix.lower() or "unknown"
                return RuleOutcome(
                    False,
                    f"submission format is {suffix} ({named[0]}), not a CSV table; name the target under "
                    f"sources.{source.id}.target to pose the competition's task from its train file",
                    suffix,
                )
            return RuleOutcome(
                False,
                f"no sample submission among {len(source.files)} files (no table holds the test file's id "
                "column and train columns the test file lacks, one row per test row); name the target under "
                f"sources.{source.id}.target",
                None,
            )
        return RuleOutcome(True, f"sample submission {sample.name} is CSV", ".csv")


class SizeLimit(Rule):
    name = "size-limit"

    def check(self, source, config):
        limit, size = config.rules.max_total_bytes, source.total_bytes
        if size > limit:
            return RuleOutcome(False, f"{size:,} bytes exceed rules.max_total_bytes={limit:,}", str(size))
        return RuleOutcome(True, f"{size:,} bytes within {limit:,}", str(size))


class RealMlTask(Rule):
    name = "real-ml-task"

    def check(self, source, config):
        rules = config.rules
        if source.category and source.category.lower() in {c.lower() for c in rules.non_ml_categories}:
            return RuleOutcome(False, f"category '{source.category}' holds no ML tasks", source.category)
        text = " ".join([source.title, *source.tags])
        for pattern in rules.non_ml_patterns:
            if match := re.search(pattern, text, re.IGNORECASE):
                return RuleOutcome(False, f"'{match.group(0)}' in title/tags: not an ML task", match.group(0))
        hackathon = re.search(rules.hackathon_pattern, text, re.IGNORECASE)
        if hackathon and source.kind == "competition" and source.has_leaderboard is False:
            return RuleOutcome(False, "hackathon without a leaderboard", hackathon.group(0))
        return RuleOutcome(True, "no non-ML markers in category, title or tags")


class Leaderboard(Rule):
    name = "leaderboard"

    def check(self, source, config):
        if source.kind != "competition":
            return RuleOutcome(True, NOT_A_COMPETITION)
        if source.has_leaderboard is None:
            return RuleOutcome(True, "leaderboard not checked (kaggle.fetch_leaderboard is off)")
        if not source.has_leaderboard:
            return RuleOutcome(False, "no public leaderboard to compare against", "false")
        teams = f" ({source.team_count} teams)" if source.team_count is not None else ""
        return RuleOutcome(True, f"leaderboard exists{teams}", "true")


class Tabular(Rule):
    name = "tabular"

    def check(self, source, config):
        total = sum(f.size for f in source.files)
        if not total:
            return RuleOutcome(False, "no files stored to judge the modality", None)
        suffixes = sorted({s.lower() for s in config.rules.tabular_extensions})
        names = [f.name for f in source.files]
        # A workbook or JSON document read as tables counts as table bytes (its tables are derived from it).
        tables = sum(
            f.size
            for f in source.files
            if PurePosixPath(f.name).suffix.lower() in suffixes or derived_names(f.name, names)
        )
        share, least = tables / total, config.rules.min_tabular_share
        if share < least:
            reason = f"only {share:.0%} of bytes are tables ({', '.join(suffixes)}), under rules.min_tabular_share={least:.0%}"
            reason += "".join(f"; {note}" for note in unread_notes(source.files)[:3])
            return RuleOutcome(False, reason, f"{share:.3f}")
        return RuleOutcome(True, f"{share:.0%} of bytes are tables", f"{share:.3f}")


@dataclass(frozen=True)
class RowNeed:
    """One task family's row minimum, as the filter judges it (`families.registry.row_needs` makes them)."""

    family: str
    rows: int
    why: str


@dataclass(frozen=True)
class EnoughRows:
    """Keeps a source some task family can use: at least the smallest family minimum (`needs`, handed in by the
    stage's caller, `pipeline`: families sit above crawlers), and names the families it is too small for.
    Without `needs`, or with `rules.min_rows` set, every family's minimum is `rules.min_rows` (1 when unset)."""

    needs: tuple[RowNeed, ...] = ()
    name: str = "enough-rows"

    def _needs(self, config: Config) -> tuple[RowNeed, ...]:
        if config.rules.min_rows is not None or not self.needs:
            rows = config.rules.min_rows or 1
            return (RowNeed("every family", rows, f"rules.min_rows={rows}"),)
        return self.needs

    def check(self, source, config):
        counts = [f.rows for f in source.files if f.rows is not None]
        rows = source.n_rows if source.n_rows is not None else max(counts, default=None)
        if rows is None:
            unread_tables = "".join(f"; {note}" for note in unread_notes(source.files)[:3])
            return RuleOutcome(
                False, f"row count unknown: no CSV, TSV or Parquet table to count{unread_tables}", None
            )
        needs = self._needs(config)
        floor = min(n.rows for n in needs)
        if rows < floor:
            fewest = [n for n in needs if n.rows == floor]
            which = ", ".join(n.family for n in fewest)
            return RuleOutcome(
                False,
                f"{rows} rows, fewer than any task family needs ({floor} for {which}: {fewest[-1].why})",
                str(rows),
            )
        # Kept when some family can use it; each family too small for it is named here, and again where it poses
        # no task (understand's framing reason, generate's `skipped`).
        short = ", ".join(f"{n.family} (needs {n.rows})" for n in needs if rows < n.rows)
        return RuleOutcome(True, f"{rows} rows" + (f"; too few for {short}" if short else ""), str(rows))


class NotExcluded(Rule):
    name = "not-excluded"

    def check(self, source, config):
        for name in (source.id, source.ref):
            if name in config.rules.excluded_ids:
                return RuleOutcome(False, f"{name} is on an exclusion list (rules.excluded_ids)", name)
            for listed in config.rules.exclusion_lists:
                if name in excluded_ids(listed):
                    return RuleOutcome(False, f"{name} is on an exclusion list ({listed})", name)
        return RuleOutcome(True, "on no exclusion list")


class RecentEnough(Rule):
    name = "recent-enough"

    def check(self, source, config):
        cutoff = config.rules.cutoff
        if source.origin.value in config.rules.recency_exempt_origins:
            reason = (
                f"{source.origin.value} sources have no update date; exempt by rules.recency_exempt_origins"
            )
            return RuleOutcome(True, reason)
        dates = [d for d in (source.deadline, source.last_updated) if d is not None]
        if not dates:
            return RuleOutcome(False, _undated(source.origin.value, config), None)
        latest = max(dates).date()
        if latest < cutoff:
            return RuleOutcome(False, f"last activity {latest} is before rules.cutoff={cutoff}", str(latest))
        return RuleOutcome(True, f"last activity {latest} is on or after {cutoff}", str(latest))


def _undated(origin: str, config: Config) -> str:
    """Why an undated source is dropped, with the setting that keeps its origin's undated sources (a mirror's
    metadata often has no date, and the bare fact left people guessing)."""
    exempt = json.dumps([*config.rules.recency_exempt_origins, origin])
    return (
        f"no deadline or update date known; to keep {origin} sources without one, add {origin} to "
        f"rules.recency_exempt_origins in dareforge.yaml or set DAREFORGE_RULES__RECENCY_EXEMPT_ORIGINS='{exempt}'"
    )


class ReadableTables(Rule):
    name = "readable-tables"

    def check(self, source, config):
        override = config.sources.get(source.id)
        chosen = override.table if override and override.table else None
        # With a table named in dareforge.yaml, prepare reads that one only, so only that one is judged.
        files = [f for f in source.files if chosen is None or f.name == chosen]
        fix = (
            f"replace it at the source, name another table under sources.{source.id}.table, or exclude the "
            "source with rules.excluded_ids"
        )
        for f in files:
            # Before the encoding override: latin-1 decodes any bytes, so it would pass garbage on to prepare.
            if is_binary(f):
                detail = (f.encoding or "").removeprefix(BINARY + ": ")
                return RuleOutcome(
                    False,
                    f"{f.name} is not a text table ({detail}), so no encoding reads it; {fix}",
                    f.encoding,
                )
            if unread(f) and PurePosixPath(f.name).suffix.lower() in TEXT_TABLES:
                return RuleOutcome(False, f"{f.name}: {f.note}; {fix}", None)
        if override and override.encoding:
            return RuleOutcome(
                True, f"encoding set to {override.encoding} in dareforge.yaml", override.encoding
            )
        for f in files:
            if f.encoding and f.encoding.startswith(UNDECODABLE):
                detail = f.encoding.removeprefix(UNDECODABLE + ": ")
                return RuleOutcome(
                    False,
                    f"{f.name} is not UTF-8 ({detail}); set sources.{source.id}.encoding (e.g. latin-1) in dareforge.yaml",
                    f.encoding,
                )
        encodings = sorted({f.encoding for f in files if f.encoding})
        return RuleOutcome(True, "every table decodes as UTF-8", ",".join(encodings) or None)


def with_needs(needs: list[RowNeed], rules: tuple[Rule, ...] | None = None) -> tuple[Rule, ...]:
    """`rules` (default `RULES`) with the row rule judging by the families' `needs`."""
    return tuple(EnoughRows(tuple(needs)) if r.name == EnoughRows.name else r for r in rules or RULES)


RULES: tuple[Rule, ...] = (
    Fetched(),
    SubmissionCsv(),
    SizeLimit(),
    RealMlTask(),
    Leaderboard(),
    Tabular(),
    EnoughRows(),
    NotExcluded(),
    RecentEnough(),
    ReadableTables(),
)


@cache
def excluded_ids(list_name: str) -> frozenset[str]:
    """The ids on one exclusion list shipped in `dareforge/crawlers/exclusions/`."""
    folder = files("dareforge.crawlers") / "exclusions"
    resource = folder / f"{list_name}.txt"
    if not resource.is_file():
        known = sorted(p.name.removesuffix(".txt") for p in folder.iterdir() if p.name.endswith(".txt"))
        raise ConfigError(f"rules.exclusion_lists names unknown list {list_name!r}; known lists: {known}")
    lines = (line.strip() for line in resource.read_text().splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))
