"""The gate: turn stored findings into accept/reject with the thresholds in `validate:`.

Only this module knows thresholds. It reads the `validations` table and writes `verdicts`, so changing a
threshold and re-running `dareforge gate` re-decides every task without re-running a single check.
"""

from __future__ import annotations

import json
import operator
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from dareforge.config import ValidateConfig
from dareforge.context import RunContext
from dareforge.families.family import Family
from dareforge.families.registry import REGISTERED
from dareforge.report import StageReport
from dareforge.schema import Task, Validation, Verdict


@dataclass(frozen=True)
class Threshold:
    """Reject when `score <compare> config.<setting>` (or the finding's `details[detail]`, when set); with
    `setting` None the limit is `fixed`, or with `pass_bar` the task family's pass bar. `exact_only`: the
    threshold applies to exact-graded (IF) families only."""

    compare: Callable[[float, float], bool]
    symbol: str
    setting: str | None
    fixed: float | None = None
    detail: str | None = None
    pass_bar: bool = False
    exact_only: bool = False

    def limit(self, config: ValidateConfig, family: Family | None) -> float:
        if self.pass_bar:
            if family is None:
                raise ValueError("a threshold at the pass bar needs the task's family")
            return family.pass_bar
        return self.fixed if self.setting is None else getattr(config, self.setting)

    def where(self) -> str:
        if self.pass_bar:
            return "the family's pass bar"
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


def reasons_against(finding: Validation, config: ValidateConfig, family: Family | None = None) -> str | None:
    """Why this finding rejects its task (of `family`, which thresholds at the pass bar need), or None."""
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
        limit = threshold.limit(config, family)
        if threshold.compare(value, limit):
            named = f"{threshold.detail} " if threshold.detail else ""
            failed.append(f"{named}{value:.3f} {threshold.symbol} {threshold.where()}={limit:g}")
    return f"{finding.check}: {finding.reason} ({'; '.join(failed)})" if failed else None


def gate(ctx: RunContext) -> StageReport:
    """Decide every validated task and store the verdicts. The report's outcomes: `accepted` and `rejected`
    (task -> its reasons); its counts: rejected tasks per check that rejected them."""
    config = ctx.config.validate_
    fingerprint = ctx.config.fingerprint("validate_")
    findings: dict[str, list[Validation]] = defaultdict(list)
    for finding in ctx.store.iter_records(Validation):
        findings[finding.task_id].append(finding)
    by_source: dict[str, list[Verdict]] = defaultdict(list)
    for task in sorted(ctx.store.iter_records(Task), key=lambda t: t.id):
        if task.id not in findings:
            continue
        family = REGISTERED.get(task.family)
        reasons = sorted(r for f in findings[task.id] if (r := reasons_against(f, config, family)))
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
    report = StageReport("gate")
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
    return report
