"""RL export: a release's tasks as prompts plus a reward rule, loadable with `datasets`.

`RlExport` (registered as `rl`) writes a versioned export (see `base`) with one row per task of the job in
`data/<split>.parquet` (the task's side in the release):

- `task_id`, `family`, `split`, `release` (`name@version` of the source release);
- `prompt`: the system and first user messages the agent loop sends (`dareforge.agents.protocol`), as
  `{role, content}`; an environment then runs the model's code in a sandbox holding the task's files;
- `files`: the task's public input files, `path` relative to the source release's public folder
  (`files/<ab>/<task_id>/<name>`) with name, size and sha256;
- `metric` and `reward_spec` (JSON of `dareforge.exports.reward.RewardSpec`): 0.1 for a well-formed
  predictions file, plus 1.0 for an exact IF match or the MM/TS metric score; its `pass_bar` is the score that
  passes the task, as its instruction states (2: the spec records it).

No answers: they stay in the release's private half (`answers/<ab>/<task_id>/<graded_against>`), which the trainer
passes to `dareforge.exports.reward.reward` to score an attempt.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

from dareforge.agents.protocol import system_prompt, task_prompt
from dareforge.exports import ExportError, export_card
from dareforge.exports.export_format import (
    ExportContent,
    ExportJob,
    TrainingExport,
    family_counts,
    release_ref,
    split_tables,
    turns,
)
from dareforge.exports.reward import reward_spec
from dareforge.exports.reward_hacks import release_battery
from dareforge.hashing import content_fingerprint
from dareforge.publish.release import PUBLIC_SCHEMA, Release, public_file_entries
from dareforge.publish.source_split import SPLITS
from dareforge.schema import Task

FORMAT = "dareforge-rl/2"

RL_SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.string(), False),
        pa.field("family", pa.string(), False),
        pa.field("split", pa.string(), False),
        pa.field("release", pa.string(), False),
        turns("prompt", "role", "content"),
        PUBLIC_SCHEMA.field("files"),
        PUBLIC_SCHEMA.field("metric"),
        pa.field("reward_spec", pa.string(), False),
    ]
)


def rl_row(task: Task, release: Release) -> dict:
    return {
        "task_id": task.id,
        "family": task.family,
        "split": release.splits[task.id],
        "release": f"{release.name}@{release.version}",
        "prompt": [
            {"role": "system", "content": system_prompt(task)},
            {"role": "user", "content": task_prompt(task)},
        ],
        "files": public_file_entries(task, release.manifest["format"]),
        "metric": task.metric.model_dump(),
        "reward_spec": reward_spec(task).model_dump_json(),
    }


class RlExport(TrainingExport):
    format = FORMAT

    def content(self, job: ExportJob, name: str) -> ExportContent:
        """The job's tasks, which must be its release's: rows point at the release's files."""
        release = job.release
        chosen = sorted({t.id: t for t in job.tasks}.values(), key=lambda t: t.id)
        if not chosen:
            raise ExportError(f"no tasks to export as {name!r}; pass a release's tasks (Release.tasks())")
        splits = release.splits
        outside = [t.id for t in chosen if t.id not in splits]
        if outside:
            raise ExportError(
                f"tasks {', '.join(outside[:5])} are not in release {release.name}@{release.version}; an RL "
                "export points at its release's files, so export that release's tasks only"
            )
        rows = [rl_row(t, release) for t in chosen]
        rows.sort(key=lambda r: (SPLITS.index(r["split"]), r["family"], r["task_id"]))
        ref = release_ref(release)
        meta = {
            "content_fingerprint": content_fingerprint({"format": FORMAT, "rows": rows, "release": ref}),
            "release": ref,
            "release_format": release.manifest["format"],
            "task_ids": [r["task_id"] for r in rows],
            "counts": {
                "tasks": len(rows),
                "splits": dict(Counter(r["split"] for r in rows)),
                "families": family_counts(rows, "split"),
            },
            "metrics": sorted({r["metric"]["name"] for r in rows}),
            "reward_hacks": release_battery(release, chosen),
        }
        return ExportContent({"default": split_tables(rows, RL_SCHEMA)}, meta)

    def card(self, meta: dict[str, Any]) -> str:
        return export_card.rl_card(meta)
