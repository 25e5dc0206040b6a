"""`dareforge`: turn real tabular sources into verified tasks for data-science agents.

Every command runs one stage function over the store (default `./data`), the same functions Airflow calls.
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dareforge.config import load_config
from dareforge.context import RunContext
from dareforge.errors import DareforgeError, StoreBusyError

app = typer.Typer(
    help=__doc__,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
out = Console()
STATE: dict[str, RunContext] = {}
FormatOption = Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")]
ReleaseOption = Annotated[str, typer.Option("--release", help="NAME or NAME@VERSION (default: latest).")]


@app.callback()
def main(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="YAML config file (default: ./dareforge.yaml if present)."),
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="Store root, a path or fsspec URL (overrides store.root).")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log every source, not only problems.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=Console(stderr=True), show_path=False)],
    )
    try:
        cfg = load_config(config)
    except DareforgeError as exc:
        _fail(exc)
    if store:
        cfg.store.root = store  # an unset store.work_dir follows the root (see StoreConfig.work_path)
    STATE["ctx"] = RunContext.from_config(cfg, show_progress=not quiet)


def _ctx() -> RunContext:
    return STATE["ctx"]


def _fail(exc: Exception) -> None:
    Console(stderr=True).print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(2)


@app.command()
def crawl(
    origin: Annotated[
        list[str] | None, typer.Option("--origin", "-o", help="Only these origins: builtin, mirror, kaggle.")
    ] = None,
) -> None:
    """Fetch sources that are new or changed; unchanged ones are skipped without a download.

    Files land in the store under raw/<source_id>/<version>/ with a sha256 manifest. A source that fails
    (e.g. Kaggle wants its rules accepted) is recorded with its status and the crawl goes on.
    """
    from dareforge.crawlers.crawl import crawl as crawl_stage

    try:
        report = crawl_stage(_ctx(), origins=origin)
    except DareforgeError as exc:
        _fail(exc)
    out.print(_crawl_line(report))
    for name, error in report.listing_errors.items():
        out.print(f"[red]{name}: listing failed:[/] {error}")


@app.command("filter")
def filter_() -> None:
    """Judge every crawled source by every rule; each decision is stored with its reason.

    Ask why with: dareforge sql "select * from filter_decisions where not kept"
    """
    from dareforge.crawlers.filter import filter_sources

    report = filter_sources(_ctx())
    out.print(_filter_line(report))


@app.command()
def understand(
    source: Annotated[list[str] | None, typer.Option("--source", "-s", help="Only these source ids.")] = None,
) -> None:
    """Find the tasks in each accepted source: target, problem type, time axis, ids, columns to leave out.

    Evidence, cheapest first: the config override (always wins), what the crawler knows (a competition's sample
    submission), tags and the description's sentences ("the target is X", "predict X", R formulas), the data's
    column profiles, and a model when understand.endpoint names one. Every candidate is checked on the data
    (enough rows, learnable, not leaked, enough timestamps); the best one per family (tabular, time series) that
    passes is chosen. Why: dareforge sources --why SOURCE_ID, or dareforge sql "select * from framings"
    """
    from dareforge.understand.stage import understand as understand_stage

    out.print(_understand_line(understand_stage(_ctx(), source)))


@app.command()
def prepare(
    source: Annotated[list[str] | None, typer.Option("--source", "-s", help="Only these source ids.")] = None,
) -> None:
    """Profile each chosen framing of the framed sources with DuckDB and split it into public train, public
    test and private answers."""
    from dareforge.generators.prepare import prepare as prepare_stage

    out.print(_prepare_line(prepare_stage(_ctx(), source)))


@app.command()
def generate(
    source: Annotated[list[str] | None, typer.Option("--source", "-s", help="Only these source ids.")] = None,
) -> None:
    """Generate IF, MM and time-series tasks from prepared sources, each with certified references.

    Tasks land in the store under tasks/<task_id>/ (public/, private/, _MANIFEST.json) and in the `tasks` table.
    """
    from dareforge.generators.generate import generate as generate_stage

    report = generate_stage(_ctx(), source)
    _print_generate(report)


@app.command()
def validate(
    task: Annotated[list[str] | None, typer.Option("--task", "-t", help="Only these task ids.")] = None,
) -> None:
    """Run every check (great-expectations suites, leakage, duplicates, solvability) and gate the tasks.

    Findings land in the `validations` table, decisions in `verdicts`, the HTML report in
    reports/validation/index.html. Why was a task rejected? dareforge sql "select * from verdicts where not accepted"
    """
    from dareforge.validators.validate import validate as validate_stage

    _print_validate(validate_stage(_ctx(), task))


@app.command("gate")
def gate_() -> None:
    """Re-decide every validated task with the current `validate:` thresholds, without re-running checks."""
    from dareforge.validators.gate import gate as gate_stage

    verdicts, written = gate_stage(_ctx())
    accepted = sum(v.accepted for v in verdicts)
    out.print(
        f"gate: {accepted} accepted, {len(verdicts) - accepted} rejected; {len(written)} verdict files written"
    )


def _print_validate(report) -> None:
    out.print(
        f"validate: {len(report.accepted)} accepted, {len(report.rejected)} rejected "
        f"({report.checked} tasks checked, {report.reused} unchanged) in {report.seconds:.1f}s"
    )
    reasons = Counter(r.split(":", 1)[0] for v in report.rejected for r in v.reasons)
    if reasons:
        out.print("  top reasons: " + ", ".join(f"{name} {n}" for name, n in reasons.most_common(5)))
    if report.report_key:
        out.print(f"  report: {_ctx().store.path(report.report_key)}")


release_app = typer.Typer(help="Cut, list, verify and publish versioned releases.", no_args_is_help=True)
app.add_typer(release_app, name="release")


@release_app.command("build")
def release_build(
    name: Annotated[str, typer.Argument(help="Release name, e.g. dareforge.")] = "dareforge",
    version: Annotated[
        str | None, typer.Option(help="Explicit version (default: date-based YYYY.MM.DD[.N]).")
    ] = None,
) -> None:
    """Cut a release from the accepted tasks; an unchanged release makes no new version.

    Public part under releases/NAME/VERSION/, answers and references under releases/NAME-private/VERSION/.
    """
    from dareforge.publish.release import build_release

    result = build_release(_ctx(), name, version)
    state = "created" if result.created else "unchanged, no new version"
    out.print(f"release {result.name}@{result.version}: {state}; {len(result.release.task_ids)} tasks")
    for note in result.notes:
        out.print(f"  {note}")
    for reason, count in sorted(result.excluded.items()):
        out.print(f"  left out: {count} ({reason})")


@release_app.command("list")
def release_list(name: Annotated[str, typer.Argument(help="Release name.")] = "dareforge") -> None:
    """List the finished versions of a release, oldest first."""
    from dareforge.publish.release import list_versions

    for version in list_versions(_ctx(), name):
        out.print(f"{name}@{version}")


@release_app.command("verify")
def release_verify(
    release: Annotated[str, typer.Argument(help="NAME or NAME@VERSION.")] = "dareforge",
) -> None:
    """Re-hash every file of a release version against its manifests."""
    from dareforge.publish.release import verify_release
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    problems = verify_release(_ctx(), name, version)
    for problem in problems:
        out.print(f"[red]{problem}[/]")
    out.print(f"{release}: {'OK' if not problems else f'{len(problems)} problems'}")
    if problems:
        raise typer.Exit(1)


@release_app.command("publish")
def release_publish(
    release: Annotated[str, typer.Argument(help="NAME or NAME@VERSION.")] = "dareforge",
    to: Annotated[Path, typer.Option("--to", help="Folder to copy the release into.")] = Path(
        "data/published"
    ),
    hub: Annotated[
        str | None,
        typer.Option(
            help="Hugging Face namespace: push to NAMESPACE/NAME and the private NAMESPACE/NAME-private."
        ),
    ] = None,
    public_only: Annotated[bool, typer.Option(help="Leave the private part (answers) out of --to.")] = False,
) -> None:
    """Publish a finished release version: to a local folder (default) or to the Hugging Face Hub (--hub).

    The Hub gets one commit and a tag vVERSION per repo; the answers repo is private; re-publishing an
    unchanged version makes no commit. The token comes from HF_TOKEN (write access).
    """
    from dareforge.publish.hub import HubTarget
    from dareforge.publish.release import load_release
    from dareforge.publish.targets import LocalTarget
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    target = HubTarget(hub) if hub else LocalTarget(to, include_private=not public_only)
    try:
        where = target.publish(load_release(_ctx(), name, version))
    except DareforgeError as exc:
        _fail(exc)
    out.print(f"published {release} to {where}")


@app.command()
def report(
    release: ReleaseOption = "dareforge",
) -> None:
    """Write an HTML report of a release: the filter funnel, tasks per family, baseline vs strong scores."""
    from dareforge.publish.report import write_release_report
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    try:
        key = write_release_report(_ctx(), name, version)
    except DareforgeError as exc:
        _fail(exc)
    out.print(f"report: {_ctx().store.path(key)}")


@app.command()
def audit(
    release: ReleaseOption = "dareforge",
) -> None:
    """Re-run every check on a published release's tasks and report what changed since it was cut."""
    from dareforge.validators.audit import audit as audit_stage

    try:
        report = audit_stage(_ctx(), release)
    except DareforgeError as exc:
        _fail(exc)
    out.print(
        f"audit {report.release}@{report.version}: {report.tasks} tasks, {len(report.now_rejected)} now rejected, "
        f"{len(report.missing)} missing, {len(report.moved)} check scores moved"
    )
    for task_id, reasons in sorted(report.now_rejected.items()):
        out.print(f"  [red]{task_id}[/]: {'; '.join(reasons)}")
    out.print(f"  report: {_ctx().store.path(report.report_key)}")
    if report.now_rejected or report.missing:
        raise typer.Exit(1)


