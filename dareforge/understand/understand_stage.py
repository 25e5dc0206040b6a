"""The understand stage: for each accepted source, propose framings from its evidence and its data, check
them, and store every candidate (chosen or not, with why) in the `framings` table, one partition per source.

A source's framings are a function of its version, its config override and `understand.*`: a partition whose
rows carry the same `understand_version` is finished and is not redone.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import PurePosixPath

from rich.markup import escape

from dareforge.context import RunContext
from dareforge.crawlers.crawler import slugify
from dareforge.crawlers.inspect import is_sample_submission
from dareforge.describe import UNDECODABLE, is_binary, unread, unread_notes
from dareforge.errors import DareforgeError, machine_at_fault
from dareforge.generators.engine import Engine
from dareforge.generators.rawtable import PrepareError, raw_table
from dareforge.hashing import fingerprint
from dareforge.queries import accepted_source_ids, why_none
from dareforge.report import SHOWN, StageReport
from dareforge.schema import Framing, Source, SourceFile, SourceStatus
from dareforge.understand.columns import Sample
from dareforge.understand.evidence import absent_target_notes, read_text
from dareforge.understand.model import propose_with_model
from dareforge.understand.propose import Candidate, Proposal, check, propose

log = logging.getLogger(__name__)

UNDERSTAND_FORMAT = 12
"""Bump when the stage decides differently for the same inputs, so every source is understood again. 7: a
competition's outcome columns and `sources.<id>.exclude` withheld; a series' exogenous columns that compute its
target, and those of a named target, left out. 8: `unknown` is a missing-value marker (the one list,
`rawtable.MISSING_MARKERS`, that question tasks share), and a time column without a name (`Unnamed: 0`) is named
`date`. 9: row minimums per family (`Family.needs`): a table too small for a model still poses questions, and a
series needs periods in seasons, not rows. 10: times that are plain numbers (years) have no season. 11: a series
shorter than two seasons and its held-out share has no season (forecast, not skipped). 12: a prediction phrase in
another language names the columns it glosses (`languages`), and two columns whose every value is unique are no
copies of each other."""
TABLE_SUFFIXES = (".csv", ".tsv", ".parquet")
RUNNERS_UP = 2
"""Unchecked candidates stored per family below the chosen one (an auditor sees what else was in the running)."""


def understand(ctx: RunContext, source_ids: list[str] | None = None) -> StageReport:
    """Frame the sources (default: every accepted one). The report's outcomes: `framed` (source -> its chosen
    framings), `unframed` and `unchanged` (understood before, under the same settings); its failures: why each
    unframed source has no task; its counts: chosen framings per task type (`questions` for question-only)."""
    ids = source_ids if source_ids is not None else accepted_source_ids(ctx)
    report = StageReport("understand")
    with Engine(ctx) as engine, ctx.progress() as progress:
        bar = progress.add_task("understand", total=len(ids), item="")
        for source_id in ids:
            progress.update(bar, item=source_id)
            try:
                with ctx.source_lock(source_id):
                    framings = _understand_source(ctx, engine, source_id, report)
            except DareforgeError as exc:
                framings = []
                log.warning("understand %s failed: %s", source_id, exc)
                report.failures[source_id] = str(exc)
            chosen = [f for f in framings if f.status == "chosen"]
            if chosen:
                report.add("framed", source_id, ", ".join(f.framing for f in chosen))
            else:
                if framings:
                    report.failures[source_id] = why_none(framings)
                report.add("unframed", source_id, report.failures.get(source_id, ""))
            report.counts.update(
                "questions" if f.questions_only else f.task_type.value for f in chosen if f.task_type
            )
            progress.advance(bar)
    return finish_report(report)


def finish_report(report: StageReport) -> StageReport:
    """Reuse count, summary lines, and why nothing is left when no source was framed (also for a report merged
    from several processes)."""
    report.reused = len(report.labels("unchanged"))
    report.lines = _summary(report)
    if not report.labels("framed"):
        report.nothing_left = (
            f"none of the {len(report.labels('unframed'))} kept sources holds a task (the reasons are above); "
            "name a target under sources.SOURCE_ID.target in dareforge.yaml, and see why per source with "
            "dareforge sources --why SOURCE_ID"
        )
    return report


def _summary(report: StageReport) -> list[str]:
    families = ", ".join(f"{n} {kind}" for kind, n in sorted(report.counts.items())) or "none"
    lines = [
        f"understand: {len(report.labels('framed'))} sources framed ({families}), "
        f"{len(report.labels('unframed'))} without a task; {report.reused} unchanged"
    ]
    lines += [
        f"  [yellow]no task[/] {escape(sid)}: {escape(why)}"
        for sid, why in list(report.failures.items())[:SHOWN]
    ]
    return lines


def chosen_framings(ctx: RunContext, source_id: str) -> list[Framing]:
    return [f for f in ctx.store.read_partition(Framing, source_id) if f.status == "chosen"]


def _version(ctx: RunContext, source: Source) -> str:
    config = ctx.config
    endpoint = next((e for e in config.llm.endpoints if e.name == config.understand.endpoint), None)
    override = config.sources.get(source.id)
    return fingerprint(
        UNDERSTAND_FORMAT,
        source.version,
        source.raw_version,
        config.understand.model_dump(mode="json"),
        endpoint.model_dump(mode="json", include={"base_url", "model"}) if endpoint else None,
        override.model_dump(mode="json") if override else None,
        config.rules.min_rows,
        config.prepare.max_classes,
    )


def _understand_source(ctx: RunContext, engine: Engine, source_id: str, report: StageReport) -> list[Framing]:
    rows = ctx.store.read_partition(Source, source_id)
    if not rows:
        raise DareforgeError(f"{source_id}: no such source in the store; crawl it first (`dareforge crawl`)")
    source = rows[-1]
    version = _version(ctx, source)
    stored = ctx.store.read_partition(Framing, source_id)
    if stored and all(f.understand_version == version for f in stored):
        report.add("unchanged", source_id)
        return stored
    try:
        framings = _frame(ctx, engine, source, version)
    except (PrepareError, DareforgeError) as exc:
        framings = [_nothing(source, version, str(exc))]
    except Exception as exc:  # whatever an odd table breaks, it is this source's failure alone, and recorded
        if machine_at_fault(exc):
            raise
        log.debug("understand %s failed", source_id, exc_info=True)
        engine.recover()
        framings = [_nothing(source, version, f"understanding failed: {type(exc).__name__}: {exc}")]
    if ctx.store.write_records(source_id, framings):
        report.written.append(ctx.store.table_key(Framing.table, source_id))
    chosen = ", ".join(f.framing for f in framings if f.status == "chosen") or "none"
    log.info("%s: framings %s", source_id, chosen)
    return framings


def _nothing(source: Source, version: str, reason: str) -> Framing:
    return Framing(
        source_id=source.id,
        source_version=source.version,
        framing="none",
        status="rejected",
        task_type=None,
        target_columns=[],
        confidence=0.0,
        proposers=[],
        evidence=[],
        reason=reason,
        understand_version=version,
    )


def choose_table(source: Source, table: str | None) -> SourceFile:
    """The table to understand: the configured one, else the largest table that is not a sample submission
    (a competition's file named like `train` first). Binary files under a table's name are never tables,
    nor are those the crawl could not read as one (a CSV on one enormous line)."""
    binary = [f"{f.name} is not a text table ({f.encoding})" for f in source.files if is_binary(f)]
    hint = "".join(f"; {b}" for b in binary + unread_notes(source.files))
    tables = [
        f
        for f in source.files
        if PurePosixPath(f.name).suffix.lower() in TABLE_SUFFIXES and not is_binary(f) and not unread(f)
    ]
    if table:
        named = [f for f in tables if f.name == table]
        if not named:
            names = ", ".join(f.name for f in tables) or "none"
            raise DareforgeError(
                f"{source.id}: sources.{source.id}.table names {table!r}, which is not a table of the source "
                f"(tables: {names}){hint}"
            )
        return named[0]
    usable = [f for f in tables if not is_sample_submission(source, f)]
    if not usable:
        raise DareforgeError(f"{source.id}: no CSV, TSV or Parquet table to understand{hint}")
    if source.kind == "competition":
        train = [f for f in usable if "train" in PurePosixPath(f.name).stem.lower()]
        usable = train or usable
    return max(usable, key=lambda f: (f.size, f.name))


def _frame(ctx: RunContext, engine: Engine, source: Source, version: str) -> list[Framing]:
    if source.status != SourceStatus.OK:
        return [_nothing(source, version, f"source status is {source.status.value}")]
    override = ctx.config.sources.get(source.id)
    file = choose_table(source, override.table if override else None)
    encoding = override.encoding if override and override.encoding else file.encoding
    if (encoding or "").startswith(UNDECODABLE):
        raise DareforgeError(
            f"{source.id}: {file.name} is not UTF-8 ({encoding}); set sources.{source.id}.encoding (e.g. latin-1)"
        )
    scratch = ctx.scratch_dir(f"understand-{source.id}")
    try:
        table, total = engine.sample_text(
            raw_table(source, file, encoding), scratch, ctx.config.understand.sample_rows
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    sample = Sample.from_arrow(file.name, table, total)
    text = read_text(source, table.column_names)
    model = propose_with_model(ctx, source, sample)
    proposal = propose(source, sample, text, ctx.config, override, model.hints)
    framings = _decide(ctx, source, sample, proposal, version, file.name) or [
        _nothing(source, version, "no column can be a target (ids, text, constants or empty)")
    ]
    notes = [*absent_target_notes(text, source, file.name, table.column_names), *model.notes]
    return [f.model_copy(update={"evidence": [*f.evidence, *notes]}) for f in framings]


def _decide(
    ctx: RunContext, source: Source, sample: Sample, proposal: Proposal, version: str, table: str
) -> list[Framing]:
    """Check candidates in rank order and choose per family: for a table the first that passes, and up to
    `understand.max_tabular_framings` in all when the next ones score close to it; for a series the first that
    passes and that a quick model forecasts among those scoring close to the first that passes, else that
    first one (a series few models can forecast makes tasks the gate rejects)."""
    cfg = ctx.config.understand
    limit = cfg.candidates_checked
    framings: list[Framing] = []

    def record(candidate: Candidate, status: str, reason: str) -> None:
        framings.append(_record(source, sample, proposal, candidate, version, table, status, reason))

    for family in ("tabular", "series"):
        ranked = [c for c in proposal.candidates if c.family == family]
        winners: list[Candidate] = []
        first: Candidate | None = None  # the best-ranked series that passed, forecastable or not
        for candidate in ranked[:limit]:
            if winners and not _close(candidate, winners[0], cfg):
                continue
            if first is not None and not _close(candidate, first, cfg):
                continue
            candidate.outcome = check(candidate, sample, proposal, ctx.config)
            if not candidate.outcome.passed or _copies(candidate, winners):
                continue
            first = first or candidate
            if family == "tabular" or candidate.outcome.forecastable:
                winners.append(candidate)
            if len(winners) >= (cfg.max_tabular_framings if family == "tabular" else 1):
                break
        passed = [c for c in ranked[:limit] if c.outcome and c.outcome.passed]
        if not winners and first is not None:
            winners = [first]
        runners_up = 0
        for candidate in ranked:
            outcome = candidate.outcome
            if candidate in winners:
                record(candidate, "chosen", _chosen_reason(family, candidate, winners, passed, ranked))
            elif outcome is not None and not outcome.passed:
                record(candidate, "rejected", _failure_reason(source, sample, table, candidate))
            elif outcome is not None:
                copied = _copies(candidate, winners)
                record(
                    candidate,
                    "rejected",
                    f"passed its checks, but it copies {copied.target} (chosen)"
                    if copied
                    else f"passed its checks, but {winners[0].target} was chosen (see its reason)",
                )
            elif runners_up < RUNNERS_UP:
                beaten = winners[0].target if winners else f"the {limit} best-ranked candidates"
                record(
                    candidate, "rejected", f"ranked below {beaten} (score {candidate.score:g}); not checked"
                )
                runners_up += 1
    if not any(f.status == "chosen" for f in framings):
        framings += _questions_only(source, sample, proposal, version, table)
    return framings


def _questions_only(
    source: Source, sample: Sample, proposal: Proposal, version: str, table: str
) -> list[Framing]:
    """When no target passed, the table still poses questions (counts, shares, group statistics, joins): it is
    prepared under the best-ranked target that failed as a prediction target only (noise labels, a formula, no
    usable feature), never one the data rules out (too few rows or classes)."""
    soft = next(
        (c for c in proposal.candidates if c.family == "tabular" and c.outcome and c.outcome.questions), None
    )
    if soft is None:
        return []
    reason = (
        f"no target passed its checks ({soft.target}: {soft.outcome.reason}); the table is kept for question "
        f"tasks, which need no learnable target, split as {soft.target} would be"
    )
    framing = _record(source, sample, proposal, soft, version, table, "chosen", reason)
    return [framing.model_copy(update={"framing": "questions", "questions_only": True})]


def _close(candidate: Candidate, leader: Candidate, cfg) -> bool:
    """Its evidence scores within `understand.close_score` of the leader's: worth a second tabular framing
    when words point at it too (not only its position), or, for a series, worth preferring when a quick model
    forecasts it and not the leader (a forecastable series never wins over one the description names)."""
    second = candidate.family == "series" or candidate.named
    return second and candidate.score >= leader.score - cfg.close_score


def _copies(candidate: Candidate, winners: list[Candidate]) -> Candidate | None:
    """The chosen candidate this one copies: each gives the other away alone (a unit twin, a recoding)."""
    for winner in winners:
        theirs = winner.outcome.excluded if winner.outcome else []
        mine = candidate.outcome.excluded if candidate.outcome else []
        if candidate.target in theirs or winner.target in mine:
            return winner
    return None


def _chosen_reason(
    family: str, candidate: Candidate, winners: list[Candidate], passed: list[Candidate], ranked: list
) -> str:
    if candidate is not winners[0]:
        return (
            f"a second {family} target: it passed every check and its evidence (score {candidate.score:g}) is "
            f"close to {winners[0].target}'s ({winners[0].score:g})"
        )
    reason = f"best-ranked {family} candidate that passed every check (score {candidate.score:g})"
    better = [c.target for c in passed if ranked.index(c) < ranked.index(candidate)]
    if better:
        reason += f"; forecasts better than the higher-ranked {', '.join(better)}"
    return reason


def _failure_reason(source: Source, sample: Sample, table: str, candidate: Candidate) -> str:
    if candidate.target not in {c.name for c in sample.columns}:
        shown = ", ".join(c.name for c in sample.columns[:30])
        return (
            f"sources.{source.id}.target names {candidate.target!r}, which is not a column of {table} "
            f"(columns: {shown}); fix sources.{source.id}.target"
        )
    return candidate.outcome.reason.replace("sources.<id>", f"sources.{source.id}")


def _record(
    source: Source,
    sample: Sample,
    proposal: Proposal,
    candidate: Candidate,
    version: str,
    table: str,
    status: str,
    reason: str,
) -> Framing:
    outcome = candidate.outcome
    leaks = outcome.excluded if outcome else []
    withheld = set(proposal.withheld) - {candidate.target}
    excluded = sorted({*proposal.left_out(candidate.target), *leaks})
    series = candidate.axis is not None and candidate.family == "series"
    axis = candidate.axis if series else proposal.time_index
    axis_parts = axis.parts if axis is not None else set()
    numbering = [
        c.name
        for c in sample.columns
        if c.sequential and c.name != proposal.id_column and c.name not in axis_parts
    ]
    dropped = sorted({*leaks, *numbering, *withheld} - {candidate.target})
    known = []
    if series:
        skip = {candidate.target, proposal.id_column, candidate.entity, *excluded, *axis.parts}
        known = [c.name for c in sample.columns if c.name not in skip]
    return Framing(
        source_id=source.id,
        source_version=source.version,
        framing=f"{'ts' if series else candidate.task_type.value}-{slugify(candidate.target)}",
        status=status,
        task_type=candidate.task_type,
        target_columns=[candidate.target],
        table_file=table,
        id_column=None if proposal.id_column in leaks else proposal.id_column,
        time_column=axis.name if axis is not None else None,
        time_axis=axis.spec if axis is not None else None,
        split=None if series or axis is None else "chronological",
        forecast_from_time=outcome.from_time if series and outcome else None,
        entity_column=candidate.entity if series else None,
        known_columns=known,
        excluded_columns=excluded,
        dropped_columns=dropped,
        confidence=candidate.confidence,
        proposers=sorted(candidate.proposers),
        evidence=candidate.evidence,
        checks=[
            *(outcome.checks if outcome else []),
            *(f"withheld: {name}: {proposal.withheld[name]}" for name in sorted(withheld)),
        ],
        reason=reason,
        understand_version=version,
    )
