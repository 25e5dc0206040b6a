"""Commands that run one pipeline stage each over the store, as the DAG tasks do: crawl, filter, understand,
prepare, generate, validate, gate; and report, audit, evaluate and resimulate on their outputs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from dareforge.cli import training
from dareforge.cli.app import ReleaseOption, command, context, out, show
from dareforge.pipeline import Run, stage

PANEL = "Pipeline stages"


@command(panel=PANEL)
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

    show(crawl_stage(context(), origins=origin).lines)


@command("filter", panel=PANEL)
def filter_() -> None:
    """Judge every crawled source by every rule; each decision is stored with its reason.

    Ask why with: dareforge sql "select * from filter_decisions where not kept"
    """
    show(stage("filter").run(Run(context())).lines)


@command(panel=PANEL)
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
    show(stage("understand").run(Run(context()), source).lines)


@command(panel=PANEL)
def prepare(
    source: Annotated[list[str] | None, typer.Option("--source", "-s", help="Only these source ids.")] = None,
) -> None:
    """Profile each chosen framing of the framed sources with DuckDB and split it into public train, public
    test and private answers."""
    show(stage("prepare").run(Run(context()), source).lines)


@command(panel=PANEL)
def generate(
    source: Annotated[list[str] | None, typer.Option("--source", "-s", help="Only these source ids.")] = None,
) -> None:
    """Generate the tasks of every registered family (IF, MM, time series, QA, Lake), each with certified references.

    Tasks land in the store under tasks/<task_id>/ (public/, private/, _MANIFEST.json) and in the `tasks` table.
    A family is one module in dareforge/families/ plus one line in its registry.
    """
    show(stage("generate").run(Run(context()), source).lines)


@command(panel=PANEL)
def check(
    source: Annotated[list[str] | None, typer.Option("--source", "-s", help="Only these source ids.")] = None,
) -> None:
    """Run the per-task checks (great-expectations suites, leakage, duplicates, solvability, the solver ladder)
    on each source's tasks and store the findings; `validate` then adds the run-wide checks and gates.

    The refresh runs it per source before validate; tasks whose findings are stored are not checked again.
    """
    show(stage("check").run(Run(context()), source).lines)


@command(panel=PANEL)
def validate(
    task: Annotated[list[str] | None, typer.Option("--task", "-t", help="Only these task ids.")] = None,
) -> None:
    """Run every check (great-expectations suites, leakage, duplicates, solvability) and gate the tasks.

    Findings land in the `validations` table, decisions in `verdicts`, the HTML report in
    reports/validation/index.html. Why was a task rejected? dareforge sql "select * from verdicts where not accepted"
    """
    show(stage("validate").run(Run(context()), task).lines)


@command("gate", panel=PANEL)
def gate_() -> None:
    """Re-decide every validated task with the current `validate:` thresholds, without re-running checks."""
    show(stage("gate").run(Run(context())).lines)


@command(panel="Releases and reports")
def report(
    release: ReleaseOption = "dareforge",
) -> None:
    """Write an HTML report of a release: the filter funnel, tasks per family, baseline vs strong scores."""
    from dareforge.publish.release_report import write_release_report
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    key = write_release_report(context(), name, version)
    out.print(f"report: {context().store.path(key)}")


@command(panel="Releases and reports")
def audit(
    release: ReleaseOption = "dareforge",
    agreement_only: Annotated[
        bool, typer.Option("--agreement", help="Only the gate-vs-reviewers table; re-run no check.")
    ] = False,
) -> None:
    """Re-run every check on a published release's tasks and report what changed since it was cut; then the
    gate's precision and recall against people's reviews, per check and per family (every reviewed task)."""
    from dareforge.cli.reviews import agreement_table
    from dareforge.validators.audit import audit as audit_stage

    if agreement_only:
        out.print(agreement_table())
        return
    report = audit_stage(context(), release)
    out.print(
        f"audit {report.release}@{report.version}: {report.tasks} tasks, {len(report.now_rejected)} now rejected, "
        f"{len(report.missing)} missing, {len(report.moved)} check scores moved"
    )
    for task_id, reasons in sorted(report.now_rejected.items()):
        out.print(f"  [red]{task_id}[/]: {reasons}")
    out.print(f"  report: {context().store.path(report.report_key)}")
    out.print(agreement_table())
    if report.now_rejected or report.missing:
        raise typer.Exit(1)


@command(panel="Agents and training data")
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
    with training.default_model():
        report = evaluate_stage(
            context(),
            endpoint,
            release=name,
            version=version,
            split=split,
            samples=samples,
            temperature=temperature,
            concurrency=concurrency,
            subtasks=subtasks,
        )
    out.print(render_table(report))
    out.print(f"{report.ran} attempts run now, {report.reused} taken from the store")


@command(panel="Agents and training data")
def resimulate(
    task: Annotated[list[str] | None, typer.Option("--task", "-t", help="Only these task ids.")] = None,
) -> None:
    """Re-run the stored IF references on this machine's library versions; list tasks whose predictions changed."""
    from dareforge.reference_solutions.resimulate import resimulate as resimulate_stage

    results = resimulate_stage(context(), task)
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
