"""What the exports decide from a task's family name, kept together until families are objects that say it
themselves: DARE-bench's task kind and variant, which private file its ground truth comes from, and the RL
card's words for the reward."""

from __future__ import annotations

DARE_BENCH_KINDS = {
    "Class-IF": ("class", 1),
    "Class-MM": ("class", 2),
    "Reg-IF": ("reg", 1),
    "Reg-MM": ("reg", 2),
    "TS-XF": ("ts", 1),
    "TS-CF": ("ts", 2),
}
"""Family -> (DARE-bench's task kind, variant: 1 for question_v1, 2 for question_v2); other families have no
DARE-bench counterpart."""


def dare_bench_truth_file(family: str) -> str:
    """The private file DARE-bench's ground truth is cut from: IF is graded against the reference run."""
    return "reference_predictions.csv" if family.endswith("-IF") else "answers.csv"


def rl_reward_text(family: str) -> str:
    """What the RL card says a task earns beyond the format's 0.1."""
    return "1.0 for an exact match" if family.endswith("-IF") else "the metric score"
