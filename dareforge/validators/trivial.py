"""Trivial answers: can a task be passed without doing it?

The family's trivial answers (`Family.trivial`, see `dareforge.families.trivial`) are graded with the task's
own grader against the file attempts are graded against. The finding's score is the best one's score; its
details name it (`best`) and hold every trivial answer's score (`scores`). The gate rejects a task where the
best reaches the task's pass bar (its own where it carries one, else its family's), and an IF task (graded by the share of rows reproduced) where it scores
above `validate.max_trivial_share`.

Flagged: an IF task whose reference predictions are one constant in a target column. The instruction says
every step changes the answer, yet one number reproduces all of it; no threshold makes such a task sound.
"""

from __future__ import annotations

from dareforge.config import Config
from dareforge.families.family import constant_column, read_text
from dareforge.families.registry import bar_of
from dareforge.reference_solutions.graders import grade
from dareforge.validators.check import Finding, TaskView


class Trivial:
    name = "trivial"

    def run(self, view: TaskView, config: Config) -> Finding:
        family, task = view.family, view.task
        if task.status == "rejected":
            return Finding(
                "rejected at generation, so nothing to grade (the certificate check says why)", None
            )
        truth = view.path("private", family.files.truth)
        if not truth.is_file():
            return Finding(f"no private/{family.files.truth} to grade trivial answers against", None)
        # Read once as the grader reads a table (every cell as text): each trivial answer is graded against it.
        against = truth if family.asks_question else read_text(truth)
        scores = {}
        for name, submission in family.trivial(view).items():
            result = grade(task.metric, submission, against)
            scores[name] = result.score
        if not scores:
            return Finding(f"the {family.name} family declares no trivial answer for this task", None)
        best = max(scores, key=lambda name: scores[name])  # ties: the first declared
        score = scores[best]
        details = {"best": best, "scores": scores}
        constant = constant_column(against, task.metric.target_columns) if family.exact else None
        if constant is not None:
            return Finding(
                f"the reference predictions are one constant ({constant}): a single guess reproduces every row",
                score,
                flagged=True,
                details=details,
            )
        # A question's guesses are values ("1", "the first `x` of data.csv"): naming the best one beside its score
        # would tell a public reader how close that value is to the answer. The details (private) name it.
        which = "a guess" if family.asks_question else best
        return Finding(
            f"best trivial answer: {which} scores {score:.3f} {task.metric.name} (bar {bar_of(task):g})",
            score,
            details=details,
        )


TASK_CHECKS = (Trivial(),)
RUN_CHECKS: tuple = ()
