"""Validation time per task, with the great-expectations context created once per run.

Baseline measured in the same run: what one context costs to create (import excluded, as it would be paid
per task in a loop). The ratio says how much slower validation would be with a context per task.
"""

from __future__ import annotations

import tempfile
import time

from bench.common import bench_config, generated
from dareforge.validators.expectations import GXRun
from dareforge.validators.validate import validate


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench_config(tmp)
        cfg.validate_.data_docs = False
        ctx = generated(cfg)
        report = validate(ctx)
    checked, context_seconds = len(report.labels("checked")), report.seconds_in["gx context"]
    per_task = (report.seconds - context_seconds) / max(checked, 1)
    started = time.perf_counter()
    GXRun()  # a second context: the module is imported, so this is the per-task cost a loop would pay
    context = time.perf_counter() - started
    print(
        f"validate (builtin): {checked} tasks in {report.seconds:.1f}s; context created once in "
        f"{context_seconds:.1f}s (import included); {per_task * 1000:.0f} ms per task"
    )
    print(
        f"  a context per task would add {context * 1000:.0f} ms each: "
        f"{(per_task + context) / per_task:.2f}x the per-task time"
    )
