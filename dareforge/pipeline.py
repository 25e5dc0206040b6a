"""The pipeline's spine: every stage as one `Stage`, in one ordered list, `STAGES`.

`dareforge run` walks the list (`run_pipeline`); the stage commands of the CLI print what their stage reports
with the same summary lines; the refresh DAG (`dags/dare_refresh.py`) runs the stages whose `dag_task` it names,
in the list's order and mapped per source where `per_source` says so (`tests/test_layout.py` fails when the
DAG and the list disagree).

A stage is the stage module's own function (`dareforge.<stage>...`) plus what the spine needs to know about it:
what it reads and writes (store tables), whether it runs per source, whether it needs the run's models. Every
stage function returns a `StageReport` (`dareforge.report`) with its summary lines in its own words; the spine
adds the seconds. Adding a stage: write its module, add one `Stage` here, test it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dareforge.errors import DareforgeError
from dareforge.report import StageReport, cpu_seconds

if TYPE_CHECKING:
    from dareforge.config import Config
    from dareforge.context import RunContext
    from dareforge.trajectories.models import RunModels


@dataclass
class Run:
    """One pass over the list: the context, the release it cuts, the models it may use (opened by
    `run_pipeline` for the stages that need them), and where a local copy of what it publishes goes."""

    ctx: RunContext
    release: str = "dareforge"
    models: RunModels | None = None
    copy_to: Path | None = None
    jobs: int = 1
    """Worker processes for the per-source stages (`dareforge.source_pool`); 1 runs them in this process."""


@dataclass(frozen=True)
class Stage:
    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    call: Callable[[Run, list[str] | None], StageReport]
    """Runs the stage function on `ids` (None: everything the stage's inputs hold) and returns its report."""
    dag_task: str | None = None
    """The task of `dare_refresh` that runs this stage; None when the refresh does not."""
    per_source: bool = False
    """The refresh maps the stage over the accepted sources, one task instance each."""
    sources: Callable[[RunContext], list[str]] | None = None
    """A per-source stage's sources when none are named (what its function takes by default)."""
    finish: Callable[[StageReport], StageReport] | None = None
    """A per-source stage's summary of a report merged from several processes."""
    needs_models: bool = False

    def run(self, run: Run, ids: list[str] | None = None) -> StageReport:
        run.ctx.remove_dead_scratch()
        started, cpu = time.perf_counter(), cpu_seconds()
        if self.per_source and run.jobs > 1:
            report = self._run_per_source(run, ids if ids is not None else self.sources(run.ctx))
        else:
            report = self.call(run, ids)
        # The workers' CPU too: the pool reaps them before the stage ends.
        report.seconds, report.cpu_seconds = time.perf_counter() - started, cpu_seconds() - cpu
        return report

    def _run_per_source(self, run: Run, ids: list[str]) -> StageReport:
        """The sources finished before under the same inputs (`stage_ledger`) in this process, where the stage
        finds them finished at the cost of its checks; the others in worker processes when there are several
        (one source needs no pool to start)."""
        from dareforge.source_pool import merge
        from dareforge.stage_ledger import StageInputs, record, settled

        inputs = StageInputs(self.name, self.reads)
        done = settled(run.ctx, inputs, ids)
        todo = [s for s in ids if s not in done]
        if len(todo) <= 1:
            report = self.call(run, ids)
            record(run.ctx, inputs, report, todo)
            return report
        mapped = self._map(run, todo)
        record(run.ctx, inputs, mapped, todo)
        if not done:
            return self.finish(mapped)
        here = self.call(run, [s for s in ids if s in done])
        merged = merge(self.name, [here, mapped])
        merged.seconds = here.seconds + mapped.seconds
        return self.finish(merged)

    def _map(self, run: Run, ids: list[str]) -> StageReport:
        from dareforge.source_pool import Mapped, map_sources

        with run.ctx.progress() as progress:
            bar = progress.add_task(self.name, total=len(ids), item="")
            started = time.perf_counter()
            report = map_sources(
                run.ctx,
                Mapped(self.name, self.call, Run),
                ids,
                run.jobs,
                lambda source_id: progress.update(bar, advance=1, item=source_id),
            )
        report.seconds = time.perf_counter() - started  # the lines of some stages name it
        return report


def run_jobs(config: Config) -> int:
    """Worker processes for the per-source stages of a run: `run.jobs`, or one per CPU when it is 0."""
    return config.run.jobs or os.cpu_count() or 1


# -- what a per-source stage takes by default, and its summary of a merged report ------------------------------
def _accepted(ctx: RunContext) -> list[str]:
    from dareforge.queries import accepted_source_ids

    return accepted_source_ids(ctx)


def _framed(ctx: RunContext) -> list[str]:
    from dareforge.queries import framed_source_ids

    return framed_source_ids(ctx)


def _with_tasks(ctx: RunContext) -> list[str]:
    from dareforge.queries import task_source_ids

    return task_source_ids(ctx)


def _finish_understand(report: StageReport) -> StageReport:
    from dareforge.understand.understand_stage import finish_report

    return finish_report(report)


def _finish_prepare(report: StageReport) -> StageReport:
    from dareforge.generators.prepare import finish_report

    return finish_report(report)


def _finish_generate(report: StageReport) -> StageReport:
    from dareforge.families.generate import finish_report

    return finish_report(report)


def _finish_check(report: StageReport) -> StageReport:
    from dareforge.validators.validate import finish_check_report

    return finish_check_report(report)


# -- the stages, each calling its module's function ------------------------------------------------------------
def _crawl(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.crawlers.crawl import crawl

    return crawl(run.ctx)


def _filter(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.crawlers.filter import filter_sources
    from dareforge.crawlers.rules import with_needs
    from dareforge.families.registry import row_needs

    return filter_sources(run.ctx, with_needs(row_needs(run.ctx.config)))


def _understand(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.understand.understand_stage import understand

    return understand(run.ctx, ids)


def _prepare(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.generators.prepare import prepare

    return prepare(run.ctx, ids)


def _generate(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.families.generate import generate

    return generate(run.ctx, ids)


def _check(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.validators.validate import check

    return check(run.ctx, ids)


def _validate(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.validators.validate import validate

    return validate(run.ctx, ids)


def _probe(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.trajectories.run_stages import probe_with

    return probe_with(run.ctx, run.models, ids)


def _gate(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.validators.gate import gate

    return gate(run.ctx)


def _release(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.publish.release_stage import cut_release

    return cut_release(run.ctx, run.release, run.copy_to)


def _trajectories(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.trajectories.run_stages import play_trajectories

    return play_trajectories(run.ctx, run.release, run.models)


def _corpus(run: Run, ids: list[str] | None) -> StageReport:
    from dareforge.trajectories.corpus import export_corpus

    return export_corpus(run.ctx, run.release, run.copy_to)


STAGES: tuple[Stage, ...] = (
    Stage(
        "crawl",
        reads=(),
        writes=("sources", "raw/"),
        call=_crawl,
        dag_task="crawl",
    ),
    Stage(
        "filter",
        reads=("sources",),
        writes=("filter_decisions",),
        call=_filter,
        dag_task="filter_sources",
    ),
    Stage(
        "understand",
        reads=("sources", "filter_decisions"),
        writes=("framings",),
        call=_understand,
        dag_task="understand",
        per_source=True,
        sources=_accepted,
        finish=_finish_understand,
    ),
    Stage(
        "prepare",
        reads=("sources", "framings"),
        writes=("prepared_sources", "prepared/"),
        call=_prepare,
        dag_task="prepare",
        per_source=True,
        sources=_framed,
        finish=_finish_prepare,
    ),
    Stage(
        "generate",
        reads=("prepared_sources",),
        writes=("tasks", "tasks/"),
        call=_generate,
        dag_task="generate",
        per_source=True,
        sources=_framed,
        finish=_finish_generate,
    ),
    Stage(
        "check",
        reads=("tasks",),
        writes=("validations",),
        call=_check,
        dag_task="check",
        per_source=True,
        sources=_with_tasks,
        finish=_finish_check,
    ),
    Stage(
        "validate",
        reads=("tasks",),
        writes=("validations", "verdicts"),
        call=_validate,
        dag_task="validate",
    ),
    Stage(
        "probe",
        reads=("tasks", "verdicts"),
        writes=("probes", "trajectories", "validations"),
        call=_probe,
        dag_task="probe",
        needs_models=True,
    ),
    Stage(
        "gate",
        reads=("validations",),
        writes=("verdicts",),
        call=_gate,
        dag_task="gate",
        needs_models=True,  # between the probe and the trajectories, which keep the models up
    ),
    Stage(
        "release",
        reads=("tasks", "verdicts"),
        writes=("releases/",),
        call=_release,
        dag_task="publish",
        needs_models=True,  # between the probe and the trajectories, which keep the models up
    ),
    Stage(
        "trajectories",
        reads=("releases/",),
        writes=("trajectories",),
        call=_trajectories,
        needs_models=True,
    ),
    Stage(
        "corpus",
        reads=("trajectories", "releases/"),
        writes=("exports/",),
        call=_corpus,
    ),
)
"""Every stage, in the order a run takes them."""

BY_NAME = {stage.name: stage for stage in STAGES}


def stage(name: str) -> Stage:
    """The stage called `name` (a KeyError names the known ones)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no stage {name!r}; the stages are {', '.join(BY_NAME)}") from None


class RunStopped(DareforgeError):
    """A run ended before its last stage: one failed, or one left nothing for the next (the message says which
    and why; the reports of the stages before it were yielded)."""


def run_pipeline(run: Run, stages: tuple[Stage, ...] = STAGES) -> Iterator[StageReport]:
    """Run `stages` in order, yielding each report as it finishes; the run's models are up (`run.models`) from
    the first stage that needs them to the last consecutive one. Raises RunStopped after the stage that fails or
    leaves nothing to work on (without it, the next stages ran on nothing and the last one blamed a stage that
    had run)."""
    from dareforge.trajectories.models import run_models

    with ExitStack() as models:
        for each in stages:
            if each.needs_models and run.models is None:
                run.models = models.enter_context(run_models(run.ctx, run.ctx.work_dir))
            elif not each.needs_models and run.models is not None:
                models.close()
            try:
                report = each.run(run)
            except DareforgeError as exc:
                raise RunStopped(f"the run stopped at {each.name}: {exc}") from exc
            yield report
            if report.nothing_left:
                raise RunStopped(f"the run stopped after {each.name}: {report.nothing_left}")
