"""Task generation on the builtin catalog: tasks per minute, and the overhead ratio.

overhead = generate wall time / time spent inside reference fit+predict (the IF certificate's three runs and
the strong MM/TS references), both measured in this run. Crawl, filter, understand and prepare happen before the clock
starts; the store is fresh, so every task is built.
"""

from __future__ import annotations

import tempfile

from bench.common import bench_config, prepared
from dareforge.families.generate import generate

TARGET_OVERHEAD = 1.3


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = generate(prepared(bench_config(tmp)))
    built = sum(report.counts.values()) + len(report.labels("rejected"))
    references = report.seconds_in["references"]
    overhead = report.seconds / references
    print(
        f"generate (builtin): {built} tasks in {report.seconds:.1f}s = {60 * built / report.seconds:.0f} "
        f"tasks/min; {references:.1f}s inside references"
    )
    print(
        f"  overhead ratio: {overhead:.2f} (target <= {TARGET_OVERHEAD}) "
        f"{'OK' if overhead <= TARGET_OVERHEAD else 'MISSED'}"
    )
