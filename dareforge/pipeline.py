"""The pipeline's spine: every stage as one `Stage`, in one ordered list, `STAGES`.

`dareforge run` walks the list (`run_pipeline`); the stage commands of the CLI print what their stage reports
with the same summary lines; the refresh DAG (`dags/dare_refresh.py`) runs the stages whose `dag_task` it names,
in the list's order and mapped per source where `per_source` says so (`tests/test_layout.py` fails when the
DAG and the list disagree).

A stage is the stage module's own function (`dareforge.<stage>...`) plus what the spine needs to know about it:
what it reads and writes (store tables), whether it runs per source, whether it needs the run's models, and
how its report reads as summary lines. Adding a stage: write its module, add one `Stage` here, test it.

Stage functions keep their own report types (each says what its stage did in its own words); `StageReport`
wraps one in the shape every caller can use: the summary lines, how many records were written and reused, the
failures with their reasons, the wall time.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from dareforge.errors import DareforgeError
from dareforge.report import SHOWN

if TYPE_CHECKING:
    from dareforge.context import RunContext
    from dareforge.trajectories.models import RunModels

FAMILIES = ("Class-IF", "Class-MM", "Reg-IF", "Reg-MM", "TS-XF", "TS-CF", "QA", "Lake")


@dataclass
class Run:
    """One pass over the list: the context, the release it cuts, the models it may use (opened by
    `run_pipeline` for the stages that need them), and where a local copy of what it publishes goes."""

    ctx: RunContext
    release: str = "dareforge"
    models: RunModels | None = None
    copy_to: Path | None = None


@dataclass
class StageReport:
    """What one stage did, in one shape: its summary lines (rich markup), records written and reused, failures
    (label -> reason), wall seconds, CPU seconds (this process and the children it reaped: reference workers,
    sandboxes), and the stage function's own report (`detail`)."""

    stage: str
    lines: list[Any]
    written: int = 0
    reused: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    detail: Any = None
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class Stage:
    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    call: Callable[[Run, list[str] | None], Any]
    """Runs the stage function on `ids` (None: everything the stage's inputs hold) and returns its report."""
    lines: Callable[[Run, Any], list[Any]]
    """The summary of its report: lines with rich markup (or rich renderables such as a table)."""
    counts: Callable[[Any], tuple[int, int, dict[str, str]]] = lambda report: (0, 0, {})
    """(written, reused, failures) of the stage's own report."""
    dag_task: str | None = None
    """The task of `dare_refresh` that runs this stage; None when the refresh does not."""
    per_source: bool = False
    """The refresh maps the stage over the accepted sources, one task instance each."""
    needs_models: bool = False
    left_nothing: Callable[[Run, Any], str | None] = lambda run, report: None
    """Why the stages after this one have nothing to work on (a run stops there and says so), or None."""

    def run(self, run: Run, ids: list[str] | None = None) -> StageReport:
        run.ctx.remove_dead_scratch()
        started, cpu = time.perf_counter(), cpu_seconds()
        detail = self.call(run, ids)
        written, reused, failures = self.counts(detail)
        return StageReport(
            self.name,
            self.lines(run, detail),
            written,
            reused,
            failures,
            time.perf_counter() - started,
            detail,
            cpu_seconds() - cpu,
        )


def _own_lines(run: Run, report: Any) -> list[Any]:
    """The lines of a stage that writes its own (`dareforge.report.StageReport`)."""
    return report.lines


def _own_counts(report: Any) -> tuple[int, int, dict[str, str]]:
    return len(report.written), report.reused, report.failures


def _own_left_nothing(run: Run, report: Any) -> str | None:
    return report.nothing_left


