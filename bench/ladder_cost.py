"""The solver ladder (the `discrimination` check) on the builtin catalog: its cost against generate's, and what
it finds.

Cost: the ladder's wall seconds per goal task (every rung, the grading and the bootstrap intervals, timed
around the check inside `validate`) as a ratio to generate's wall seconds per task built, both measured in
this run on a fresh store (target: at most 0.5). Findings: per family, the mean Kendall tau over all goal
tasks and over accepted ones, and the share the gate rejects as non-discriminative.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import defaultdict
from statistics import mean

from bench.common import bench_config, prepared
from dareforge.families.generate import generate
from dareforge.schema import Task, Validation, Verdict
from dareforge.validators import discrimination
from dareforge.validators.validate import validate

TARGET_RATIO = 0.5
LADDER_BUDGET = 300.0


def main() -> None:
    check = discrimination.TASK_CHECKS[0]
    ladder_seconds: list[float] = []
    run = check.run

    def timed(view, config):
        started = time.perf_counter()
        try:
            return run(view, config)
        finally:
            if view.family.scored_against_baseline:
                ladder_seconds.append(time.perf_counter() - started)

    check.run = timed  # the bench's own stopwatch around the one check it measures
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = bench_config(tmp)
            cfg.validate_.data_docs = False
            cfg.validate_.ladder_cpu_seconds = LADDER_BUDGET  # opt-in: off by default
            ctx = prepared(cfg)
            generated = generate(ctx)
            validate(ctx)
            tasks = {t.id: t for t in ctx.store.iter_records(Task)}
            findings = [v for v in ctx.store.iter_records(Validation) if v.check == check.name]
            verdicts = {v.task_id: v for v in ctx.store.iter_records(Verdict)}
    finally:
        del check.run
    built = sum(generated.counts.values()) + len(generated.labels("rejected"))
    per_task = generated.seconds / max(built, 1)
    ladder = mean(ladder_seconds) if ladder_seconds else 0.0
    ratio = ladder / per_task
    cpu = [json.loads(f.details)["cpu_seconds"] for f in findings if f.details]
    print(
        f"ladder (builtin): {len(ladder_seconds)} goal tasks, {ladder:.2f}s per task "
        f"({mean(cpu) if cpu else 0:.2f} CPU s in the rungs' scripts); generate {per_task:.2f}s per task "
        f"({built} tasks in {generated.seconds:.1f}s)"
    )
    print(
        f"  ratio ladder/generate: {ratio:.2f} (target <= {TARGET_RATIO}) {'OK' if ratio <= TARGET_RATIO else 'MISSED'}"
    )
    by_family: dict[str, list[tuple[float, bool, bool]]] = defaultdict(list)
    for finding in findings:
        if finding.score is None:
            continue
        verdict = verdicts[finding.task_id]
        gated = any(r.startswith(f"{check.name}:") for r in verdict.reasons)
        by_family[tasks[finding.task_id].family].append((finding.score, verdict.accepted, gated))
    for family, rows in sorted(by_family.items()):
        accepted = [tau for tau, ok, _ in rows if ok]
        print(
            f"  {family}: {len(rows)} tasks, mean tau {mean(t for t, _, _ in rows):.2f}, on the "
            f"{len(accepted)} accepted {mean(accepted) if accepted else float('nan'):.2f}; "
            f"non-discriminative {sum(g for _, _, g in rows) / len(rows):.0%}"
        )
