"""The gate: turn stored findings into accept/reject with the thresholds in `validate:`.

Only this module knows thresholds. It reads the `validations` table and writes `verdicts`, so changing a
threshold and re-running `dareforge gate` re-decides every task without re-running a single check.

One check is the gate's own, `reachable`, decided from what is stored (no finding of its own): the task record
(its strong reference's score and, where the family's bar is out of that reference's reach, the task's own bar,
`Task.pass_bar`; see `Family.own_bar`) and the solver ladder's finding (`discrimination`: every rung's score and
bootstrap interval). A goal task is rejected when

- its strong reference scores below the bar it states (its own, or the family's): no known solution passes,
  so it yields no passing trajectory for SFT and an always-zero pass signal for RL;
- it carries its own bar and `validate.allow_task_bars` is off;
- it carries its own bar and the trivial answer (with `validate.task_bar_floor: weakest-model`, also the
  ladder's weakest model) scores too close to it: the upper bound of their bootstrap intervals plus
  `validate.min_task_bar_gap` must stay at or below the bar. The default floor is the trivial answer alone,
  the same demand a task at its family's bar meets (a linear model may pass that bar too); how well the ladder's
  models are told apart is the `discrimination` check's to judge.
  Without a ladder finding (`validate.ladder_cpu_seconds` 0) only the trivial answer's stored score is
  compared, with the same gap.
"""

from __future__ import annotations

import json
import operator
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dareforge.config import ValidateConfig
from dareforge.context import RunContext
from dareforge.families.family import Family
from dareforge.families.registry import REGISTERED, bar_of
from dareforge.reference_solutions.ladder import TRIVIAL
from dareforge.report import StageReport
from dareforge.reviews import standing_of
from dareforge.schema import Review, Task, Validation, Verdict


@dataclass(frozen=True)
class Threshold:
    """Reject when `score <compare> config.<setting>` (or the finding's `details[detail]`, when set); with
    `setting` None the limit is `fixed`, or with `pass_bar` the task's pass bar (its own where it carries one,
    else its family's: `families.registry.bar_of`). `exact_only`: the threshold applies to exact-graded (IF)
    families only."""

    compare: Callable[[float, float], bool]
    symbol: str
    setting: str | None
    fixed: float | None = None
    detail: str | None = None
    pass_bar: bool = False
    exact_only: bool = False

    def limit(self, config: ValidateConfig, bar: float | None) -> float:
        if self.pass_bar:
            if bar is None:
                raise ValueError("a threshold at the pass bar needs the task's bar")
            return bar
        return self.fixed if self.setting is None else getattr(config, self.setting)

    def where(self) -> str:
        if self.pass_bar:
            return "the task's pass bar"
        return f"validate.{self.setting}" if self.setting else "the fixed limit"


GE, GT, LT = (operator.ge, ">="), (operator.gt, ">"), (operator.lt, "<")
THRESHOLDS: dict[str, tuple[Threshold, ...]] = {
    "leakage-feature": (Threshold(*GE, "leakage_max_single_feature"),),
    "leakage-formula": (
        Threshold(*GE, "leakage_max_formula_fit"),
        Threshold(*GE, "leakage_max_formula_share", detail="share"),
        Threshold(*GE, "leakage_max_formula_over_strong", detail="over_strong"),
    ),
    "leakage-copy": (Threshold(*GE, "leakage_max_label_copy"),),
    "leakage-order": (Threshold(*GE, "leakage_max_order_correlation"),),
    "leakage-shared-rows": (Threshold(*GT, "leakage_max_shared_rows"),),
    "duplicate-source": (Threshold(*GE, "duplicate_min_similarity"),),
    "duplicate-task": (Threshold(*GE, None, 1.0),),
    "learnable": (Threshold(*LT, "min_learnable_margin"),),
    "runtime": (Threshold(*GT, "max_reference_share_of_limit"),),
    "shortcut": (Threshold(*GT, "max_shortcut_share"),),
    "trivial": (
        Threshold(*GE, None, pass_bar=True),
        Threshold(*GT, "max_trivial_share", exact_only=True),
    ),
    "sensitivity": (Threshold(*LT, "min_sensitive_requirements"),),
    "discrimination": (
        Threshold(*LT, "min_ladder_tau"),
        Threshold(*LT, "min_ladder_spread", detail="spread"),
    ),
}


def reasons_against(
    finding: Validation, config: ValidateConfig, family: Family | None = None, bar: float | None = None
) -> str | None:
    """Why this finding rejects its task (of `family`, passing at `bar`: thresholds at the pass bar need one of
    them; without `bar`, the family's own), or None."""
    if bar is None and family is not None:
        bar = family.pass_bar
    if finding.flagged:
        return f"{finding.check}: {finding.reason}"
    if finding.score is None:
        return None
    failed = []
    for threshold in THRESHOLDS.get(finding.check, ()):
        if threshold.exact_only and not (family is not None and family.exact):
            continue
        value = (
            finding.score if threshold.detail is None else json.loads(finding.details).get(threshold.detail)
        )
        if value is None:  # a finding stored before the check measured this detail
            continue
        limit = threshold.limit(config, bar)
        if threshold.compare(value, limit):
            named = f"{threshold.detail} " if threshold.detail else ""
            failed.append(f"{named}{value:.3f} {threshold.symbol} {threshold.where()}={limit:g}")
    return f"{finding.check}: {finding.reason} ({'; '.join(failed)})" if failed else None