@app.command()
def evaluate(
    endpoint: Annotated[str, typer.Option("--endpoint", "-e", help="An endpoint name from llm.endpoints.")],
    release: ReleaseOption = "dareforge",
    split: Annotated[str, typer.Option(help="train, test or all.")] = "test",
    samples: Annotated[int, typer.Option(help="Attempts per task.")] = 1,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 0.0,
    concurrency: Annotated[
        int | None, typer.Option(help="Episodes at once (default: the endpoint's max_concurrency).")
    ] = None,
    subtasks: Annotated[
        bool, typer.Option(help="Also play each Lake task's sub-tasks on their own (column Lake-sub).")
    ] = False,
) -> None:
    """Run an endpoint's agent on a release's tasks in sandboxes, grade by execution, print the table.

    Trajectories are stored in the `trajectories` table (re-runs skip finished attempts), so models can be
    compared later: dareforge sql "select endpoint, family, avg(score) from trajectories group by all"
    """
    from dareforge.agents import evaluate as evaluate_stage
    from dareforge.agents import render_table
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    try:
        with cli_training.default_model():
            report = evaluate_stage(
                _ctx(),
                endpoint,
                release=name,
                version=version,
                split=split,
                samples=samples,
                temperature=temperature,
                concurrency=concurrency,
                subtasks=subtasks,
            )
    except DareforgeError as exc:
        _fail(exc)
    out.print(render_table(report))
    out.print(f"{report.ran} attempts run now, {report.reused} taken from the store")


