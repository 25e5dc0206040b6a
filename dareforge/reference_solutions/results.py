"""What grading returns: a score, why it is the worst one when the submission was refused, and how an answer
was compared."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field


class GradeResult(BaseModel):
    """`score` is the metric averaged over target columns; on `error`, the metric's worst score.

    The worst score is 0.0 for higher-is-better metrics (all task-family metrics) and +inf for
    lower-is-better ones (rmse, mae, rmsle, log-loss), so a failed grade never looks like a good one.
    `rows` counts the submission's data rows (0 when it could not be read).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    score: float
    error: str | None = None
    rows: int = 0
    method: str | None = Field(
        None,
        description="Question tasks: how the answer was compared (e.g. which string comparison decided).",
    )

    @property
    def ok(self) -> bool:
        return self.error is None


Paraphrase = Callable[[str, str], bool | None]
"""`paraphrase(predicted, target)`: an LLM judge's verdict whether two texts say the same; None when it could
not decide (the grade then falls back to the normalised exact match)."""


class Rejected(Exception):
    """A problem with a submission or an answers file; the caller decides whose fault it is."""
