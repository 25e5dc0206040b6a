"""The per-source stages of `dareforge run` on every core: a pool of worker processes, one source per job.

Why workers kept across sources: a fresh process per source spent more CPU starting than working (importing
pandas, scikit-learn and DuckDB, about 2 CPU-s; starting its reference workers, 3 more): on the default catalog
generate cost 235 CPU-s as one process per source and 40 in one process. A worker imports once and keeps its
helpers (`dareforge.kept`) for every source it handles; it is replaced after `SOURCES_PER_WORKER` sources, so
what a long run leaves in a process's heap stays bounded.

Each source is one job: its failure stays its own (the stage records it as it would in one process), progress
moves per source, and the merged report lists the sources in the order given, however many workers ran them.
At most one source per worker is in flight, so when a worker dies (killed, out of memory) the sources it may
have held are known: they run again in a fresh pool, and a source in flight at `STRIKES` deaths runs alone, where
a death is its own and becomes its failure. Every stage skips finished work and writes atomically under the
source's lock, so a source run again redoes only what had not finished.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dareforge.report import StageReport

if TYPE_CHECKING:
    from dareforge.config import Config
    from dareforge.context import RunContext

log = logging.getLogger(__name__)
StageCall = Callable[[object, list[str]], StageReport]

SOURCES_PER_WORKER = 100
STRIKES = 2
"""Worker deaths a source may be in flight at before it runs alone."""

_worker_ctx: RunContext | None = None
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """End this worker when the process that started it ends, however it ends. A pool worker waits on its call
    queue for ever, so a `dareforge run` stopped with SIGTERM or SIGKILL left its workers, and the memory they
    held, behind for good. The signal is tied to the thread that started the worker: the caller's, or the
    pool's own manager thread for a replaced worker, both of which outlive the pool's workers."""
    if not sys.platform.startswith("linux"):
        return  # elsewhere the parent's exit shuts the pool down, as before
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(1)  # the parent had already ended when the signal was asked for


def _start_worker(config: Config, log_level: int) -> None:
    global _worker_ctx
    from dareforge.context import RunContext

    _die_with_parent()
    logging.basicConfig(level=log_level, format="%(message)s")
    _worker_ctx = RunContext.from_config(config, show_progress=False)


def _run_source(call: StageCall, run_of: Callable[[RunContext], object], source_id: str) -> StageReport:
    """One source through one stage in this worker."""
    report = call(run_of(_worker_ctx), [source_id])
    report.lines = []  # the parent writes the lines of the merged report
    return report


def merge(stage_name: str, reports: list[StageReport]) -> StageReport:
    """One report of the stage from per-source reports, in their order."""
    merged = StageReport(stage_name)
    for part in reports:
        merged.written += part.written
        merged.reused += part.reused
        merged.failures.update(part.failures)
        for outcome, labels in part.outcomes.items():
            merged.outcomes.setdefault(outcome, {}).update(labels)
        merged.counts.update(part.counts)
        for name, seconds in part.seconds_in.items():
            merged.seconds_in[name] = merged.seconds_in.get(name, 0.0) + seconds
    return merged


@dataclass(frozen=True)
class Mapped:
    """A per-source stage as the workers run it: module-level functions, which pickle by name."""

    stage_name: str
    call: StageCall
    """The stage's function: (run, source ids) -> report."""
    run_of: Callable[[RunContext], object]
    """Makes the `run` the call takes from a worker's context."""


def map_sources(
    ctx: RunContext, stage: Mapped, source_ids: list[str], jobs: int, advance: Callable[[str], None]
) -> StageReport:
    """Run the stage on every source with `jobs` worker processes; `advance(source_id)` after each one. The
    merged report has no lines yet (the stage's `finish` writes them)."""
    stage_name = stage.stage_name
    done: dict[str, StageReport] = {}
    strikes = dict.fromkeys(source_ids, 0)
    pending = list(source_ids)
    while pending:
        alone = [s for s in pending if strikes[s] >= STRIKES]
        together = [s for s in pending if strikes[s] < STRIKES]
        for batch, workers in ([(together, jobs)] if together else []) + [([s], 1) for s in alone]:
            for source_id in _run_pool(ctx, stage, batch, workers, done, advance):
                strikes[source_id] += 1
                if strikes[source_id] > STRIKES:
                    done[source_id] = _died(stage_name, source_id)
                    advance(source_id)
        pending = [s for s in source_ids if s not in done]
    return merge(stage_name, [done[s] for s in source_ids])


def _run_pool(
    ctx: RunContext,
    stage: Mapped,
    source_ids: list[str],
    jobs: int,
    done: dict[str, StageReport],
    advance: Callable[[str], None],
) -> list[str]:
    """Run the sources in one pool, at most `jobs` in flight; returns those in flight when a worker died."""
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),  # the parent holds threads (progress bars, locks)
        initializer=_start_worker,
        initargs=(ctx.config, logging.getLogger("dareforge").getEffectiveLevel()),
        max_tasks_per_child=SOURCES_PER_WORKER,
    )
    queue = iter(source_ids)
    flying: dict[Future, str] = {}
    try:
        while True:
            while len(flying) < jobs and (source_id := next(queue, None)) is not None:
                flying[pool.submit(_run_source, stage.call, stage.run_of, source_id)] = source_id
            if not flying:
                return []
            finished, _ = wait(flying, return_when=FIRST_COMPLETED)
            lost = []
            for future in finished:
                source_id = flying.pop(future)
                try:
                    done[source_id] = future.result()
                except BrokenProcessPool:
                    lost.append(source_id)
                    continue
                advance(source_id)
            if lost:
                lost += flying.values()
                log.warning(
                    "%s: a worker process died with %s in flight; they run again", stage.stage_name, lost
                )
                return lost
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _died(stage_name: str, source_id: str) -> StageReport:
    report = StageReport(stage_name)
    report.failures[source_id] = (
        f"the worker process died on this source {STRIKES + 1} times (killed or out of memory; "
        f"exclude it with rules.excluded_ids or raise the machine's memory)"
    )
    log.warning("%s %s: %s", stage_name, source_id, report.failures[source_id])
    return report
