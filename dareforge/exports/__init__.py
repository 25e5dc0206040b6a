"""Training-data exports of a release: SFT chat records and RL tasks with a reward, versioned like releases.

- `sft.build_sft_export`: chosen trajectories as `messages` (and ShareGPT `conversations`, and the tool-calling
  form) records;
- `rl.build_rl_export`: tasks as prompts, file lists and a reward spec, without answers;
- `reward.reward` / `trajectory_reward`: DARE-bench's reward of a predictions file or a graded trajectory;
- `base.load_export` / `list_export_versions` / `verify_export`: read finished versions under `exports/<name>/`.

An `Export` is published like a release: `LocalTarget(folder).publish(export)` or `HubTarget(ns).publish(export)`.
"""

from dareforge.exports.base import (
    Export,
    ExportError,
    ExportResult,
    list_export_versions,
    load_export,
    verify_export,
)
from dareforge.exports.reward import RewardResult, RewardSpec, reward, trajectory_reward, workspace_reward
from dareforge.exports.rl import build_rl_export
from dareforge.exports.sft import build_sft_export

__all__ = [
    "Export",
    "ExportError",
    "ExportResult",
    "RewardResult",
    "RewardSpec",
    "build_rl_export",
    "build_sft_export",
    "list_export_versions",
    "load_export",
    "reward",
    "trajectory_reward",
    "verify_export",
    "workspace_reward",
]
