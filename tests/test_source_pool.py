"""`dareforge run` maps the per-source stages over worker processes kept across sources: the report reads as one
process's would, and a worker that dies costs only its own source (tests/test_reproducible.py: the release is
the same bytes as a run in one process)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dareforge.context import RunContext
from dareforge.pipeline import Run, Stage
from dareforge.report import StageReport
from dareforge.schema import PrepareFailure
from dareforge.source_pool import STRIKES, Mapped, map_sources
from dareforge.stage_ledger import StageInputs, settled
from tests.processes import alive, waited
from tests.stores import store_config

FATAL = "the-source-that-kills-its-worker"
FULL_DISK = "the-source-that-finds-the-disk-full"


def _stage(run: Run, ids: list[str]) -> StageReport:
    """A stage whose one source kills the process running it (as the kernel's OOM killer would)."""
    (source_id,) = ids
    if source_id == FATAL:
        os.kill(os.getpid(), signal.SIGKILL)
    if source_id == FULL_DISK:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    report = StageReport("fake")
    report.add("done", source_id, f"in process {os.getpid()}")
    report.counts["sources"] += 1
    return report


@pytest.fixture
def ctx(tmp_path) -> RunContext:
    return RunContext.from_config(store_config(tmp_path, []), show_progress=False)


def test_reports_merge_in_the_order_given_whichever_worker_ran_each_source(ctx):
    ids = [f"source-{n:02d}" for n in range(12)]
    advanced: list[str] = []
    report = map_sources(ctx, Mapped("fake", _stage, Run), ids, 2, advanced.append)
    assert report.labels("done") == ids and sorted(advanced) == ids
    assert report.counts["sources"] == 12 and not report.failures
    workers = {why for why in report.outcomes["done"].values()}
    assert 1 <= len(workers) <= 2  # processes kept across sources, not one per source


def test_a_source_that_kills_its_worker_fails_alone_and_the_others_finish(ctx):
    ids = ["a", "b", FATAL, "c", "d"]
    report = map_sources(ctx, Mapped("fake", _stage, Run), ids, 2, lambda _: None)
    assert report.labels("done") == ["a", "b", "c", "d"]  # the one in flight with it ran again
    assert list(report.failures) == [FATAL]
    assert f"died on this source {STRIKES + 1} times" in report.failures[FATAL]


def test_a_machine_fault_in_a_worker_stops_the_stage_as_it_would_in_one_process(ctx):
    """A full disk is no source's failure: it reaches the run (which stops in one line) as the same error."""
    with pytest.raises(OSError) as raised:
        map_sources(ctx, Mapped("fake", _stage, Run), ["a", FULL_DISK, "b"], 2, lambda _: None)
    assert raised.value.errno == errno.ENOSPC


# -- a re-run with nothing changed starts no worker pool (dareforge.stage_ledger) --------------------------------
FAILS = "the-source-that-fails"


def _where(run: Run, ids: list[str]) -> StageReport:
    """A stage that says which process ran each source (and fails on one)."""
    report = StageReport("where")
    for source_id in ids:
        if source_id == FAILS:
            report.failures[source_id] = "its data is odd"
        else:
            report.add("done", source_id, str(os.getpid()))
    return report


WHERE = Stage(
    "where",
    reads=(PrepareFailure.table,),
    writes=(),
    call=_where,
    per_source=True,
    sources=lambda ctx: ["a", "b", "c"],
    finish=lambda report: report,
)


def _ran_in_workers(ctx: RunContext) -> set[str]:
    report = WHERE.run(Run(ctx, jobs=2))
    assert set(report.labels("done")) == {"a", "b", "c"} - {FAILS}
    return {sid for sid, pid in report.outcomes["done"].items() if pid != str(os.getpid())}


def test_a_rerun_with_nothing_changed_runs_in_this_process_and_a_changed_source_in_a_worker(ctx):
    assert _ran_in_workers(ctx) == {"a", "b", "c"}
    assert (
        _ran_in_workers(ctx) == set()
    )  # the stage still ran on every source, here, at the cost of its checks
    for source_id in ("a", "b"):  # an input of the stage changed for two sources: they go to the pool again
        ctx.store.write_records(
            source_id, [PrepareFailure(source_id=source_id, source_version="1", reason="x")]
        )
    assert _ran_in_workers(ctx) == {"a", "b"}
    assert _ran_in_workers(ctx) == set()
    ctx.config.generate.if_variants += 1  # any setting may change what a stage decides
    assert _ran_in_workers(ctx) == {"a", "b", "c"}


def test_a_source_that_failed_is_not_taken_as_finished(ctx):
    stage = replace(WHERE, sources=lambda ctx: ["a", FAILS, "c"])
    report = stage.run(Run(ctx, jobs=2))
    assert report.failures == {FAILS: "its data is odd"} and report.labels("done") == ["a", "c"]
    assert settled(ctx, StageInputs(stage.name, stage.reads), ["a", FAILS, "c"]) == {
        "a",
        "c",
    }  # the failed one is tried again in a worker


# -- a run that is killed takes its workers with it ---------------------------------------------------------------
HELD = "DAREFORGE_TEST_HELD"


def _hold(run: Run, ids: list[str]) -> StageReport:
    """A stage that writes its worker's pid where the test reads it, then works for ever."""
    (Path(os.environ[HELD]) / f"{ids[0]}.pid").write_text(str(os.getpid()))
    while True:
        time.sleep(1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_workers_of_a_run_that_is_killed_end_with_it(tmp_path):
    """`dareforge run` stopped with kill -9 mid-stage: its pool workers, which wait on their queue for ever, end
    too instead of holding their memory for good (they did, found after a catalog run was stopped)."""
    held = tmp_path / "held"
    held.mkdir()
    code = (
        "from dareforge.context import RunContext\n"
        "from dareforge.pipeline import Run\n"
        "from dareforge.source_pool import Mapped, map_sources\n"
        "from tests.stores import store_config\n"
        "from tests.test_source_pool import _hold\n"
        "from pathlib import Path\n"
        f"ctx = RunContext.from_config(store_config(Path({str(tmp_path)!r}), []), show_progress=False)\n"
        "map_sources(ctx, Mapped('hold', _hold, Run), ['a', 'b'], 2, lambda _: None)\n"
    )
    env = {**os.environ, HELD: str(held), "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=Path(__file__).parent.parent)
    try:
        waited(lambda: len(list(held.glob("*.pid"))) == 2 or run.poll() is not None, "no worker started")
        assert run.poll() is None, "the run ended before its workers held their sources"
        workers = [int(p.read_text()) for p in held.glob("*.pid")]
        assert all(alive(pid) for pid in workers)
        run.kill()
        run.wait()
        waited(lambda: not any(alive(pid) for pid in workers), "a worker outlived its run")
    finally:
        run.kill()
        for pid_file in held.glob("*.pid"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
