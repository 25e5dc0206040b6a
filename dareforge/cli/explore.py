"""Asking the store: `dareforge sources` (what each source gave, and why) and `dareforge sql`, with tables
fitted to the terminal."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from dareforge.cli.app import FormatOption, command, context, out
from dareforge.errors import DareforgeError

PANEL = "Asking the store"


@command(panel=PANEL)
def browse(
    host: Annotated[
        str, typer.Option(help="Address to listen on (default: this machine only).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    private: Annotated[
        bool, typer.Option("--private", help="Also show references, answers, findings and verdicts.")
    ] = False,
) -> None:
    """The auditor's workbench in a browser: tasks with filters, each task as the agent (and with --private, the
    grader) sees it, sources, and a review form whose reviews the next `dareforge gate` honours."""
    import uvicorn

    from dareforge.browse import make_app

    out.print(f"browse: http://{host}:{port}/tasks{' (private side shown)' if private else ''}")
    uvicorn.run(make_app(context().store, private=private), host=host, port=port, log_level="warning")


@command(panel=PANEL)
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
        context()
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
    con = context().store.connect()
    (known,) = con.sql("select count(*) from sources where id = ?", params=[source_id]).fetchall()
    if not known[0]:
        raise DareforgeError(f"no source {source_id!r} in the store; list them with `dareforge sources`")
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


@command(panel=PANEL)
def sql(
    query: Annotated[
        str, typer.Argument(help="A query over the store's tables (sources, filter_decisions, ...).")
    ],
    private: Annotated[
        bool,
        typer.Option(
            "--private",
            help="Also let the query read any file inside the store by its path (read_csv, read_parquet, ...), "
            "private answers included: tasks/*/private/, releases/*-private/, prepared answers.csv; and the "
            "tables' private columns (tasks.spec: a question's reference program).",
        ),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(help="Seconds the query may run (default: sql.timeout_s in the config; at most 3600)."),
    ] = None,
    fmt: FormatOption = "table",
) -> None:
    """Query the store with DuckDB; every table is a view over its Parquet files.

    Read-only and confined to the store: only queries run (SELECT, FROM, WITH, VALUES, DESCRIBE, SHOW,
    SUMMARIZE); COPY, EXPORT, ATTACH, INSTALL, LOAD, SET, PRAGMA and every statement that changes something
    are refused. A query reads the store's tables, never a file outside the store (a symbolic link counts
    as where it points), never the network, and a file inside the store, or a table's private columns
    (reference programs, answer checksums, agents' steps), only with --private. It stops at its time,
    memory and disk limits (sql.* in the config), naming the one reached.

    Example: dareforge sql "select rule, count(*) from filter_decisions where not kept group by rule"
    """
    import shutil

    from dareforge.confined_sql import Limits, read_only_statements, run_query

    ctx = context()
    limits = Limits.from_config(ctx.config.sql, timeout)
    read_only_statements(query)  # a refused statement leaves not even a scratch folder behind
    scratch = _sql_scratch(ctx)
    try:
        result = run_query(ctx.store, query, private=private, limits=limits, scratch=scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result.columns:
        _emit(result, fmt, None)


def _sql_scratch(ctx) -> Path:
    """A fresh folder of this process for DuckDB's temp files: in the work dir (room to spill), or, where that
    cannot be written (a store mounted read-only, which a person may still query), in the system temp folder."""
    import tempfile

    from dareforge.scratch import temp_root

    try:
        return ctx.scratch_dir("sql")
    except OSError:
        return Path(tempfile.mkdtemp(prefix="sql-", dir=temp_root()))


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
        raise DareforgeError(f"unknown --format {fmt!r}; use table, csv or json")


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
