"""The solver ladder (the `discrimination` check) on the builtin catalog with the default config: its cost
against generate's, and what it finds.

Cost, in CPU seconds (on a shared machine wall time measures the neighbours too): the ladder's, summed over
the run's goal tasks (its worker's whole life, interpreter start-up included, and the check's own grading and
bootstrap intervals in this process), as a ratio to generate's for the whole run (this process and the
reference workers it starts), both on a fresh store: the share of generate's CPU time the ladder adds
(target: at most 0.5). The same ratio of wall seconds is printed beside it.

Findings, per family: the mean tau (over the rung pairs the test rows tell apart) over all goal tasks the
ladder ranked and over the accepted ones, the share the gate rejects as non-discriminative, and over the
accepted tasks the mean difficulty (the share of rungs the strong reference scores above) and headroom (1
minus the best rung's score).

With the Kaggle dev set present (`DAREFORGE_DEV_KAGGLE`, as `bench understand-kaggle` reads it), the same
findings on its tasks, run through the pipeline as that bench runs them; without it, a line says it skipped.
"""

from __future__ import annotations

import json
import resource
import tempfile
import time
from collections import defaultdict
from statistics import mean

from bench.common import bench_config, prepared
from dareforge.context import RunContext
from dareforge.families.generate import generate
from dareforge.schema import Task, Validation, Verdict
from dareforge.validators import discrimination
from dareforge.validators.validate import validate

TARGET_RATIO = 0.5


def children_cpu() -> float:
    """CPU seconds of this process's reaped children (reference workers are reaped when they are closed)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    check = discrimination.TASK_CHECKS[0]
    wall, cpu = [], []
    run = check.run

    def timed(view, config):
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            return run(view, config)
        finally:
            if view.family.scored_against_baseline:
                wall.append(time.perf_counter() - started)
                cpu.append(time.process_time() - cpu_started)

    check.run = timed  # the bench's own stopwatch around the one check it measures
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = bench_config(tmp)
            cfg.validate_.data_docs = False
            ctx = prepared(cfg)
            check.close()  # its worker's CPU seconds are counted from its start in this run on
            cpu_started, children_started = own_cpu(), children_cpu()
            generated = generate(ctx)
            generate_cpu = own_cpu() - cpu_started + children_cpu() - children_started
            validate(ctx)
            reaped = children_cpu()
            check.close()
            worker_cpu = children_cpu() - reaped
            findings = _findings(ctx, check.name)
    finally:
        del check.run
    built = sum(generated.counts.values()) + len(generated.labels("rejected"))
    ladder_cpu, ladder_wall = sum(cpu) + worker_cpu, sum(wall)
    ratio = ladder_cpu / generate_cpu
    goal = max(len(wall), 1)
    print(
        f"ladder (builtin): {len(wall)} goal tasks, {ladder_cpu:.1f} CPU s ({ladder_cpu / goal:.2f} per goal "
        f"task; {worker_cpu:.1f} in its worker, start-up included), {ladder_wall:.1f}s wall; generate: {built} "
        f"tasks, {generate_cpu:.1f} CPU s, {generated.seconds:.1f}s wall"
    )
    print(
        f"  ladder/generate, CPU over the whole run: {ratio:.2f} (target <= {TARGET_RATIO}) "
        f"{'OK' if ratio <= TARGET_RATIO else 'MISSED'}; wall: {ladder_wall / generated.seconds:.2f}"
    )
    _print_findings(findings)
    _kaggle()


def _findings(ctx: RunContext, check: str) -> dict[str, list[tuple[dict, bool, bool]]]:
    """Per family, each ranked goal task's finding details, whether it was accepted, and whether the ladder
    gated it."""
    tasks = {t.id: t for t in ctx.store.iter_records(Task)}
    verdicts = {v.task_id: v for v in ctx.store.iter_records(Verdict)}
    by_family: dict[str, list[tuple[dict, bool, bool]]] = defaultdict(list)
    for finding in ctx.store.iter_records(Validation):
        if finding.check != check or finding.score is None:
            continue
        verdict = verdicts[finding.task_id]
        gated = any(r.startswith(f"{check}:") for r in verdict.reasons)
        by_family[tasks[finding.task_id].family].append(
            (json.loads(finding.details), verdict.accepted, gated)
        )
    return by_family


def _print_findings(by_family: dict[str, list[tuple[dict, bool, bool]]]) -> None:
    def average(values: list[float | None]) -> str:
        known = [v for v in values if v is not None]
        return f"{mean(known):.2f}" if known else "-"

    for family, rows in sorted(by_family.items()):
        accepted = [details for details, ok, _ in rows if ok]
        print(
            f"  {family}: {len(rows)} tasks ranked, mean tau {average([d['tau'] for d, _, _ in rows])}, on the "
            f"{len(accepted)} accepted {average([d['tau'] for d in accepted])}; non-discriminative "
            f"{sum(g for _, _, g in rows) / len(rows):.0%}; accepted: difficulty "
            f"{average([d['difficulty'] for d in accepted])}, headroom {average([d['headroom'] for d in accepted])}"
        )


def _kaggle() -> None:
    from bench.understand_kaggle import dev_set, run_dev_set

    folder = dev_set()
    if folder is None:
        print("ladder (Kaggle dev set): skipped: no dev set (DAREFORGE_DEV_KAGGLE)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        ctx = run_dev_set(tmp, folder)
        by_family = _findings(ctx, discrimination.TASK_CHECKS[0].name)
    print(f"ladder (Kaggle dev set, {folder.name}):")
    _print_findings(by_family)
