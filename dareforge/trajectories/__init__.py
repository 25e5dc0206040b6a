"""Training trajectories: gold ones played from IF reference pipelines (no LLM), and K sampled ones per task and
endpoint, every one played by the agent loop in the sandbox and verified by execution.

report = gold_trajectories(ctx, release="dareforge", split="train")   # one per IF task; report.failed says why
report = synthesize(ctx, release="dareforge")                         # synthesize.* in the config
"""

from dareforge.trajectories.gold import (
    GOLD_ENDPOINT,
    GOLD_KIND,
    GoldClient,
    GoldError,
    GoldReport,
    Regrade,
    gold_replies,
    gold_trajectories,
    regrade,
)
from dareforge.trajectories.synthesize import (
    SAMPLE_KIND,
    EndpointSamples,
    FamilyCounts,
    SynthesisError,
    SynthesisReport,
    TaskSet,
    endpoints_to_sample,
    is_valid,
    render_table,
    synthesize,
    task_set,
)

__all__ = [
    "GOLD_ENDPOINT",
    "GOLD_KIND",
    "SAMPLE_KIND",
    "EndpointSamples",
    "FamilyCounts",
    "GoldClient",
    "GoldError",
    "GoldReport",
    "Regrade",
    "SynthesisError",
    "SynthesisReport",
    "TaskSet",
    "endpoints_to_sample",
    "gold_replies",
    "gold_trajectories",
    "is_valid",
    "regrade",
    "render_table",
    "synthesize",
    "task_set",
]
