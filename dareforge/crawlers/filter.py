"""The filter stage: judge every crawled source by every rule and store each decision with its reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from dareforge.context import RunContext
from dareforge.crawlers.rules import RULES, Rule
from dareforge.report import SHOWN, StageReport
from dareforge.schema import FilterDecision, Source

if TYPE_CHECKING:
    from rich.console import RenderableType


def judge_source(source: Source, ctx: RunContext, rules: tuple[Rule, ...] = RULES) -> list[FilterDecision]:
    fingerprint = ctx.config.fingerprint("rules", "sources")
    decisions = []
    for rule in rules:
        verdict = rule.check(source, ctx.config)
        decisions.append(
            FilterDecision(
                source_id=source.id,
                source_version=source.version,
                rule=rule.name,
                kept=verdict.kept,
                reason=verdict.reason,
                measured=verdict.measured,
                rules_fingerprint=fingerprint,
            )
        )
    return decisions


def filter_sources(ctx: RunContext, rules: tuple[Rule, ...] = RULES) -> StageReport:
    """Judge every stored source. The report's outcomes: `kept` and `dropped` (source -> the rules that dropped
    it); its counts: sources dropped per rule."""
    report = StageReport("filter")
    sources = sorted(ctx.store.iter_records(Source), key=lambda s: s.id)
    with ctx.progress() as progress:
        bar = progress.add_task("filter", total=len(sources), item="")
        for source in sources:
            progress.update(bar, item=source.id)
            decisions = judge_source(source, ctx, rules)
            if ctx.store.write_records(source.id, decisions):
                report.written.append(ctx.store.table_key(FilterDecision.table, source.id))
            drops = [d.rule for d in decisions if not d.kept]
            if drops:
                report.add("dropped", source.id, ", ".join(drops))
            else:
                report.add("kept", source.id)
            report.counts.update(drops)
            progress.advance(bar)
    drop_reasons = top_drop_reasons(ctx)
    report.lines = _summary(report, drop_reasons)
    report.nothing_left = _nothing_left(report, drop_reasons)
    return report


def top_drop_reasons(ctx: RunContext) -> list[tuple[str, int, str]]:
    """(rule, sources it dropped, one of its reasons), commonest first, at most SHOWN. The example is the reason
    given to the first of those sources by id (DuckDB's `any_value` picked whichever a thread met first, so two
    identical runs printed different examples)."""
    return (
        ctx.store.connect()
        .sql(
            f"""select rule, count(*) as sources, arg_min(reason, source_id) as example
               from filter_decisions where not kept group by rule order by sources desc, rule limit {SHOWN}"""
        )
        .fetchall()
    )


def _summary(report: StageReport, drop_reasons: list[tuple[str, int, str]]) -> list[RenderableType]:
    """The line, then the commonest drop reasons with an example each (a table)."""
    from rich.table import Table

    line = (
        f"filter: {len(report.labels('kept'))} kept, {len(report.labels('dropped'))} dropped; "
        f"{len(report.written)} decision files written"
    )
    if not drop_reasons:
        return [line]
    table = Table(title="top drop reasons", title_justify="left")
    for column in ("rule", "sources", "example"):
        table.add_column(column, overflow="fold")
    for rule, sources, example in drop_reasons:
        table.add_row(rule, str(sources), escape(example))
    return [line, table]


def _nothing_left(report: StageReport, drop_reasons: list[tuple[str, int, str]]) -> str | None:
    if report.labels("kept"):
        return None
    dropped = report.labels("dropped")
    if not dropped:
        return (
            "the crawl stored no source; name some under mirror.paths, kaggle (enabled, datasets) or builtin "
            "in dareforge.yaml (see dareforge.example.yaml)"
        )
    reasons = "; ".join(f"{rule} dropped {n} (e.g. {example})" for rule, n, example in drop_reasons)
    return (
        f"the filter dropped every source ({len(dropped)} in all): {reasons}. Fix what the reasons say "
        "(most name a setting of dareforge.yaml) and run again; every drop: "
        'dareforge sql "select source_id, rule, reason from filter_decisions where not kept"'
    )