@app.command()
def resimulate(
    task: Annotated[list[str] | None, typer.Option("--task", "-t", help="Only these task ids.")] = None,
) -> None:
    """Re-run the stored IF references on this machine's library versions; list tasks whose predictions changed."""
    from dareforge.reference_solutions.resimulate import resimulate as resimulate_stage

    results = resimulate_stage(_ctx(), task)
    table = Table(title="resimulation", title_justify="left")
    for column in ("task", "family", "matches", "detail", "stack differs"):
        table.add_column(column, overflow="fold")
    for r in results:
        table.add_row(
            r.task_id, r.family, "yes" if r.matches else "[red]no[/]", r.detail, ", ".join(r.stack_differs)
        )
    out.print(table)
    changed = [r for r in results if not r.matches]
    out.print(
        f"{len(results)} IF tasks re-run here: {len(results) - len(changed)} match, {len(changed)} changed"
    )
    if changed:
        raise typer.Exit(1)


@app.command()
def run(
    release: Annotated[str, typer.Option(help="Name of the release the run cuts.")] = "dareforge",
    airflow: Annotated[
        bool, typer.Option("--airflow", help="Run the dare_refresh DAG through `airflow dags test` instead.")
    ] = False,
    no_wait: Annotated[
        bool,
        typer.Option("--no-wait", help="Fail at once when another `dareforge run` is using the store."),
    ] = False,
) -> None:
    """The main job: crawl, filter, prepare, generate, validate, probe, release, gold and sampled trajectories,
    SFT/RL exports, summary.

    Models: llm.endpoints when configured, else the embedded local model when installed (make local-llm),
    else none (probe and sampling are skipped; gold trajectories need no model).

    One run at a time per store: a second one waits for the first (saying which process holds the store) and
    then finds its work done, or with --no-wait stops with that message."""
    with _run_lock(no_wait):
        if airflow:
            _run_with_airflow(release)
        else:
            _run(release)