NAME = "reachable"
LADDER = "discrimination"


def ladder_rungs(findings: Iterable[Validation]) -> list[dict[str, Any]]:
    """The scored rungs of the task's stored ladder finding, weakest first (empty: no ladder ran)."""
    for finding in findings:
        if finding.check == LADDER and finding.details:
            rungs = json.loads(finding.details).get("rungs", [])
            return [r for r in rungs if r.get("score") is not None and r.get("high") is not None]
    return []


def _shown(rung: dict[str, Any]) -> str:
    return f"{rung['name']} {rung['score']:.3f} [{rung['low']:.3f}, {rung['high']:.3f}]"


def unreachable(
    task: Task, family: Family | None, findings: Iterable[Validation], config: ValidateConfig
) -> str | None:
    """Why `task` cannot be released at the bar it states (a `verdicts.reasons` entry), or None."""
    if family is None or not family.scored_against_baseline or task.status != "candidate":
        return None
    bar, strong = bar_of(task), task.scores.strong
    whose = "its own" if task.pass_bar is not None else "the family's"
    rungs = ladder_rungs(findings)
    best = max(rungs, key=lambda r: r["score"], default=None)
    ladder = f"; the ladder's best rung: {_shown(best)}" if best else ""
    if strong is None:
        return f"{NAME}: no strong reference score recorded, so no known solution reaches {whose} bar {bar:g}"
    if strong < bar:
        return f"{NAME}: the strong reference scores {strong:.3f}, below {whose} bar {bar:g}{ladder}"
    if task.pass_bar is None:
        return None
    below = f"the strong reference scores {strong:.3f}, below the family's bar {family.pass_bar:g}"
    if not config.allow_task_bars:
        return f"{NAME}: {below}, and a task's own bar ({bar:g}) is off (validate.allow_task_bars)"
    gap = config.min_task_bar_gap
    if rungs:
        trivial = next((r for r in rungs if r["name"] == TRIVIAL), None)
        weakest = None
        if config.task_bar_floor == "weakest-model":
            weakest = next((r for r in rungs if r["name"] != TRIVIAL), None)
        close = [_shown(r) for r in (trivial, weakest) if r is not None and r["high"] + gap > bar]
    else:
        baseline = task.scores.baseline
        close = (
            [] if baseline is None or baseline + gap <= bar else [f"{TRIVIAL} {baseline:.3f} (no ladder ran)"]
        )
    if not close:
        return None
    return (
        f"{NAME}: {below}, and its own bar {bar:g} is not clearly above {' and '.join(close)} "
        f"(upper bound + validate.min_task_bar_gap={gap:g} must not exceed the bar){ladder}"
    )


def gate(ctx: RunContext) -> StageReport:
    """Decide every validated task and store the verdicts. The report's outcomes: `accepted` and `rejected`
    (task -> its reasons) and `stale-review` (task -> why its review no longer applies); its counts: rejected
    tasks per check that rejected them. A people's review (`dareforge.reviews`) that keeps its task out adds
    its reason after the checks; no review removes a check's reason."""
    config = ctx.config.validate_
    fingerprint = ctx.config.fingerprint("validate_")
    findings: dict[str, list[Validation]] = defaultdict(list)
    for finding in ctx.store.iter_records(Validation):
        findings[finding.task_id].append(finding)
    by_source: dict[str, list[Verdict]] = defaultdict(list)
    tasks = [t for t in sorted(ctx.store.iter_records(Task), key=lambda t: t.id) if t.id in findings]
    reviewed = standing_of(tasks, ctx.store.iter_records(Review))
    report = StageReport("gate")
    for task in tasks:
        family = REGISTERED.get(task.family)
        bar = bar_of(task) if family is not None else None
        reasons = [r for f in findings[task.id] if (r := reasons_against(f, config, family, bar))]
        if (why := unreachable(task, family, findings[task.id], config)) is not None:
            reasons.append(why)
        if (standing := reviewed.get(task.id)) is not None:
            if standing.stale:
                report.add("stale-review", task.id, standing.stale_note())
            elif (said := standing.reason()) is not None:
                reasons.append(said)
        reasons.sort()
        by_source[task.source_id].append(
            Verdict(
                task_id=task.id,
                source_id=task.source_id,
                family=task.family,
                accepted=not reasons,
                reasons=reasons,
                thresholds_fingerprint=fingerprint,
            )
        )
    for source_id, verdicts in sorted(by_source.items()):
        if ctx.store.write_records(source_id, verdicts):
            report.written.append(ctx.store.table_key(Verdict.table, source_id))
    for verdict in (v for vs in by_source.values() for v in vs):
        report.add(
            "accepted" if verdict.accepted else "rejected", verdict.task_id, "; ".join(verdict.reasons)
        )
        report.counts.update(r.split(":", 1)[0] for r in verdict.reasons)
    accepted, rejected = len(report.labels("accepted")), len(report.labels("rejected"))
    report.lines = [
        f"gate: {accepted} accepted, {rejected} rejected; {len(report.written)} verdict files written"
    ]
    if stale := report.labels("stale-review"):
        report.lines.append(f"gate: {len(stale)} reviews are stale (their task changed) and were not applied")
    return report
