"""Built-in crawl, cold (empty store) vs warm (everything up to date): the warm run should do almost nothing.

Baseline and measurement come from the same run: the cold crawl is the baseline, the warm crawl over the same
store is measured against it. Imports are warmed first so both runs time the stage, not Python start-up; the
same pair is also timed as whole `dareforge crawl` processes, start-up included, for the user's view.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.builtin_catalog import catalog
from dareforge.crawlers.crawl import crawl

REPEATS = 3
TARGET_RATIO = 0.1


def _timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def _in_process() -> tuple[float, float, int]:
    colds, warms = [], []
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Config()
            cfg.store.root, cfg.store.work_dir = f"{tmp}/store", f"{tmp}/work"
            ctx = RunContext.from_config(cfg, show_progress=False)
            cold, first = _timed(lambda ctx=ctx: crawl(ctx))
            warm, second = _timed(lambda ctx=ctx: crawl(ctx))
            if second.counts.get("downloaded") or second.written:
                raise RuntimeError(f"warm crawl did work: {second.counts}, wrote {second.written}")
            colds.append(cold)
            warms.append(warm)
    return statistics.median(colds), statistics.median(warms), sum(first.counts.values())


def _cli() -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "dareforge.cli", "-q", "--store", str(Path(tmp) / "store"), "crawl"]
        cold, _ = _timed(lambda: subprocess.run(command, check=True, capture_output=True))
        warm, _ = _timed(lambda: subprocess.run(command, check=True, capture_output=True))
    return cold, warm


def main() -> None:
    for entry in catalog().values():  # import scikit-learn, statsmodels and vega_datasets outside the timings
        entry.describe()
    cold, warm, seen = _in_process()
    ratio = warm / cold
    print(f"crawl (builtin, {seen} sources, median of {REPEATS}): cold {cold:.3f}s, warm {warm:.3f}s")
    print(
        f"  warm/cold ratio: {ratio:.3f} (target < {TARGET_RATIO}) {'OK' if ratio < TARGET_RATIO else 'MISSED'}"
    )
    cli_cold, cli_warm = _cli()
    print(
        f"  as processes (start-up included): cold {cli_cold:.2f}s, warm {cli_warm:.2f}s, "
        f"ratio {cli_warm / cli_cold:.3f}"
    )
