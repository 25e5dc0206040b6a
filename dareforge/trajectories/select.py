"""Which trajectories become training data: execution verification, judge thresholds, a diversity filter, and
one of DARE-bench's selection strategies. Pure functions on records: the caller reads and writes the store.

`select` decides every trajectory it is given, in this order, and records why each dropped one was dropped:

1. verification: the grader passed it (`passed` is True, or the caller's `valid` predicate, e.g. one that
   re-applies the current pass bars to the stored score), else "not verified (...)";
2. judge: every `scored` judgement of it reaches `judge.min_overall` on average and `judge.min_criterion` on
   each criterion; a trajectory without a scored judgement passes unless `judge.require_judgement`;
3. diversity: within a task, a trajectory whose code is a near-duplicate of one already kept (MinHash
   estimate of the Jaccard similarity of code-token shingles at or above `judge.max_similarity`) is dropped;
   trajectories are visited in the strategy's order of preference, so the preferred twin stays;
4. strategy, per task, among what is left:
   - `fastest-valid`: the one with the fewest code executions, then the fewest seconds;
   - `all-valid`: all of them;
   - `diverse-valid`: all of them, on diverse tasks only;
   - `top2-diverse`: the two best by score (higher first), then by speed, on diverse tasks only.

A **diverse task** is, in our reading of DARE-bench's "diverse tasks", one whose attempts disagree: among its
attempts (the trajectories given, or `attempts` when passed; attempts the agent's endpoint failed, outcome
`llm-error`, are not counted) at least one passed and at least one did not. Those are the informative tasks:
the model can solve them but not reliably, while a task every sample solves teaches little and one no sample
solves has no valid trajectory. Computed on verification alone, before judge and diversity filters.

Ties are broken by trajectory id, so the same input always gives the same selection.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dareforge.config import JudgeConfig
from dareforge.errors import DareforgeError
from dareforge.judge.prompt import CRITERION_FIELDS
from dareforge.minhash import minhash, similarity, token_hashes
from dareforge.schema import Judgement, Trajectory

STRATEGIES = ("fastest-valid", "all-valid", "diverse-valid", "top2-diverse")
DIVERSE_ONLY = frozenset({"diverse-valid", "top2-diverse"})
SHINGLE_TOKENS = 5
"""Code tokens per shingle: long enough that shared imports alone do not make two solutions alike."""

Stage = Literal["verification", "judge", "duplicate", "strategy"]


class SelectionError(DareforgeError):
    pass


@dataclass(frozen=True)
class Drop:
    trajectory_id: str
    task_id: str
    stage: Stage
    reason: str


@dataclass(frozen=True)
class Selection:
    """The kept trajectories (by task id, then in the strategy's order) and why each other one was dropped."""

    strategy: str
    kept: tuple[Trajectory, ...]
    dropped: tuple[Drop, ...]
    diverse_tasks: frozenset[str]

    @property
    def kept_ids(self) -> list[str]:
        return [t.id for t in self.kept]

    @property
    def reasons(self) -> dict[str, str]:
        """Trajectory id -> why it was dropped."""
        return {d.trajectory_id: d.reason for d in self.dropped}

    def counts(self) -> Counter:
        """Dropped trajectories per stage."""
        return Counter(d.stage for d in self.dropped)


def select(
    trajectories: Iterable[Trajectory],
    judgements: Iterable[Judgement] | None = None,
    *,
    strategy: str,
    judge_config: JudgeConfig,
    attempts: Iterable[Trajectory] | None = None,
    valid: Callable[[Trajectory], bool] | None = None,
) -> Selection:
    """Select training trajectories; see the module doc. `attempts` (default: `trajectories`) defines which
    tasks are diverse, e.g. one model's K samples when `trajectories` also holds gold ones. `valid` decides
    verification (default: the stored `passed`)."""
    verified = valid or _passed
    if strategy not in STRATEGIES:
        raise SelectionError(
            f"unknown selection strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
        )
    ordered = sorted(trajectories, key=lambda t: (t.task_id, t.id))
    repeated = [i for i, n in Counter(t.id for t in ordered).items() if n > 1]
    if repeated:
        raise SelectionError(
            f"trajectory id(s) {', '.join(sorted(repeated)[:3])} given more than once; pass each trajectory "
            "once (read one partition per endpoint, or de-duplicate the union)"
        )
    counts = attempt_counts(ordered if attempts is None else attempts, verified)
    diverse = _diverse(counts)
    verdicts: dict[str, list[Judgement]] = defaultdict(list)
    for judgement in judgements or ():
        verdicts[judgement.trajectory_id].append(judgement)
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in ordered:
        by_task[trajectory.task_id].append(trajectory)

    preference = speed_key if strategy == "fastest-valid" else rank_key
    kept: list[Trajectory] = []
    dropped: list[Drop] = []
    for task_id, group in by_task.items():
        survivors = []
        for trajectory in group:
            if not verified(trajectory):
                dropped.append(Drop(trajectory.id, task_id, "verification", _unverified(trajectory)))
            elif (why := _judged_out(verdicts.get(trajectory.id, []), judge_config)) is not None:
                dropped.append(Drop(trajectory.id, task_id, "judge", why))
            else:
                survivors.append(trajectory)
        survivors.sort(key=preference)
        distinct = _distinct(survivors, judge_config.max_similarity, dropped)
        valid_count, total = counts.get(task_id, (0, 0))
        summary = f"{valid_count} of {total} attempts valid"
        chosen, why = _strategy(strategy, task_id, distinct, diverse, summary)
        kept.extend(chosen)
        chosen_ids = {t.id for t in chosen}
        dropped.extend(Drop(t.id, task_id, "strategy", why) for t in distinct if t.id not in chosen_ids)
    dropped.sort(key=lambda d: (d.task_id, d.trajectory_id))
    return Selection(strategy, tuple(kept), tuple(dropped), diverse)


def attempt_counts(
    attempts: Iterable[Trajectory], valid: Callable[[Trajectory], bool] | None = None
) -> dict[str, tuple[int, int]]:
    """Task id -> (attempts valid, attempts counted); attempts with outcome `llm-error` are not counted."""
    verified = valid or _passed
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for attempt in attempts:
        if attempt.outcome != "llm-error":
            counts[attempt.task_id][0] += verified(attempt)
            counts[attempt.task_id][1] += 1
    return {task: (passed, total) for task, (passed, total) in counts.items()}


def diverse_tasks(
    attempts: Iterable[Trajectory], valid: Callable[[Trajectory], bool] | None = None
) -> frozenset[str]:
    """Task ids whose attempts include at least one valid and one not (see the module doc)."""
    return _diverse(attempt_counts(attempts, valid))


def _diverse(counts: dict[str, tuple[int, int]]) -> frozenset[str]:
    return frozenset(task for task, (passed, total) in counts.items() if 0 < passed < total)


def executions(trajectory: Trajectory) -> int:
    return sum(1 for s in trajectory.steps if s.role == "execution")


def speed_key(trajectory: Trajectory) -> tuple:
    """Fewest code executions, then fewest seconds, then id."""
    return (executions(trajectory), trajectory.seconds, trajectory.id)


def rank_key(trajectory: Trajectory) -> tuple:
    """Highest score first (none last), then fastest."""
    score = trajectory.score if trajectory.score is not None else float("-inf")
    return (-score, *speed_key(trajectory))


def _passed(trajectory: Trajectory) -> bool:
    return trajectory.passed is True


def _unverified(trajectory: Trajectory) -> str:
    score = "none" if trajectory.score is None else f"{trajectory.score:.4g}"
    return f"not verified (outcome {trajectory.outcome}, score {score})"


def _judged_out(judgements: list[Judgement], config: JudgeConfig) -> str | None:
    scored = sorted((j for j in judgements if j.status == "scored"), key=lambda j: j.judge_endpoint)
    if not scored:
        if not config.require_judgement:
            return None
        what = f"judgement {judgements[0].status}" if judgements else "no judgement"
        return f"{what} (judge.require_judgement is set)"
    for judgement in scored:
        values = {f: getattr(judgement, f) for f in CRITERION_FIELDS}
        if any(v is None for v in values.values()):
            return f"judgement by {judgement.judge_endpoint} lacks criteria: stored incomplete, re-judge it"
        overall = judgement.overall if judgement.overall is not None else sum(values.values()) / len(values)
        if overall < config.min_overall:
            return f"judge overall {round(overall, 2):g} < judge.min_overall={config.min_overall:g}"
        low = sorted((v, f) for f, v in values.items() if v < config.min_criterion)
        if low:
            value, name = low[0]
            return f"judge {name} {value:g} < judge.min_criterion={config.min_criterion:g}"
    return None


_COMMENT = re.compile(r"#[^\n]*")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?|\S")


def code_text(trajectory: Trajectory) -> str:
    """The code that ran (execution steps); for a trajectory without them, the code its replies carried."""
    cells = [s.code for s in trajectory.steps if s.role == "execution" and s.code]
    if not cells:
        cells = [s.code for s in trajectory.steps if s.role == "assistant" and s.code]
    return "\n".join(cells)


def code_signature(trajectory: Trajectory) -> np.ndarray | None:
    """MinHash of the trajectory's code-token shingles (comments dropped); None when it has no code."""
    tokens = _TOKEN.findall(_COMMENT.sub("", code_text(trajectory)))
    if not tokens:
        return None
    width = min(SHINGLE_TOKENS, len(tokens))
    shingles = [" ".join(tokens[i : i + width]) for i in range(len(tokens) - width + 1)]
    return minhash(np.unique(token_hashes(shingles)))


def _distinct(ordered: list[Trajectory], max_similarity: float, dropped: list[Drop]) -> list[Trajectory]:
    """`ordered` minus near-duplicates of an earlier kept one (appending each such drop to `dropped`)."""
    kept: list[tuple[Trajectory, np.ndarray | None]] = []
    for trajectory in ordered:
        signature = code_signature(trajectory)
        twin, best = None, 0.0
        if signature is not None:  # no code, nothing to compare: never a duplicate
            for other, other_signature in kept:
                if other_signature is not None and (s := similarity(signature, other_signature)) > best:
                    twin, best = other, s
        if twin is not None and best >= max_similarity:
            reason = (
                f"near-duplicate of {twin.id} "
                f"(similarity {best:.2f} >= judge.max_similarity={max_similarity:g})"
            )
            dropped.append(Drop(trajectory.id, trajectory.task_id, "duplicate", reason))
        else:
            kept.append((trajectory, signature))
    return [t for t, _ in kept]


def _strategy(
    strategy: str, task_id: str, candidates: list[Trajectory], diverse: frozenset[str], summary: str
) -> tuple[list[Trajectory], str]:
    """(the chosen, why the others were not) for one task's candidates, already in the strategy's order."""
    if strategy in DIVERSE_ONLY and task_id not in diverse:
        return [], f"strategy {strategy}: task {task_id} is not diverse ({summary})"
    pick: Callable[[list[Trajectory]], list[Trajectory]] = {
        "fastest-valid": lambda c: c[:1],
        "all-valid": lambda c: c,
        "diverse-valid": lambda c: c,
        "top2-diverse": lambda c: c[:2],
    }[strategy]
    chosen = pick(candidates)
    return chosen, f"strategy {strategy} kept {', '.join(t.id for t in chosen)}"
