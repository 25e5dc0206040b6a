"""LLM agents on the benchmark's tasks: the DSGym / DARE-bench loop, grading by execution, evaluation reports.

report = evaluate(ctx, "my-endpoint", release="dareforge", split="test")
console.print(render_table(report))
"""

from dareforge.agents.evaluate import (
    OUTCOMES,
    Cell,
    EvaluationError,
    EvaluationReport,
    evaluate,
    render_table,
    stored_trajectories,
)
from dareforge.agents.grading import PASS_BARS, answers_file, passed
from dareforge.agents.loop import classify, run_agent, trajectory_id
from dareforge.agents.protocol import SYSTEM_PROMPT, parse_reply

__all__ = [
    "OUTCOMES",
    "PASS_BARS",
    "SYSTEM_PROMPT",
    "Cell",
    "EvaluationError",
    "EvaluationReport",
    "answers_file",
    "classify",
    "evaluate",
    "parse_reply",
    "passed",
    "render_table",
    "run_agent",
    "stored_trajectories",
    "trajectory_id",
]
