"""Rule filter: every rule judges every source and says why, so an auditor can ask about any drop.

A rule is a small object with a `name` and a `check(source, config)` that returns a Verdict: kept or not, a
reason a person can act on, and the measured value the threshold was applied to. A source is accepted when
every rule keeps it. Rules come from the DSGym paper's source filter, plus our own (readable tables).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import PurePosixPath
from typing import Protocol

from dareforge.config import Config
from dareforge.crawlers.inspect import SAMPLE_SUBMISSION, UNDECODABLE
from dareforge.errors import ConfigError
from dareforge.schema import Source, SourceStatus

NOT_A_COMPETITION = "not a competition: the task defines its own CSV predictions"


@dataclass(frozen=True)
class Verdict:
    kept: bool
    reason: str
    measured: str | None = None


class Rule(Protocol):
    name: str

    def check(self, source: Source, config: Config) -> Verdict: ...


class Fetched(Rule):
    name = "fetched"

    def check(self, source, config):
        if source.status == SourceStatus.OK:
            return Verdict(True, f"{len(source.files)} files stored", source.status.value)
        if source.status == SourceStatus.NEEDS_RULES:
            return Verdict(
                False,
                f"accept the competition rules at {source.rules_url}, then re-crawl",
                source.status.value,
            )
        return Verdict(False, f"crawl failed: {source.status_detail}", source.status.value)


class SubmissionCsv(Rule):
    name = "submission-csv"

    def check(self, source, config):
        if source.kind != "competition":
            return Verdict(True, NOT_A_COMPETITION)
        samples = [f.name for f in source.files if SAMPLE_SUBMISSION.search(PurePosixPath(f.name).stem)]
        if not samples:
            return Verdict(False, f"no sample submission among {len(source.files)} files", None)
        suffix = PurePosixPath(samples[0]).suffix.lower()
        if suffix != ".csv":
            return Verdict(
                False, f"submission format is {suffix or 'unknown'} ({samples[0]}), not CSV", suffix
            )
        return Verdict(True, f"sample submission {samples[0]} is CSV", suffix)


class SizeLimit(Rule):
    name = "size-limit"

    def check(self, source, config):
        limit = config.rules.max_total_bytes
        if source.total_bytes > limit:
            return Verdict(
                False,
                f"{source.total_bytes:,} bytes exceed rules.max_total_bytes={limit:,}",
                str(source.total_bytes),
            )
        return Verdict(True, f"{source.total_bytes:,} bytes within {limit:,}", str(source.total_bytes))


class RealMlTask(Rule):
    name = "real-ml-task"

    def check(self, source, config):
        text = " ".join([source.title, source.category or "", *source.tags]).lower()
        for pattern in config.rules.non_ml_patterns:
            if match := re.search(pattern, text):
                return Verdict(
                    False, f"'{match.group(0)}' in title/category/tags: not an ML task", match.group(0)
                )
        if re.search(config.rules.hackathon_pattern, text) and source.has_leaderboard is not True:
            return Verdict(False, "hackathon without a leaderboard", "hackathon")
        return Verdict(True, "no non-ML markers in title, category or tags")


class Leaderboard(Rule):
    name = "leaderboard"

    def check(self, source, config):
        if source.kind != "competition":
            return Verdict(True, NOT_A_COMPETITION)
        if source.has_leaderboard is None:
            return Verdict(True, "leaderboard not checked (kaggle.fetch_leaderboard is off)")
        if not source.has_leaderboard:
            return Verdict(False, "no public leaderboard to compare against", "false")
        return Verdict(True, f"leaderboard exists ({source.team_count or 0} teams)", "true")


class Tabular(Rule):
    name = "tabular"

    def check(self, source, config):
        total = sum(f.size for f in source.files)
        if not total:
            return Verdict(False, "no files stored to judge the modality", None)
        suffixes = {s.lower() for s in config.rules.tabular_extensions}
        tables = sum(f.size for f in source.files if PurePosixPath(f.name).suffix.lower() in suffixes)
        share = tables / total
        measured = f"{share:.3f}"
        if share < config.rules.min_tabular_share:
            return Verdict(
                False, f"only {share:.0%} of bytes are tables ({', '.join(sorted(suffixes))})", measured
            )
        return Verdict(True, f"{share:.0%} of bytes are tables", measured)


class TargetIdentifiable(Rule):
    name = "target-identifiable"

    def check(self, source, config):
        if not source.target_columns:
            return Verdict(
                False,
                f"no target column identified; name it under sources.{source.id}.target in dareforge.yaml",
            )
        return Verdict(True, f"target: {', '.join(source.target_columns)}", ",".join(source.target_columns))


class EnoughRows(Rule):
    name = "enough-rows"

    def check(self, source, config):
        rows = (
            source.n_rows
            if source.n_rows is not None
            else max((f.rows or 0 for f in source.files), default=0)
        )
        if rows < config.rules.min_rows:
            return Verdict(
                False, f"{rows} rows, fewer than rules.min_rows={config.rules.min_rows}", str(rows)
            )
        return Verdict(True, f"{rows} rows", str(rows))


class NotExcluded(Rule):
    name = "not-excluded"

    def check(self, source, config):
        excluded = excluded_ids(tuple(config.rules.exclusion_lists)) | set(config.rules.excluded_ids)
        for name in (source.id, source.ref):
            if name in excluded:
                return Verdict(
                    False,
                    f"{name} is on an exclusion list ({', '.join(config.rules.exclusion_lists) or 'rules.excluded_ids'})",
                    name,
                )
        return Verdict(True, "on no exclusion list")


class RecentEnough(Rule):
    name = "recent-enough"

    def check(self, source, config):
        cutoff = config.rules.cutoff
        if source.origin.value in config.rules.recency_exempt_origins:
            return Verdict(
                True,
                f"{source.origin.value} sources have no update date; exempt by rules.recency_exempt_origins",
            )
        dates = [d for d in (source.deadline, source.last_updated) if d is not None]
        if not dates:
            return Verdict(False, "no deadline or update date known", None)
        latest = max(dates).date()
        if latest < cutoff:
            return Verdict(False, f"last activity {latest} is before rules.cutoff={cutoff}", str(latest))
        return Verdict(True, f"last activity {latest} is after {cutoff}", str(latest))


class ReadableTables(Rule):
    name = "readable-tables"

    def check(self, source, config):
        override = config.sources.get(source.id)
        if override and override.encoding:
            return Verdict(True, f"encoding set to {override.encoding} in dareforge.yaml", override.encoding)
        for f in source.files:
            if f.encoding and f.encoding.startswith(UNDECODABLE):
                detail = f.encoding.removeprefix(UNDECODABLE + ": ")
                return Verdict(
                    False,
                    f"{f.name} is not UTF-8 ({detail}); set sources.{source.id}.encoding (e.g. latin-1) in dareforge.yaml",
                    f.encoding,
                )
        encodings = sorted({f.encoding for f in source.files if f.encoding})
        return Verdict(True, "every table decodes as UTF-8", ",".join(encodings) or None)


RULES: tuple[Rule, ...] = (
    Fetched(),
    SubmissionCsv(),
    SizeLimit(),
    RealMlTask(),
    Leaderboard(),
    Tabular(),
    TargetIdentifiable(),
    EnoughRows(),
    NotExcluded(),
    RecentEnough(),
    ReadableTables(),
)


@cache
def excluded_ids(lists: tuple[str, ...]) -> frozenset[str]:
    ids: set[str] = set()
    folder = files("dareforge.crawlers") / "exclusions"
    for name in lists:
        resource = folder / f"{name}.txt"
        if not resource.is_file():
            known = sorted(p.name.removesuffix(".txt") for p in folder.iterdir() if p.name.endswith(".txt"))
            raise ConfigError(f"rules.exclusion_lists names unknown list {name!r}; known lists: {known}")
        ids |= {
            ln.strip() for ln in resource.read_text().splitlines() if ln.strip() and not ln.startswith("#")
        }
    return frozenset(ids)
