"""Solvability checks: is there something to learn, does the reference run in time, did it certify and run."""

from __future__ import annotations

import json

import pandas as pd

from dareforge.config import Config
from dareforge.generators.questions.scripts import ANSWER_FILE, subtask_file
from dareforge.validators.check import Finding, TaskView


class Learnable:
    """MM/TS: strong reference score minus baseline score on the task's metric (the margin)."""

    name = "learnable"

    def run(self, view: TaskView, config: Config) -> Finding:
        if view.family.exact:
            return Finding("IF tasks are judged by exact reproduction", None)
        if view.is_question:
            return Finding("question tasks are judged by their certified answer", None)
        scores = view.task.scores
        if scores.strong is None or scores.baseline is None:
            return Finding("no strong or baseline score recorded; the margin cannot be measured", None)
        margin = scores.strong - scores.baseline
        return Finding(
            f"strong reference beats the baseline by {margin:.3f} {view.task.metric.name} "
            f"({scores.strong:.3f} vs {scores.baseline:.3f})",
            margin,
            details={"strong": scores.strong, "baseline": scores.baseline},
        )


class Runtime:
    """The reference's CPU seconds as a share of the per-execution limit (of one run, where the certificate
    makes several: the family's `certificate_runs`)."""

    name = "runtime"

    def run(self, view: TaskView, config: Config) -> Finding:
        task = view.task
        seconds = task.scores.reference_seconds
        if seconds is None:
            return Finding("no reference seconds recorded", None)
        limit = task.limits.seconds_per_execution
        note = ""
        runs = view.family.certificate_runs
        if runs > 1:
            seconds /= runs
            note = f" (one of the certificate's {runs} runs)"
        share = seconds / limit
        return Finding(
            f"reference takes {seconds:.2f}s{note}, {share:.1%} of the {limit}s limit",
            share,
            details={"seconds": seconds, "limit": limit},
        )


class Certificate:
    """Flags a task the generator rejected (failed or nondeterministic reference)."""

    name = "certificate"

    def run(self, view: TaskView, config: Config) -> Finding:
        if view.task.status == "rejected":
            return Finding(view.task.reject_reason or "rejected without a reason", None, flagged=True)
        return Finding("reference certified", 1.0)


class ReferenceRuns:
    """Flags a missing reference output, or one with a missing target column or NaN in a target column."""

    name = "reference-runs"

    def run(self, view: TaskView, config: Config) -> Finding:
        if view.is_question:
            return self._answers(view)
        name = view.family.files.reference
        if not view.has("private", name):
            return Finding(f"reference output private/{name} is missing", None, flagged=True)
        try:
            frame = view.frame("private", name)
        except (ValueError, OSError) as exc:
            return Finding(f"reference output private/{name} cannot be read: {exc}", None, flagged=True)
        targets = view.task.metric.target_columns
        absent = [c for c in targets if c not in frame.columns]
        if absent:
            return Finding(
                f"reference output private/{name} lacks target column(s) {absent}", None, flagged=True
            )
        nan = {c: int(n) for c in targets if (n := pd.isna(frame[c]).sum())}
        if nan:
            return Finding(
                f"reference output private/{name} has NaN targets: {nan}", None, flagged=True, details=nan
            )
        return Finding(f"reference output private/{name} has {len(frame)} complete rows", 1.0)

    def _answers(self, view: TaskView) -> Finding:
        """A question task: answer.json and each sub-task's file hold a defined answer."""
        if view.task.status == "rejected":
            return Finding(
                "rejected at generation, so no certified answer (the certificate check says why)", None
            )
        names = [ANSWER_FILE, *(subtask_file(s.id) for s in view.task.subtasks)]
        for name in names:
            if not view.has("private", name):
                return Finding(f"certified answer private/{name} is missing", None, flagged=True)
            try:
                answer = json.loads(view.path("private", name).read_text())["answer"]
            except (ValueError, KeyError, TypeError) as exc:
                return Finding(f'private/{name} is not {{"answer": ...}} JSON: {exc}', None, flagged=True)
            if answer is None or answer == "" or answer == []:
                return Finding(f"private/{name} holds no answer ({answer!r})", None, flagged=True)
        return Finding(f"{len(names)} certified answer file(s) hold a defined answer", 1.0)


TASK_CHECKS = (Learnable(), Runtime(), Certificate(), ReferenceRuns())
RUN_CHECKS: tuple = ()