RUN_LOCK = "run"


@contextmanager
def _run_lock(no_wait: bool) -> Iterator[None]:
    """Hold the store's `run` lock; tell the user who holds it when it is taken, then wait or stop."""
    store = _ctx().store
    with ExitStack() as held:
        try:
            held.enter_context(store.lock(RUN_LOCK, wait=False))
        except StoreBusyError as busy:
            in_use = f"the store {store.url} is in use by another `dareforge run`: {busy.holder.describe()}"
            if no_wait:
                _fail(
                    DareforgeError(f"{in_use}; run again when it has finished (or without --no-wait to wait)")
                )
            Console(stderr=True).print(
                f"[yellow]waiting:[/] {in_use}; this run starts when it ends (Ctrl-C to stop waiting)"
            )
            held.enter_context(store.lock(RUN_LOCK))
        yield


def _run(release: str) -> None:
    from dareforge.crawlers.crawl import crawl as crawl_stage
    from dareforge.crawlers.filter import filter_sources
    from dareforge.generators.generate import generate as generate_stage
    from dareforge.generators.prepare import prepare as prepare_stage
    from dareforge.publish.release import build_release
    from dareforge.publish.targets import LocalTarget
    from dareforge.trajectories.corpus import build_corpus
    from dareforge.trajectories.models import run_models
    from dareforge.understand.stage import understand as understand_stage
    from dareforge.validators.validate import validate as validate_stage

    ctx = _ctx()
    try:
        crawled = crawl_stage(ctx)
    except DareforgeError as exc:
        _fail(exc)
    filtered = filter_sources(ctx)
    understood = understand_stage(ctx)
    prepared = prepare_stage(ctx)
    generated = generate_stage(ctx)
    validated = validate_stage(ctx)
    try:
        with run_models(ctx, ctx.work_dir) as models:
            probed = cli_training.probe_for_run(ctx, models)
            released = build_release(ctx, release)
            trained = cli_training.trajectories_for_run(ctx, models, release)
        corpus = build_corpus(ctx, release)
    except DareforgeError as exc:
        _fail(exc)
    folder = None
    if ctx.store.is_local:
        published = Path(ctx.store.root) / "published"
        folder = LocalTarget(published).publish(released.release)
        for built in (corpus.sft, corpus.rl):
            if built is not None:
                LocalTarget(published).publish(built.export)
    out.rule("dareforge run")
    out.print(f"store: {ctx.store.url}")
    out.print(_crawl_line(crawled))
    for name, error in crawled.listing_errors.items():
        out.print(f"[red]{name}: listing failed:[/] {error}")
    out.print(_filter_line(filtered))
    top = ctx.store.connect().sql(
        """select rule, count(*) as sources, any_value(reason) as example
           from filter_decisions where not kept group by rule order by sources desc, rule limit 5"""
    )
    _print_relation(top, "top drop reasons")
    out.print(_understand_line(understood))
    out.print(_prepare_line(prepared))
    _print_generate(generated)
    _print_validate(validated)
    state = "new version" if released.created else "unchanged"
    splits = Counter(released.release.splits.values())
    out.print(
        f"release: {released.name}@{released.version} ({state}): {len(released.release.task_ids)} tasks, "
        f"{splits.get('train', 0)} train / {splits.get('test', 0)} test"
        + (f"; copied to {folder}" if folder else "")
    )
    out.print(
        'why a source was dropped: [bold]dareforge sql "select * from filter_decisions where not kept"[/]'
    )
    out.print("why a source gave these tasks: [bold]dareforge sources --why SOURCE_ID[/]")
    out.print('why a task was rejected:  [bold]dareforge sql "select * from verdicts where not accepted"[/]')
    cli_training.print_run_training(models, probed, trained, corpus)


