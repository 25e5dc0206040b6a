"""The LLM judge of trajectories: DSGym's six criteria, scored 1-5, stored as `Judgement` records.

report = judge_trajectories(ctx)            # every gold--* and sampled--* partition, with judge.endpoint
print(report.summary())
"""

from dareforge.judge.judge import (
    JUDGE_VERSION,
    JudgeError,
    JudgeReport,
    judge_one,
    judge_trajectories,
    judgement_partition,
    trajectory_partitions,
)
from dareforge.judge.prompt import CRITERIA, CRITERION_FIELDS, MalformedReply, build_messages, parse_reply

__all__ = [
    "CRITERIA",
    "CRITERION_FIELDS",
    "JUDGE_VERSION",
    "JudgeError",
    "JudgeReport",
    "MalformedReply",
    "build_messages",
    "judge_one",
    "judge_trajectories",
    "judgement_partition",
    "parse_reply",
    "trajectory_partitions",
]
