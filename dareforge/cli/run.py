"""`dareforge run`: the whole pipeline on the store, one run at a time, and its summary."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from dareforge.cli.app import command, context, out, show
from dareforge.cli.explore import _print_relation
from dareforge.errors import DareforgeError
from dareforge.locking import StoreBusyError

PANEL = "Run everything"


@command(panel=PANEL)
def run(
    release: Annotated[str, typer.Option(help="Name of the release the run cuts.")] = "dareforge",
    airflow: Annotated[
        bool, typer.Option("--airflow", help="Run the dare_refresh DAG through `airflow dags test` instead.")
    ] = False,
    no_wait: Annotated[
        bool,
        typer.Option("--no-wait", help="Fail at once when another `dareforge run` is using the store."),
    ] = False,
    until: Annotated[
        str | None,
        typer.Option(
            help="Stop after this stage (e.g. release: the refresh without trajectories and exports)."
        ),
    ] = None,
) -> None:
    """The main job: crawl, filter, understand, prepare, generate, validate, probe, release, gold and sampled
    trajectories, SFT/RL exports, summary.

    Models: llm.endpoints when configured, else the embedded local model when installed (make local-llm),
    else none (probe and sampling are skipped; gold trajectories need no model).

    One run at a time per store: a second one waits for the first (saying which process holds the store) and
    then finds its work done, or with --no-wait stops with that message. The per-source stages run in
    `run.jobs` worker processes (default: one per CPU). Each run's figures (wall and CPU seconds per stage, peak
    memory, tasks accepted) go to reports/runs/ in the store.

    Killed at any point (even kill -9), the next run goes on from there: finished sources and tasks are kept."""
    with _run_lock(no_wait):
        if airflow:
            _run_with_airflow(release)
        else:
            _run(release, until)


RUN_LOCK = "run"


@contextmanager
def _run_lock(no_wait: bool) -> Iterator[None]:
    """Hold the store's `run` lock; tell the user who holds it when it is taken, then wait or stop."""
    store = context().store
    with ExitStack() as held:
        try:
            held.enter_context(store.lock(RUN_LOCK, wait=False))
        except StoreBusyError as busy:
            in_use = f"the store {store.url} is in use by another `dareforge run`: {busy.holder.describe()}"
            if no_wait:
                raise DareforgeError(
                    f"{in_use}; run again when it has finished (or without --no-wait to wait)"
                ) from None
            Console(stderr=True).print(
                f"[yellow]waiting:[/] {in_use}; this run starts when it ends (Ctrl-C to stop waiting)"
            )
            held.enter_context(store.lock(RUN_LOCK))
        yield


def _run(release: str, until: str | None) -> None:
    from dareforge.pipeline import STAGES, Run, run_jobs, run_pipeline, stage
    from dareforge.run_record import RunRecord

    ctx = context()
    try:
        stages = STAGES[: STAGES.index(stage(until)) + 1] if until else STAGES
    except KeyError as exc:
        raise typer.BadParameter(exc.args[0], param_hint="--until") from None
    copy_to = Path(ctx.store.root) / "published" if ctx.store.is_local else None
    out.rule("dareforge run")
    out.print(f"store: {ctx.store.url}")
    record = RunRecord.start(run_jobs(ctx.config))
    # Each stage's summary as it finishes: a run that stops (RunStopped) has said what it did up to there.
    try:
        for report in run_pipeline(Run(ctx, release, copy_to=copy_to, jobs=record.jobs), stages):
            show(report.lines)
            record.add(report)
    finally:
        key = record.finish(ctx)
        show(record.lines(ctx.store.path(key)))
        out.print(
            'why a source was dropped: [bold]dareforge sql "select * from filter_decisions where not kept"[/]'
        )
        out.print("why a source gave these tasks: [bold]dareforge sources --why SOURCE_ID[/]")
        out.print(
            'why a task was rejected:  [bold]dareforge sql "select * from verdicts where not accepted"[/]'
        )


def _run_with_airflow(release: str) -> None:
    """The same stage functions, as Airflow tasks: `airflow dags test dare_refresh` on the embedded default."""
    import os
    import subprocess

    from dareforge.child_python import child_env, python_argv

    ctx = context()
    repo = Path(__file__).resolve().parents[2]
    if not (repo / "dags" / "dare_refresh.py").exists() or not ctx.store.is_local:
        raise DareforgeError("--airflow needs a source checkout (dags/, airflow.cfg) and a local store")
    env = child_env(
        {
            "AIRFLOW_HOME": str(repo),
            "AIRFLOW_CONFIG": str(repo / "airflow.cfg"),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "DAREFORGE_STORE__ROOT": str(Path(ctx.store.root).resolve()),
            "DAREFORGE_STORE__WORK_DIR": str(ctx.work_dir.resolve()),
        }
    )
    (repo / "data" / "airflow").mkdir(parents=True, exist_ok=True)
    airflow_cli = str(Path(sys.executable).parent / "airflow")
    for step in (
        [airflow_cli, "db", "migrate"],
        python_argv("-m", "dareforge.orchestration", "pools"),
        [airflow_cli, "dags", "test", "dare_refresh", "--conf", json.dumps({"release": release})],
    ):
        done = subprocess.run(step, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            raise DareforgeError(f"`{' '.join(step[1:])}` failed:\n{tail}")
    out.rule("dareforge run --airflow")
    from dareforge.queries import ACCEPTED_SOURCES_SQL

    summary = ctx.store.connect().sql(
        f"""select 'sources' as what, count(*) as n from sources
           union all select 'sources kept', count(*) from ({ACCEPTED_SOURCES_SQL})
           union all select 'tasks ' || family, count(*) from tasks group by family
           union all select 'tasks accepted', count(*) from verdicts where accepted
           union all select 'tasks rejected', count(*) from verdicts where not accepted"""
    )
    _print_relation(summary, "store after dare_refresh")
    from dareforge.publish.release import list_versions

    versions = list_versions(ctx, release)
    out.print(f"release: {release}@{versions[-1] if versions else '(none)'}")
