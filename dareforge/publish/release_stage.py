"""The release stage: build (or find) the release version holding the store's released tasks, and copy it to a
local folder when the run asks (`dareforge run` copies into the store's `published/`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from dareforge.context import RunContext
from dareforge.publish.release import build_release
from dareforge.publish.targets import LocalTarget
from dareforge.report import StageReport


def cut_release(ctx: RunContext, name: str, copy_to: Path | None = None) -> StageReport:
    """Release `name` (see `build_release`). The report: written, the new version's public and private prefixes
    (none when the latest version holds this content: reused 1); counts: tasks per split."""
    result = build_release(ctx, name)
    copied = LocalTarget(copy_to).publish(result.release) if copy_to is not None else None
    release = result.release
    report = StageReport("release", counts=Counter(release.splits.values()))
    if result.created:
        report.written += [release.prefix, release.private_prefix]
    else:
        report.reused = 1
    state = "new version" if result.created else "unchanged"
    report.lines = [
        f"release: {result.name}@{result.version} ({state}): {len(release.task_ids)} tasks, "
        f"{report.counts.get('train', 0)} train / {report.counts.get('test', 0)} test"
        + (f"; copied to {copied}" if copied else "")
    ]
    return report
