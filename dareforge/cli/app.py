"""The CLI's ground floor: the Typer app, the console, the run context of a command and the one wrapper that
turns a `DareforgeError`, or a file system refusing the run, into a one-line message and exit code 2. Command
modules register through `command`."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import duckdb
import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from dareforge.cli.filesystem import filesystem_problem
from dareforge.config import StoreConfig
from dareforge.config_loader import load_config
from dareforge.context import RunContext
from dareforge.errors import DareforgeError

app = typer.Typer(
    help="""`dareforge`: turn real tabular sources into verified tasks for data-science agents.

Every command runs one stage function over the store (default `./data`), the same functions Airflow calls.""",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
release_app = typer.Typer(help="Cut, list, verify and publish versioned releases.", no_args_is_help=True)
review_app = typer.Typer(help="Record, list and export people's reviews of tasks.", no_args_is_help=True)
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
        fail(exc)
    if store:
        cfg.store.root = store  # an unset store.work_dir follows the root (see StoreConfig.work_path)
    with reporting(cfg.store):  # opening the store creates its folder
        STATE["ctx"] = RunContext.from_config(cfg, show_progress=not quiet)


def context() -> RunContext:
    return STATE["ctx"]


def fail(problem: Exception | str) -> None:
    # Escaped: messages quote config values and paths, which may hold [brackets]; soft-wrapped: a message
    # stays one line for grep and logs, whatever the terminal's width.
    Console(stderr=True).print(f"[bold red]error:[/] {escape(str(problem))}", soft_wrap=True)
    raise typer.Exit(2)


@contextmanager
def reporting(store: StoreConfig) -> Iterator[None]:
    """Turn what a user can fix into `error: <message>` and exit code 2: a `DareforgeError`, or the file
    system refusing the run (see `dareforge.cli.filesystem`), whichever stage or library it came from."""
    try:
        yield
    except DareforgeError as exc:
        fail(exc)
    except (OSError, duckdb.IOException) as exc:
        problem = filesystem_problem(exc, store)
        if problem is None:
            raise
        fail(problem)


PANELS = (
    "Run everything",
    "Pipeline stages",
    "Agents and training data",
    "Releases and reports",
    "Asking the store",
)
"""The groups of `dareforge --help`, in the order it lists them."""
_COMMANDS: list[tuple[str, str | None, typer.Typer, Callable[..., Any]]] = []


def show(lines: list[Any]) -> None:
    """Print a stage's summary lines (`StageReport.lines`, see `dareforge.report`)."""
    for line in lines:
        out.print(line)


def command(
    name: str | None = None, *, panel: str, group: typer.Typer = app
) -> Callable[[Callable[..., Any]], Any]:
    """Declare a command of `group` under `panel` of the help; what it raises that a user can fix becomes
    `error: <message>` and exit code 2 (see `reporting`). `register_commands` adds them to the app, panel by
    panel."""
    if panel not in PANELS:
        raise ValueError(f"unknown help panel {panel!r}; add it to PANELS")

    def declare(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            with reporting(context().config.store):
                return fn(*args, **kwargs)

        _COMMANDS.append((panel, name, group, guarded))
        return fn

    return declare


def register_commands() -> None:
    """Add every declared command to its group, panel by panel in `PANELS` order, each in declaration order."""
    for panel in PANELS:
        if panel == "Releases and reports":
            app.add_typer(release_app, name="release", rich_help_panel=panel)
            app.add_typer(review_app, name="review", rich_help_panel=panel)
        for declared_panel, name, group, fn in _COMMANDS:
            if declared_panel == panel:
                group.command(name, rich_help_panel=panel if group is app else None)(fn)
    _COMMANDS.clear()
