"""The filter stage: judge every crawled source by every rule and store each decision with its reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from dareforge.context import RunContext
from dareforge.crawlers.rules import RULES, Rule
from dareforge.schema import FilterDecision, Source


@dataclass
class FilterReport:
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    drop_reasons: Counter = field(default_factory=Counter)
    written: list[str] = field(default_factory=list)


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


def filter_sources(ctx: RunContext, rules: tuple[Rule, ...] = RULES) -> FilterReport:
    report = FilterReport()
    sources = sorted(ctx.store.iter_records(Source), key=lambda s: s.id)
    with ctx.progress() as progress:
        bar = progress.add_task("filter", total=len(sources), item="")
        for source in sources:
            progress.update(bar, item=source.id)
            decisions = judge_source(source, ctx, rules)
            if ctx.store.write_records(source.id, decisions):
                report.written.append(ctx.store.table_key(FilterDecision.table, source.id))
            drops = [d for d in decisions if not d.kept]
            (report.dropped if drops else report.kept).append(source.id)
            report.drop_reasons.update(d.rule for d in drops)
            progress.advance(bar)
    return report