def _run_with_airflow(release: str) -> None:
    """The same stage functions, as Airflow tasks: `airflow dags test dare_refresh` on the embedded default."""
    import os
    import subprocess

    ctx = _ctx()
    repo = Path(__file__).resolve().parents[1]
    if not (repo / "dags" / "dare_refresh.py").exists() or not ctx.store.is_local:
        _fail(DareforgeError("--airflow needs a source checkout (dags/, airflow.cfg) and a local store"))
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(repo),
        "AIRFLOW_CONFIG": str(repo / "airflow.cfg"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "DAREFORGE_STORE__ROOT": str(Path(ctx.store.root).resolve()),
        "DAREFORGE_STORE__WORK_DIR": str(ctx.work_dir.resolve()),
    }
    (repo / "data" / "airflow").mkdir(parents=True, exist_ok=True)
    airflow_cli = str(Path(sys.executable).parent / "airflow")
    for command in (
        [airflow_cli, "db", "migrate"],
        [sys.executable, "-m", "dareforge.orchestration", "pools"],
        [airflow_cli, "dags", "test", "dare_refresh", "--conf", json.dumps({"release": release})],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            _fail(DareforgeError(f"`{' '.join(command[1:])}` failed:\n{tail}"))
    out.rule("dareforge run --airflow")
    summary = ctx.store.connect().sql(
        """select 'sources' as what, count(*) as n from sources
           union all select 'sources kept', count(*) from
             (select source_id from filter_decisions group by source_id having bool_and(kept))
           union all select 'tasks ' || family, count(*) from tasks group by family
           union all select 'tasks accepted', count(*) from verdicts where accepted
           union all select 'tasks rejected', count(*) from verdicts where not accepted"""
    )
    _print_relation(summary, "store after dare_refresh")
    from dareforge.publish.release import list_versions

    versions = list_versions(ctx, release)
    out.print(f"release: {release}@{versions[-1] if versions else '(none)'}")


FAMILIES = ("Class-IF", "Class-MM", "Reg-IF", "Reg-MM", "TS-XF", "TS-CF", "QA", "Lake")


def _print_generate(report) -> None:
    counts = ", ".join(f"{family} {report.families.get(family, 0)}" for family in FAMILIES)
    out.print(
        f"generate: {counts}; {len(report.rejected)} rejected, {len(report.failures)} failed, "
        f"{report.reused} reused; {report.wall_seconds:.1f}s ({report.reference_seconds:.1f}s in references)"
    )
    for key, reason in list(report.rejected.items())[:5]:
        out.print(f"  [yellow]rejected[/] {escape(key)}: {escape(reason)}")
    for key, reason in list(report.failures.items())[:5]:
        out.print(f"  [red]failed[/] {escape(key)}: {escape(reason)}")


def _prepare_line(report) -> str:
    line = f"prepare: {len(report.prepared)} prepared, {len(report.skipped)} unchanged, {len(report.failed)} failed"
    for label in report.failed:
        reason = report.reasons.get(label, "").removeprefix(f"{label.split('/')[0]}: ")
        line += f"\n  [red]failed[/] {escape(label)}: {escape(reason)}"
    return line


def _understand_line(report) -> str:
    families = ", ".join(f"{n} {kind}" for kind, n in sorted(report.families.items())) or "none"
    line = (
        f"understand: {len(report.framed)} sources framed ({families}), {len(report.unframed)} without a task; "
        f"{len(report.reused)} unchanged"
    )
    return line + "".join(
        f"\n  [yellow]no task[/] {escape(sid)}: {escape(why)}"
        for sid, why in list(report.reasons.items())[:5]
    )


@app.command()
def sources(
    status: Annotated[
        str | None, typer.Option(help="Only this crawl status: ok, needs-rules, failed.")
    ] = None,
    kept: Annotated[
        bool | None,
        typer.Option(
            "--kept/--dropped", help="Only sources kept (by the filter, with a task found) / dropped."
        ),
    ] = None,
    why: Annotated[
        str | None,
        typer.Option("--why", help="One source: every filter decision and every framing with its evidence."),
    ] = None,
    fmt: FormatOption = "table",
) -> None:
    """List crawled sources with their status, the filter's verdict, the framings chosen, and why.

    Sources waiting for Kaggle rules to be accepted: dareforge sources --status needs-rules
    Why a source gave these tasks (or none): dareforge sources --why builtin.sklearn-iris
    """
    if why:
        _explain_source(why, fmt)
        return
    where, params = [], []
    if status:
        where.append("s.status = ?")
        params.append(status)
    if kept is not None:
        # Kept: the filter kept it and the understand stage (when it has run) found a task in it.
        accepted = "(coalesce(v.kept, false) and (f.source_id is null or f.framings is not null))"
        where.append(accepted if kept else f"not {accepted}")
    relation = (
        _ctx()
        .store.connect()
        .sql(
            f"""with v as (
                  select source_id, bool_and(kept) as kept,
                         string_agg(case when not kept then rule || ': ' || reason end, '; ' order by rule) as why
                  from filter_decisions group by source_id)
                , f as (
                  select source_id, string_agg(framing, ', ' order by framing) filter (where status = 'chosen')
                           as framings,
                         string_agg(framing || ': ' || reason, '; ' order by framing) as unframed
                  from framings group by source_id)
                select s.id, s.status,
                       coalesce(s.n_rows, list_max(list_transform(s.files, lambda f: f.rows))) as rows,
                       v.kept, f.framings,
                       coalesce(s.rules_url, v.why, case when f.framings is null then f.unframed end) as why
                from sources s left join v on v.source_id = s.id left join f on f.source_id = s.id
                {"where " + " and ".join(where) if where else ""}
                order by s.id""",
            params=params,
        )
    )
    _emit(relation, fmt, "sources")


def _explain_source(source_id: str, fmt: str) -> None:
    con = _ctx().store.connect()
    (known,) = con.sql("select count(*) from sources where id = ?", params=[source_id]).fetchall()
    if not known[0]:
        _fail(DareforgeError(f"no source {source_id!r} in the store; list them with `dareforge sources`"))
    decisions = con.sql(
        "select rule, kept, reason from filter_decisions where source_id = ? order by rule",
        params=[source_id],
    )
    _emit(decisions, fmt, f"{source_id}: filter decisions")
    framings = con.sql(
        """select framing, status, task_type, confidence, reason,
                  array_to_string(evidence, chr(10)) as evidence, array_to_string(checks, chr(10)) as checks
           from framings where source_id = ? order by status, confidence desc, framing""",
        params=[source_id],
    )
    _emit(framings, fmt, f"{source_id}: framings (understand)")


@app.command()
def sql(
    query: Annotated[
        str, typer.Argument(help="SQL over the store's tables (sources, filter_decisions, ...).")
    ],
    fmt: FormatOption = "table",
) -> None:
    """Query the store with DuckDB; every table is a view over its Parquet files.

    Example: dareforge sql "select rule, count(*) from filter_decisions where not kept group by rule"
    """
    import duckdb

    try:
        relation = _ctx().store.connect().sql(query)
    except duckdb.Error as exc:
        _fail(exc)
    if relation is not None:
        _emit(relation, fmt, None)


def _emit(relation, fmt: str, title: str | None) -> None:
    if fmt == "json":
        rows = [dict(zip(relation.columns, r, strict=True)) for r in relation.fetchall()]
        out.print_json(json.dumps(rows, default=str))
    elif fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")  # shell pipelines split on \n, not \r\n
        writer.writerow(relation.columns)
        writer.writerows(relation.fetchall())
    elif fmt == "table":
        _print_relation(relation, title)
    else:
        _fail(DareforgeError(f"unknown --format {fmt!r}; use table, csv or json"))


MIN_TOKEN_WIDTH, MIN_PROSE_WIDTH = 12, 20
"""No column is squeezed below these widths (or its widest value); below that, rows print as records."""
TABLE_OVERHEAD = (3, 1)
"""Rich's default table: 3 characters per column (padding and a rule) and 1 for the closing edge."""


def _print_relation(relation, title: str | None) -> None:
    """A query result a person can read at any terminal width.

    Prose columns (a value with a space) wrap at word boundaries; token columns (ids, hashes, paths, numbers)
    stay on one line. When the widest values do not fit, prose gives way first (down to MIN_PROSE_WIDTH),
    then the widest tokens are cut with an ellipsis (down to MIN_TOKEN_WIDTH); when even that does not fit,
    each row prints as a block of `column: value` lines. `--format csv|json` always prints values whole.
    """
    columns = list(relation.columns)
    rows = [["" if v is None else str(v) for v in row] for row in relation.fetchall()]
    natural = [
        max([_text_width(name), *(_text_width(row[i]) for row in rows)]) for i, name in enumerate(columns)
    ]
    prose = [any(" " in row[i] for row in rows) for i in range(len(columns))]
    per_column, edge = TABLE_OVERHEAD
    widths = _fit_widths(natural, prose, out.width - per_column * len(columns) - edge)
    if widths is None:
        _print_records(columns, rows, title)
        return
    table = Table(title=title, title_justify="left")
    for name, width, wraps in zip(columns, widths, prose, strict=True):
        table.add_column(Text(name), width=width, no_wrap=not wraps, overflow="fold" if wraps else "ellipsis")
    for row in rows:
        table.add_row(*(Text(v) for v in row))  # Text: a value is never read as rich markup
    out.print(table)
    if any(not p and n > w for n, w, p in zip(natural, widths, prose, strict=True)):
        out.print("[dim]long values are cut to fit; --format csv or --format json prints them whole[/]")


def _text_width(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _fit_widths(natural: list[int], prose: list[bool], room: int) -> list[int] | None:
    """Column widths within `room` (see `_print_relation`), or None when even the narrowest do not fit."""
    if sum(natural) <= room:
        return natural
    floors = [min(n, MIN_PROSE_WIDTH if p else MIN_TOKEN_WIDTH) for n, p in zip(natural, prose, strict=True)]
    if sum(floors) > room:
        return None
    tokens = [i for i, p in enumerate(prose) if not p]
    texts = [i for i, p in enumerate(prose) if p]
    token_room = sum(natural[i] for i in tokens)
    widths = list(natural)
    if token_room + sum(floors[i] for i in texts) <= room:  # every token whole; prose shares what is left
        shared = _water_fill([natural[i] for i in texts], [floors[i] for i in texts], room - token_room)
        for i, width in zip(texts, shared, strict=True):
            widths[i] = width
        return widths
    cut = _water_fill(
        [natural[i] for i in tokens], [floors[i] for i in tokens], room - sum(floors[i] for i in texts)
    )
    for i in texts:
        widths[i] = floors[i]
    for i, width in zip(tokens, cut, strict=True):
        widths[i] = width
    return widths


def _water_fill(natural: list[int], floors: list[int], room: int) -> list[int]:
    """Widths capped at the largest common cap that fits `room` (never below `floors`, which must fit)."""

    def capped(cap: int) -> list[int]:
        return [max(f, min(n, cap)) for n, f in zip(natural, floors, strict=True)]

    low, high = max(floors, default=0), max(natural, default=0) + 1  # capped(low) fits
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if sum(capped(middle)) <= room else (low, middle)
    return capped(low)


def _print_records(columns: list[str], rows: list[list[str]], title: str | None) -> None:
    if title:
        out.print(Text(title, style="italic"))
    label = max(map(cell_len, columns), default=0)
    for number, row in enumerate(rows, start=1):
        out.rule(f"row {number}", align="left")
        for name, value in zip(columns, row, strict=True):
            out.print(Text(f"{name:>{label}}: ", style="bold") + Text(value))


def _crawl_line(report) -> str:
    parts = ", ".join(f"{n} {action}" for action, n in sorted(report.actions.items()))
    return f"crawl: {report.seen} sources seen ({parts or 'none'}); {len(report.written)} records written"


def _filter_line(report) -> str:
    return f"filter: {len(report.kept)} kept, {len(report.dropped)} dropped; {len(report.written)} decision files written"


# Probe and training-data commands live in their own module; importing it registers them on `app`.
from dareforge import cli_training  # noqa: E402

if __name__ == "__main__":
    app()
