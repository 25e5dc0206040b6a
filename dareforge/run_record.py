"""What one `dareforge run` cost and met: wall and CPU seconds per stage, peak memory, tasks accepted, and every
failure each stage reported, kept as a run log.

The CPU seconds are this process's and its reaped children's (the per-source workers, reference workers and
sandboxes), so the total is the run's whole bill; peak memory is the largest resident set of this process or of
any child it reaped. Records go to `reports/runs/<started>.json` in the store (run logs carry timestamps and
timings; releases never do), where `bench/cost_model.py` and the cost model read them.
"""

from __future__ import annotations

import resource
import time
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import duckdb

from dareforge.report import StageReport, cpu_seconds

if TYPE_CHECKING:
    from dareforge.context import RunContext

RUNS = "reports/runs"


def peak_rss_bytes() -> int:
    """Largest resident set of this process or of any child it reaped (Linux reports KiB)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return max(own.ru_maxrss, children.ru_maxrss) * 1024


@dataclass
class RunRecord:
    started: str
    jobs: int
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    """Stage name -> wall `seconds` and `cpu_seconds`."""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_bytes: int = 0
    accepted: int = 0
    tasks: int = 0
    failures: dict[str, dict[str, str]] = field(default_factory=dict)
    """Stage name -> what failed in it and why (sources, framings, tasks), as its report said."""
    _clock: float = 0.0
    _cpu: float = 0.0

    @classmethod
    def start(cls, jobs: int) -> RunRecord:
        started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        return cls(started=started, jobs=jobs, _clock=time.perf_counter(), _cpu=cpu_seconds())

    def add(self, report: StageReport) -> None:
        self.stages[report.stage] = {
            "seconds": round(report.seconds, 3),
            "cpu_seconds": round(report.cpu_seconds, 3),
        }
        if report.failures:
            self.failures[report.stage] = dict(report.failures)

    def finish(self, ctx: RunContext) -> str:
        """Totals, the store's task counts, and the record written; returns its key."""
        self.wall_s = round(time.perf_counter() - self._clock, 3)
        self.cpu_s = round(cpu_seconds() - self._cpu, 3)
        self.peak_rss_bytes = peak_rss_bytes()
        con = ctx.store.connect()
        with suppress(duckdb.Error):  # a run that stopped before generate has no tasks table to count
            self.tasks = con.sql("select count(*) from tasks where variant_of is null").fetchall()[0][0]
            self.accepted = con.sql("select count(*) from verdicts where accepted").fetchall()[0][0]
        key = f"{RUNS}/{self.started}.json"
        ctx.store.write_json(key, {k: v for k, v in asdict(self).items() if not k.startswith("_")})
        return key

    @property
    def cpu_per_accepted(self) -> float:
        return self.cpu_s / max(self.accepted, 1)

    def lines(self, where: str) -> list[str]:
        return [
            f"run: {self.wall_s / 60:.1f} min on {self.jobs} worker(s), {self.cpu_s:,.0f} CPU-s "
            f"({self.cpu_per_accepted:.2f} per accepted task, {self.accepted:,} accepted of {self.tasks:,}); "
            f"peak memory {self.peak_rss_bytes / 1024**3:.2f} GiB; figures in {where}"
        ]
