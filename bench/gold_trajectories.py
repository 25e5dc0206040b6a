"""Gold trajectories per minute: each IF task's reference pipeline played as a four-cell agent episode.

Baseline from the same run: the same reference script run once, as one cell, through the same engine (pooled
bubblewrap sandboxes, grading, storing) at the same concurrency. The ratio (plain time / gold time) shows what
the gold episode's extra turns and inspection output cost on top of just running the reference (aim >= 0.7);
both pay the sandbox start and the imports, which dominate. Every episode is real and graded.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from bench.common import bench_config, generated
from dareforge.agents.attempts import AttemptSettings, attempts_for, run_attempts
from dareforge.agents.protocol import task_prompt
from dareforge.context import RunContext
from dareforge.families.registry import family_of
from dareforge.publish.release import build_release
from dareforge.reference_solutions.reference_code import if_reference_code
from dareforge.trajectories.gold import (
    GoldClient,
    ScriptEndpoint,
    Turn,
    gold_replies,
    gold_trajectories,
    spec_of,
)
from dareforge.trajectories.synthesize import task_set

SOURCES = ("sklearn-iris", "sklearn-wine", "sklearn-diabetes")
TARGET = 0.7


def _plain_client(tasks) -> GoldClient:
    """One cell with the whole reference script, then the gold answer."""
    replies = {
        task_prompt(t): [
            Turn("Run the reference workflow.", if_reference_code(spec_of(t))).reply(),
            gold_replies(t)[-1],
        ]
        for t in tasks
    }
    return GoldClient(replies, ScriptEndpoint("plain", "reference-script"))


def _play_plain(ctx: RunContext, tasks, files, partition: str, workers: int) -> float:
    started = time.perf_counter()
    attempts = attempts_for(tasks, 1, files, kind="plain")
    played = run_attempts(ctx, _plain_client(tasks), attempts, AttemptSettings(partition, workers))
    failed = [t.task_id for t in played.trajectories if not t.passed]
    if failed:
        raise SystemExit(f"the plain reference run failed on {failed}")
    return time.perf_counter() - started


def main(sources: tuple[str, ...] = SOURCES) -> None:
    workers = max(1, min(4, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench_config(tmp, sources)
        cfg.sandbox.pool_size = workers
        ctx = generated(cfg)
        build_release(ctx, "bench")
        found = task_set(ctx, "bench", "all")
        tasks = [t for t in found.tasks if family_of(t).exact]
        _play_plain(ctx, tasks[:1], found.files, "bench-warmup", 1)  # page cache and bytecode, for both runs
        plain = _play_plain(ctx, tasks, found.files, "bench-plain", workers)
        report = gold_trajectories(ctx, release="bench", split="all", workers=workers)
    gold = report.seconds
    ratio = plain / gold
    print(
        f"gold trajectories: {report.ran} episodes ({len(report.verified)} verified) on {', '.join(sources)} in "
        f"{gold:.1f}s = {60 * report.ran / gold:.1f}/min at concurrency {workers}"
    )
    print(
        f"  baseline, the reference script as one cell in the same sandboxes: {plain:.1f}s "
        f"= {60 * len(tasks) / plain:.1f}/min"
    )
    print(f"  ratio plain/gold: {ratio:.2f} (target >= {TARGET}) {'OK' if ratio >= TARGET else 'MISSED'}")
    if report.failed:
        print(f"  NOT VERIFIED: {report.failed}")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or SOURCES)
