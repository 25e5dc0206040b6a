"""Before and after, per family, with bootstrap intervals over tasks.

A task's value is the mean over its samples (pass share and score; a failed attempt scores 0, as in
`evaluate`). The intervals resample tasks with replacement, the same resample for both models (paired), seeded,
so the change's interval accounts for tasks being easy or hard for both. 95% percentile intervals.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    def text(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


@dataclass(frozen=True)
class Change:
    """One family (or `total`): tasks, and before/after/change of pass rate and mean score."""

    family: str
    tasks: int
    pass_before: Interval
    pass_after: Interval
    pass_change: Interval
    score_before: Interval
    score_after: Interval
    score_change: Interval

    @property
    def verdict(self) -> str:
        """What the score change's interval says: it excludes 0 one way or the other, or it does not."""
        if self.score_change.low > 0:
            return "better"
        if self.score_change.high < 0:
            return "worse"
        return "no measurable change"

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def per_task(trajectories: Iterable[Any]) -> dict[str, tuple[str, float, float]]:
    """task id -> (family, pass share, mean score) over a model's attempts (NaN or missing scores count 0)."""
    sums: dict[str, list[Any]] = {}
    for t in trajectories:
        score = t.score if t.score is not None and t.score == t.score else 0.0
        entry = sums.setdefault(t.task_id, [t.family, 0, 0.0, 0])
        entry[1] += int(bool(t.passed))
        entry[2] += float(score)
        entry[3] += 1
    return {k: (f, passed / n, total / n) for k, (f, passed, total, n) in sums.items()}


def _interval(values: list[float], draws: list[list[int]]) -> Interval:
    means = sorted(sum(values[i] for i in draw) / len(draw) for draw in draws)
    lo = means[int((1 - LEVEL) / 2 * (len(means) - 1))]
    hi = means[int((1 + LEVEL) / 2 * (len(means) - 1))]
    return Interval(sum(values) / len(values), lo, hi)


def compare(
    before: Mapping[str, tuple[str, float, float]],
    after: Mapping[str, tuple[str, float, float]],
    resamples: int,
    seed: int,
) -> list[Change]:
    """One Change per family over the tasks both models were evaluated on, then `total`; families sorted.

    A task only one side has is an error: the two evaluations must cover the same tasks to be compared."""
    if set(before) != set(after):
        missing = sorted(set(before) ^ set(after))
        raise ValueError(f"before and after were evaluated on different tasks: {missing[:5]}")
    groups: dict[str, list[str]] = {}
    for task_id in sorted(before):
        groups.setdefault(before[task_id][0], []).append(task_id)
    groups = dict(sorted(groups.items()))
    groups["total"] = sorted(before)
    changes = []
    for family, ids in groups.items():
        if not ids:
            continue
        rng = random.Random(f"{seed}:{family}")
        draws = [[rng.randrange(len(ids)) for _ in ids] for _ in range(resamples)]
        cols = {
            name: [side[i][k] for i in ids]
            for name, side, k in (
                ("pass_before", before, 1),
                ("pass_after", after, 1),
                ("score_before", before, 2),
                ("score_after", after, 2),
            )
        }
        pass_diff = [a - b for a, b in zip(cols["pass_after"], cols["pass_before"], strict=True)]
        score_diff = [a - b for a, b in zip(cols["score_after"], cols["score_before"], strict=True)]
        changes.append(
            Change(
                family,
                len(ids),
                _interval(cols["pass_before"], draws),
                _interval(cols["pass_after"], draws),
                _interval(pass_diff, draws),
                _interval(cols["score_before"], draws),
                _interval(cols["score_after"], draws),
                _interval(score_diff, draws),
            )
        )
    return changes
