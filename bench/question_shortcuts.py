"""Question tiers and the one-step baseline on the builtin catalog's QA and Lake tasks.

Per family: the accepted questions by tier (easy / medium / hard, `generators/questions/tiers.py`), the hard
share (issue 27's target: at least 30%), how many hard ones have sub-tasks (all must), and the share of hard
questions the one-step baseline solves, computed here afresh over the public files (target: at most 10%;
a question it solves cannot be labelled hard, so anything above 0 is a defect). Also: how many pipelines
(three operations or more, or a join) the shortcut demoted to easy, and the baseline's share over every
question (booleans aside: a guess is right half the time).
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from bench.common import bench_config, generated
from dareforge.context import RunContext
from dareforge.families.registry import family_of
from dareforge.generators.questions.scripts import ANSWER_FILE
from dareforge.generators.questions.tiers import HARD_OPERATIONS, shortcut_solves, visible_frames
from dareforge.schema import Task, Verdict
from dareforge.validators.validate import validate

TARGET_HARD = 0.3
TARGET_SOLVED_HARD = 0.1


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench_config(tmp)
        cfg.validate_.data_docs = False
        ctx = generated(cfg)
        validate(ctx)
        for line in tier_lines(ctx, "builtin"):
            print(line)


def tier_lines(ctx: RunContext, catalog: str) -> list[str]:
    """The figures of the module doc over the accepted question tasks in `ctx`'s (validated) store."""
    accepted = {v.task_id for v in ctx.store.iter_records(Verdict) if v.accepted}
    tiers: dict[str, Counter] = defaultdict(Counter)
    with_subtasks, solved, demoted = Counter(), Counter(), Counter()
    asked, solved_all = Counter(), Counter()
    for task in ctx.store.iter_records(Task):
        if task.id not in accepted or not family_of(task).asks_question or task.variant_of:
            continue
        family = task.family
        tiers[family][task.difficulty or "not tiered"] += 1
        answer = json.loads(ctx.store.read_bytes(f"tasks/{task.id}/private/{ANSWER_FILE}"))["answer"]
        public = Path(ctx.store.path(f"tasks/{task.id}/public"))
        hit = task.metric.answer_type != "boolean" and shortcut_solves(
            task.metric, answer, visible_frames(public)
        )
        if task.metric.answer_type != "boolean":
            asked[family] += 1
            solved_all[family] += hit
        if task.difficulty == "hard":
            with_subtasks[family] += bool(task.subtasks)
            solved[family] += hit
        pipeline = len(task.operations) >= HARD_OPERATIONS or "join" in task.operations
        demoted[family] += pipeline and task.difficulty == "easy"
    lines = []
    for family in sorted(tiers):
        counts = tiers[family]
        total, hard = sum(counts.values()), counts["hard"]
        share, solved_share = hard / max(total, 1), solved[family] / max(hard, 1)
        lines.append(
            f"questions ({family}, {catalog}): {total} accepted: "
            + ", ".join(
                f"{tier} {counts[tier]}" for tier in ("easy", "medium", "hard", "not tiered") if counts[tier]
            )
        )
        lines.append(
            f"  hard share {share:.0%} (target >= {TARGET_HARD:.0%}) {'OK' if share >= TARGET_HARD else 'MISSED'}; "
            f"{with_subtasks[family]} of {hard} hard with sub-tasks"
        )
        lines.append(
            f"  one-step baseline solves {solved[family]} of {hard} hard ({solved_share:.0%}, target <= "
            f"{TARGET_SOLVED_HARD:.0%}) {'OK' if solved_share <= TARGET_SOLVED_HARD else 'MISSED'}; "
            f"{solved_all[family]} of {asked[family]} of all (booleans aside); "
            f"{demoted[family]} pipelines demoted to easy by it"
        )
    return lines
