"""Sensitivity: does every requirement an IF instruction states change the predictions?

The mutants are run when the task is generated (`reference_solutions.sensitivity`), not here: the generator
needs the result to decide what the instruction states, the reference worker and the task's files are at
hand then, and a re-validation (a changed threshold, a new check) never refits them. This check reads the
stored `private/sensitivity.json` and reports it as every other finding is reported: its score is the number
of stated requirements that matter, which the gate compares with `validate.min_sensitive_requirements`; its
details hold each requirement (stated, matters, rows that differ, error), the counts and the
share of stated requirements that matter. It flags a task whose instruction leaves out a requirement that
changes the predictions (an unstated requirement whose mutant differs): an agent could not know it.
"""

from __future__ import annotations

from dataclasses import asdict

from dareforge.config import Config
from dareforge.reference_solutions.sensitivity import SENSITIVITY, Sensitivity
from dareforge.validators.check import Finding, TaskView


class SensitivityCheck:
    name = "sensitivity"

    def run(self, view: TaskView, config: Config) -> Finding:
        if not view.has("private", SENSITIVITY):
            return Finding(f"no private/{SENSITIVITY}: only IF tasks are mutation-tested", None)
        found = Sensitivity.from_json(view.path("private", SENSITIVITY).read_text())
        stated, mattering, silent = found.stated, found.mattering, found.silent
        details = {
            "requirements": [asdict(r) for r in found.requirements],
            "stated": len(stated),
            "matter": len(mattering),
            "share": len(mattering) / len(stated) if stated else None,
        }
        idle = [r.name for r in stated if not r.matters]
        reason = f"{len(mattering)} of {len(stated)} stated requirements change the predictions" + (
            f"; not: {', '.join(idle)}" if idle else ""
        )
        if silent:
            names = ", ".join(r.name for r in silent)
            return Finding(
                f"the instruction leaves out requirements that change the predictions: {names}",
                len(mattering),
                flagged=True,
                details=details,
            )
        return Finding(reason, len(mattering), details=details)


TASK_CHECKS = (SensitivityCheck(),)
