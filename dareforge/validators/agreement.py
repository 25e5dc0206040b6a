"""How the automated gate agrees with people: each check's (and each family's) precision and recall against
reviewers, the figure that says whether the validators can be trusted.

The positive class is "keep the task out". A reviewer says so with a standing, non-stale `rejected` or
`needs-fix` review (`dareforge.reviews`; a stale review judged other content and is left out); a check says so
when the task's verdict carries that check's reason; the gate as a whole, when any check's does (the review's
own reason never counts for the gate). Precision: of the reviewed tasks a check kept out, the share reviewers
also kept out; recall: of the reviewed tasks reviewers kept out, the share the check caught. Undefined (None)
when its denominator is empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dareforge.reviews import CHECK, standing_of
from dareforge.schema import Review, Task, Validation, Verdict

GATE = "gate (any check)"


@dataclass
class Agreement:
    scope: str
    """A check's name, a family's name, or `GATE`."""
    both: int = 0
    """Kept out by the check and by the reviewer."""
    gate_only: int = 0
    reviewer_only: int = 0
    neither: int = 0

    @property
    def reviewed(self) -> int:
        return self.both + self.gate_only + self.reviewer_only + self.neither

    @property
    def precision(self) -> float | None:
        flagged = self.both + self.gate_only
        return self.both / flagged if flagged else None

    @property
    def recall(self) -> float | None:
        wanted = self.both + self.reviewer_only
        return self.both / wanted if wanted else None

    def count(self, gate_out: bool, reviewer_out: bool) -> None:
        if gate_out and reviewer_out:
            self.both += 1
        elif gate_out:
            self.gate_only += 1
        elif reviewer_out:
            self.reviewer_only += 1
        else:
            self.neither += 1


@dataclass
class AgreementTable:
    by_check: list[Agreement]
    by_family: list[Agreement]
    reviewed: int
    stale: int
    unjudged: int
    """Reviewed tasks without a verdict (never validated): left out of the table."""


def _checks_of(reasons: Iterable[str]) -> set[str]:
    return {r.split(":", 1)[0] for r in reasons if not r.startswith(f"{CHECK}:")}


def agreement(
    tasks: Iterable[Task],
    verdicts: Iterable[Verdict],
    reviews: Iterable[Review],
    findings: Iterable[Validation] = (),
) -> AgreementTable:
    """The agreement table over every task with a standing review and a verdict. `findings` name the checks
    that ran on the reviewed tasks, so a check that never kept one out still gets its row (recall 0)."""
    standing = standing_of(tasks, reviews)
    by_task = {v.task_id: v for v in verdicts}
    current = {t: s for t, s in standing.items() if not s.stale}
    judged = {t: s for t, s in current.items() if t in by_task}
    checks = {f.check for f in findings if f.task_id in judged}
    for task_id in judged:
        checks |= _checks_of(by_task[task_id].reasons)
    rows = {c: Agreement(c) for c in sorted(checks)}
    families: dict[str, Agreement] = {}
    gate = Agreement(GATE)
    for task_id, s in sorted(judged.items()):
        verdict = by_task[task_id]
        failed = _checks_of(verdict.reasons)
        for check, row in rows.items():
            row.count(check in failed, s.keeps_out)
        families.setdefault(verdict.family, Agreement(verdict.family)).count(bool(failed), s.keeps_out)
        gate.count(bool(failed), s.keeps_out)
    return AgreementTable(
        by_check=[gate, *rows.values()],
        by_family=[families[f] for f in sorted(families)],
        reviewed=len(judged),
        stale=len(standing) - len(current),
        unjudged=len(current) - len(judged),
    )
