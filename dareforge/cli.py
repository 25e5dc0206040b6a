"""`dareforge`: turn real tabular sources into verified tasks for data-science agents.

Every command runs one stage function over the store (default `./data`), the same functions Airflow calls.
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from dareforge.config import load_config
from dareforge.context import RunContext
from dareforge.errors import DareforgeError

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
        cfg.store.root = store
        cfg.store.work_dir = str(Path(store) / ".work") if "://" not in store else cfg.store.work_dir
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
def prepare(
    source: Annotated[list[str] | None, typer.Option("--source", "-s", help="Only these source ids.")] = None,
) -> None:
    """Profile accepted sources with DuckDB and split them into public train, public test and private answers."""
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
def run() -> None:
    """The main job on the configured sources: crawl, filter, prepare, generate, then a summary."""
    from dareforge.crawlers.crawl import crawl as crawl_stage
    from dareforge.crawlers.filter import filter_sources
    from dareforge.generators.generate import generate as generate_stage
    from dareforge.generators.prepare import prepare as prepare_stage

    ctx = _ctx()
    try:
        crawled = crawl_stage(ctx)
    except DareforgeError as exc:
        _fail(exc)
    filtered = filter_sources(ctx)
    prepared = prepare_stage(ctx)
    generated = generate_stage(ctx)
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
    out.print(_prepare_line(prepared))
    _print_generate(generated)
    out.print(
        'why a source was dropped: [bold]dareforge sql "select * from filter_decisions where not kept"[/]'
    )


FAMILIES = ("Class-IF", "Class-MM", "Reg-IF", "Reg-MM", "TS-XF", "TS-CF")


def _print_generate(report) -> None:
    counts = ", ".join(f"{family} {report.families.get(family, 0)}" for family in FAMILIES)
    out.print(
        f"generate: {counts}; {len(report.rejected)} rejected, {len(report.failures)} failed, "
        f"{report.reused} reused; {report.wall_seconds:.1f}s ({report.reference_seconds:.1f}s in references)"
    )
    for key, reason in list(report.rejected.items())[:5]:
        out.print(f"  [yellow]rejected[/] {key}: {reason}")
    for key, reason in list(report.failures.items())[:5]:
        out.print(f"  [red]failed[/] {key}: {reason}")


def _prepare_line(report) -> str:
    line = f"prepare: {len(report.prepared)} prepared, {len(report.skipped)} unchanged, {len(report.failed)} failed"
    return line + "".join(f"\n  [red]failed[/] {sid}: {why}" for sid, why in dict(report.failed).items())


@app.command()
def sources(
    status: Annotated[
        str | None, typer.Option(help="Only this crawl status: ok, needs-rules, failed.")
    ] = None,
    kept: Annotated[
        bool | None, typer.Option("--kept/--dropped", help="Only sources the filter kept/dropped.")
    ] = None,
    fmt: FormatOption = "table",
) -> None:
    """List crawled sources with their status, the filter's verdict, and why.

    Sources waiting for Kaggle rules to be accepted: dareforge sources --status needs-rules
    """
    where, params = [], []
    if status:
        where.append("s.status = ?")
        params.append(status)
    if kept is not None:
        where.append("coalesce(v.kept, false)" if kept else "not coalesce(v.kept, false)")
    relation = (
        _ctx()
        .store.connect()
        .sql(
            f"""with v as (
                  select source_id, bool_and(kept) as kept,
                         string_agg(case when not kept then rule || ': ' || reason end, '; ' order by rule) as why
                  from filter_decisions group by source_id)
                select s.id, s.status,
                       coalesce(s.n_rows, list_max(list_transform(s.files, lambda f: f.rows))) as rows,
                       v.kept, coalesce(s.rules_url, v.why) as why
                from sources s left join v on v.source_id = s.id
                {"where " + " and ".join(where) if where else ""}
                order by s.id""",
            params=params,
        )
    )
    _emit(relation, fmt, "sources")


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
        writer = csv.writer(sys.stdout)
        writer.writerow(relation.columns)
        writer.writerows(relation.fetchall())
    elif fmt == "table":
        _print_relation(relation, title)
    else:
        _fail(DareforgeError(f"unknown --format {fmt!r}; use table, csv or json"))


def _print_relation(relation, title: str | None) -> None:
    table = Table(title=title, title_justify="left")
    for column in relation.columns:
        table.add_column(column, overflow="fold", no_wrap=column in ("id", "source_id", "rule"))
    for row in relation.fetchall():
        table.add_row(*("" if v is None else str(v) for v in row))
    out.print(table)


def _crawl_line(report) -> str:
    parts = ", ".join(f"{n} {action}" for action, n in sorted(report.actions.items()))
    return f"crawl: {report.seen} sources seen ({parts or 'none'}); {len(report.written)} records written"


def _filter_line(report) -> str:
    return f"filter: {len(report.kept)} kept, {len(report.dropped)} dropped; {len(report.written)} decision files written"


if __name__ == "__main__":
    app()