def cpu_seconds() -> float:
    """User and system CPU of this process and of the children it has reaped."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# -- the stages, each calling its module's function ------------------------------------------------------------
def _crawl(run: Run, ids: list[str] | None) -> Any:
    from dareforge.crawlers.crawl import crawl

    return crawl(run.ctx)


def _filter(run: Run, ids: list[str] | None) -> Any:
    from dareforge.crawlers.filter import filter_sources

    return filter_sources(run.ctx)


def _understand(run: Run, ids: list[str] | None) -> Any:
    from dareforge.understand.stage import understand

    return understand(run.ctx, ids)


def _prepare(run: Run, ids: list[str] | None) -> Any:
    from dareforge.generators.prepare import prepare

    return prepare(run.ctx, ids)


def _generate(run: Run, ids: list[str] | None) -> Any:
    from dareforge.generators.generate import generate

    report = generate(run.ctx, ids)
    # Its summary names every family in FAMILIES' order, so it is written here, next to FAMILIES.
    report.lines = generate_lines(report)
    return report


def generate_lines(report: Any) -> list[str]:
    counts = ", ".join(f"{family} {report.counts.get(family, 0)}" for family in FAMILIES)
    rejected = report.outcomes.get("rejected", {})
    lines = [
        f"generate: {counts}; {len(rejected)} rejected, {len(report.failures)} failed, "
        f"{report.reused} reused; {report.seconds:.1f}s "
        f"({report.seconds_in.get('references', 0.0):.1f}s in references)"
    ]
    lines += [f"  [yellow]rejected[/] {escape(k)}: {escape(r)}" for k, r in list(rejected.items())[:SHOWN]]
    lines += [f"  [red]failed[/] {escape(k)}: {escape(r)}" for k, r in list(report.failures.items())[:SHOWN]]
    return lines


def _validate(run: Run, ids: list[str] | None) -> Any:
    from dareforge.validators.validate import validate

    return validate(run.ctx, ids)


def _probe(run: Run, ids: list[str] | None) -> Any:
    from dareforge.trajectories.stages import probe_with

    return probe_with(run.ctx, run.models, ids)


def _gate(run: Run, ids: list[str] | None) -> Any:
    from dareforge.validators.gate import gate

    return gate(run.ctx)


def _release(run: Run, ids: list[str] | None) -> Any:
    from dareforge.publish.stage import cut_release

    return cut_release(run.ctx, run.release, run.copy_to)


def _trajectories(run: Run, ids: list[str] | None) -> Any:
    from dareforge.trajectories.stages import play_trajectories

    return play_trajectories(run.ctx, run.release, run.models)


def _corpus(run: Run, ids: list[str] | None) -> Any:
    from dareforge.trajectories.corpus import export_corpus

    return export_corpus(run.ctx, run.release, run.copy_to)


STAGES: tuple[Stage, ...] = (
    Stage(
        "crawl",
        reads=(),
        writes=("sources", "raw/"),
        call=_crawl,
        lines=_own_lines,
        counts=_own_counts,
        dag_task="crawl",
    ),
    Stage(
        "filter",
        reads=("sources",),
        writes=("filter_decisions",),
        call=_filter,
        lines=_own_lines,
        counts=_own_counts,
        left_nothing=_own_left_nothing,
        dag_task="filter_sources",
    ),
    Stage(
        "understand",
        reads=("sources", "filter_decisions"),
        writes=("framings",),
        call=_understand,
        lines=_own_lines,
        counts=_own_counts,
        left_nothing=_own_left_nothing,
        dag_task="understand",
        per_source=True,
    ),
    Stage(
        "prepare",
        reads=("sources", "framings"),
        writes=("prepared_sources", "prepared/"),
        call=_prepare,
        lines=_own_lines,
        counts=_own_counts,
        dag_task="prepare",
        per_source=True,
    ),
    Stage(
        "generate",
        reads=("prepared_sources",),
        writes=("tasks", "tasks/"),
        call=_generate,
        lines=_own_lines,
        counts=_own_counts,
        left_nothing=_own_left_nothing,
        dag_task="generate",
        per_source=True,
    ),
    Stage(
        "validate",
        reads=("tasks",),
        writes=("validations", "verdicts"),
        call=_validate,
        lines=_own_lines,
        counts=_own_counts,
        dag_task="validate",
    ),
    Stage(
        "probe",
        reads=("tasks", "verdicts"),
        writes=("probes", "trajectories", "validations"),
        call=_probe,
        lines=_own_lines,
        counts=_own_counts,
        dag_task="probe",
        needs_models=True,
    ),
    Stage(
        "gate",
        reads=("validations",),
        writes=("verdicts",),
        call=_gate,
        lines=_own_lines,
        counts=_own_counts,
        dag_task="gate",
        needs_models=True,  # between the probe and the trajectories, which keep the models up
    ),
    Stage(
        "release",
        reads=("tasks", "verdicts"),
        writes=("releases/",),
        call=_release,
        lines=_own_lines,
        counts=_own_counts,
        dag_task="publish",
        needs_models=True,  # between the probe and the trajectories, which keep the models up
    ),
    Stage(
        "trajectories",
        reads=("releases/",),
        writes=("trajectories",),
        call=_trajectories,
        lines=_own_lines,
        counts=_own_counts,
        needs_models=True,
    ),
    Stage(
        "corpus",
        reads=("trajectories", "releases/"),
        writes=("exports/",),
        call=_corpus,
        lines=_own_lines,
        counts=_own_counts,
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
            if why := each.left_nothing(run, report.detail):
                raise RunStopped(f"the run stopped after {each.name}: {why}")
