"""The gate's thresholds (`validate:` in the config), in a module of their own: the one section every check's
author reads and extends."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt

from dareforge.config_limits import Section, Share, Wait


class ValidateConfig(Section):
    """Thresholds the gate applies to stored check scores; changing them needs no re-run of the checks."""

    leakage_max_single_feature: float = Field(
        0.98, description="Reject when one feature alone scores this high on the task's metric (held out)."
    )
    leakage_max_formula_fit: float = Field(
        0.9999,
        description="Reject when one or two features compute a numeric target this exactly (R² of a line "
        "through them or their logarithms, on the held-out rows): a sum, difference or ratio.",
    )
    leakage_max_formula_share: Share = Field(
        0.95,
        description="Reject when one or two features (or parts of a date) reproduce a numeric target within "
        "0.1% on this share of the held-out rows, beyond its most common value's share: a formula that holds "
        "on most rows but not all, whose outliers ruin the R² of leakage_max_formula_fit.",
    )
    leakage_max_formula_over_strong: float = Field(
        0.0,
        ge=-1.0,
        le=1.0,
        description="Reject when a line through one or two features (or parts of a date) that reproduces at "
        "least half the held-out rows exactly scores an R² this far above the strong reference, or more: the "
        "target is their arithmetic, and the task's best model knows less than the formula.",
    )
    leakage_max_label_copy: Share = Field(
        0.9,
        description="Reject when one feature (or part of a date) reproduces a class label on the held-out rows "
        "this far from the most common label's share to every row (0.9: 95% of the rows of a balanced label): "
        "the label itself, a one-to-one relabelling or a monotone map, whatever values it took in training.",
    )
    leakage_max_order_correlation: float = Field(
        0.95, description="Reject when the id or row order correlates this strongly with the target."
    )
    leakage_max_shared_rows: Share = Field(0.05, description="Most test rows allowed to repeat a train row.")
    duplicate_min_similarity: float = Field(
        0.8, description="MinHash Jaccard at or above which two sources count as the same dataset."
    )
    min_learnable_margin: float = Field(0.05, description="Least margin of the strong score over the bar.")
    allow_task_bars: bool = Field(
        True,
        description="Accept a goal task whose strong reference scores below its family's bar at its own bar "
        "(`Task.pass_bar`, stated in its instruction) when that bar discriminates; False: reject every such task.",
    )
    min_task_bar_gap: Share = Field(
        0.02,
        description="A task's own bar must exceed the upper bound of the bootstrap interval of what "
        "task_bar_floor names by at least this much (else reject: `reachable`).",
    )
    task_bar_floor: Literal["trivial", "weakest-model"] = Field(
        "trivial",
        description="What a task's own bar must sit clearly above: the trivial answer (as a task at its family's "
        "bar, which a linear model may pass too), or also the solver ladder's weakest model (stricter: a task "
        "whose linear model is as good as its strong reference is not released at a lowered bar).",
    )
    max_reference_share_of_limit: Share = Field(
        0.5, description="The reference must run within this share of the per-execution time limit."
    )
    min_ladder_tau: float = Field(0.5, description="Least Kendall tau, ladder order vs scores, pairs apart.")
    min_ladder_spread: Share = Field(0.1, description="Least share of ladder rung pairs apart.")
    ladder_cpu_seconds: Wait = Field(60.0, description="Ladder CPU s per goal task; 0: off.")
    data_docs: bool = Field(True, description="Build great-expectations Data Docs HTML for each run.")
    max_shortcut_share: Share = Field(
        0.5, description="Reject when more than this share of probed models solve a task without its data."
    )
    max_trivial_share: Share = Field(
        0.9,
        description=(
            "Reject an IF task (graded by the share of rows reproduced) when one trivial answer, a constant, "
            "reproduces more than this share of its rows."
        ),
    )
    min_sensitive_requirements: NonNegativeInt = Field(
        4, description="Reject an IF task when fewer of its stated requirements change the predictions."
    )
