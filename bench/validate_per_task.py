"""Validation time per task, with the great-expectations context created once per run.

Baseline measured in the same run: what one context costs to create (import excluded, as it would be paid
per task in a loop). The ratio says how much slower validation would be with a context per task.
"""

from __future__ import annotations

import tempfile
import time

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.generators.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.validators.expectations import GXRun
from dareforge.validators.validate import validate


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config()
        cfg.store.root, cfg.store.work_dir = f"{tmp}/store", f"{tmp}/work"
        cfg.validate_.data_docs = False
        ctx = RunContext.from_config(cfg, show_progress=False)
        crawl(ctx)
        filter_sources(ctx)
        prepare(ctx)
        generate(ctx)
        report = validate(ctx)
    per_task = (report.seconds - report.context_seconds) / max(report.checked, 1)
    started = time.perf_counter()
    GXRun()  # a second context: the module is imported, so this is the per-task cost a loop would pay
    context = time.perf_counter() - started
    print(
        f"validate (builtin): {report.checked} tasks in {report.seconds:.1f}s; context created once in "
        f"{report.context_seconds:.1f}s (import included); {per_task * 1000:.0f} ms per task"
    )
    print(
        f"  a context per task would add {context * 1000:.0f} ms each: "
        f"{(per_task + context) / per_task:.2f}x the per-task time"
    )
