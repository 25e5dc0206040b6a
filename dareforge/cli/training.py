"""`dareforge` commands for probes and training data: probe, obscure, synthesize, judge, export.

Each command runs one stage function, as the DAGs do; `dareforge run` uses the model part at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from dareforge.cli.app import ReleaseOption, command, context, out, show
from dareforge.exports.formats import FORMATS, export_format
from dareforge.pipeline import Run, stage

EndpointsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--endpoint", "-e", help="Endpoint name from llm.endpoints (repeat; default: the config's)."
    ),
]
ToOption = Annotated[Path | None, typer.Option("--to", help="Also copy the export into this folder.")]
HubOption = Annotated[str | None, typer.Option("--hub", help="Also push it to this Hugging Face namespace.")]

PANEL = "Agents and training data"


@contextlib.contextmanager
def default_model() -> Iterator[None]:
    """The configured endpoints; without any, the embedded local model (endpoint `local`) for the command."""
    from dareforge.trajectories.models import run_models

    ctx = context()
    with run_models(ctx, ctx.work_dir) as models:
        if models.local:
            out.print(
                f"[dim]no llm.endpoints configured: the {models.why} serves as endpoint {models.endpoints[0]!r} "
                "(about 30 s per attempt on 2 cores; limit the work with --task and --samples)[/]"
            )
        yield


@command(panel=PANEL)
def judge(
    endpoint: Annotated[
        str | None, typer.Option("--endpoint", "-e", help="Judge endpoint (default: judge.endpoint).")
    ] = None,
    partition: Annotated[
        list[str] | None,
        typer.Option(
            "--partition", "-p", help="Trajectory partition (repeat; default: every gold--/sampled--)."
        ),
    ] = None,
    concurrency: Annotated[int | None, typer.Option(help="Judge calls at once.")] = None,
) -> None:
    """Score stored trajectories with an LLM judge on DSGym's six criteria (1-5 each, JSON).

    The judge sees the task, the transcript and the execution verdict, never the answers. Malformed replies
    are retried with a correction, then recorded as malformed; re-runs skip what is judged. Selection
    (`dareforge export --format sft`) then applies judge.min_overall and judge.min_criterion.
    """
    from dareforge.judge import judge_trajectories

    report = judge_trajectories(context(), partition or None, endpoint, concurrency=concurrency)
    out.print(report.summary())


@command(panel=PANEL)
def export(
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="; ".join(f"{name}: {entry.summary}" for name, entry in FORMATS.items()) + "."
        ),
    ] = "sft",
    release: ReleaseOption = "dareforge",
    strategy: Annotated[
        str | None, typer.Option(help="fastest-valid, all-valid, diverse-valid or top2-diverse.")
    ] = None,
    dest: Annotated[
        Path | None,
        typer.Option(
            "--dest", help="A benchmark's folder layout: the folder to write (default data/export/<format>)."
        ),
    ] = None,
    if_rule: Annotated[
        str,
        typer.Option(
            "--if-rule",
            help="dare-bench: how the exported metric scores IF tasks, all-rows (DARE-bench's rule: 1 only when "
            "every row matches) or row-share (our releases' rule: the share of rows that match).",
        ),
    ] = "all-rows",
    controls: Annotated[
        str | None,
        typer.Option(
            "--controls",
            help="harbor: how many exported tasks of each family get control runs (oracle and no-op in the "
            "sandbox), a sample seeded by their ids, or `all` (default: 20).",
        ),
    ] = None,
    to: ToOption = None,
    hub: HubOption = None,
) -> None:
    """Export a release as training data (versioned like releases) or in another benchmark's layout.

    sft keeps verified trajectories (gold and sampled) of the release's synthesize.split tasks that pass the
    judge thresholds and the diversity filter, chosen by the strategy; rl holds the same tasks as prompts and
    DARE-bench's reward (0.1 well-formed + 1.0 IF match or the MM/TS metric). Both load with `datasets`.
    harbor writes one Harbor task folder per task to --dest, leaving out those whose strong reference the store
    scored below the family's bar, and runs the oracle (must earn reward 1) and a no-op (0) in the sandbox on a
    seeded sample of each family (--controls); a controlled task that fails is a packaging bug and fails the
    export (its README lists the tasks left out and why). The folder layouts
    hold answers: keep them as private as the private release.
    """
    from dareforge.exports.export_format import ExportJob, FolderLayout
    from dareforge.publish.release import load_release
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    chosen = export_format(fmt)
    if fmt == "dare-bench":
        from dareforge.exports.dare_bench import DareBenchLayout

        chosen = DareBenchLayout(fmt, if_rule=if_rule)
    if fmt == "harbor":
        from dareforge.exports.harbor import HarborLayout, parse_controls

        chosen = HarborLayout(fmt, controls_per_family=parse_controls(controls))
    if isinstance(chosen, FolderLayout):
        job = ExportJob(
            context(), load_release(context(), name, version), dest=dest or Path(f"data/export/{fmt}")
        )
        show(chosen.export(job).summary())
        return
    from dareforge.trajectories.corpus import build_corpus

    result = build_corpus(context(), name, version, formats=[fmt], strategy=strategy)
    for note in result.notes:
        out.print(f"[yellow]{note}[/]")
    built = result.exports.get(fmt)
    if built is None:
        raise typer.Exit(1)
    if result.selection is not None:
        counts = dict(result.selection.counts())
        out.print(
            f"selection ({result.selection.strategy}): {len(result.selection.kept)} kept, dropped {counts}"
        )
    out.print(
        f"{fmt} export {built.name}@{built.version} ({'new version' if built.created else 'unchanged'})"
    )
    _publish(built.export, to, hub)


def _publish(export, to: Path | None, hub: str | None) -> None:
    from dareforge.publish.hub import HubTarget
    from dareforge.publish.targets import LocalTarget

    if to is not None:
        out.print(f"copied to {LocalTarget(to).publish(export)}")
    if hub is not None:
        out.print(f"pushed to {HubTarget(hub).publish(export)}")


@command(panel=PANEL)
def gold(
    release: ReleaseOption = "dareforge",
    split: Annotated[str, typer.Option(help="train, test or all.")] = "train",
    from_store: Annotated[
        bool, typer.Option("--store", help="Use the store's candidate tasks instead of a release.")
    ] = False,
    task: Annotated[list[str] | None, typer.Option("--task", help="Only these task ids (repeat).")] = None,
    workers: Annotated[int | None, typer.Option(help="Episodes at once (default: CPUs).")] = None,
) -> None:
    """Play one gold trajectory per IF, QA and Lake task: its reference as agent turns, run in the sandbox.

    Every observation is a true kernel output and each trajectory is verified by grading its predictions,
    so the SFT export has data without any model. Exit 1 if a gold trajectory fails (it points at a bug).
    """
    from dareforge.trajectories import gold_trajectories
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    report = gold_trajectories(context(), None if from_store else name, split, version, task, workers)
    out.print(report.summary())
    for task_id, why in sorted({**report.failed, **report.skipped}.items()):
        out.print(f"  {task_id}: {why}")
    if report.failed:
        raise typer.Exit(1)


@command(panel=PANEL)
def synthesize(
    release: ReleaseOption = "dareforge",
    endpoint: EndpointsOption = None,
    samples: Annotated[
        int | None, typer.Option(help="K attempts per task (default synthesize.samples).")
    ] = None,
    temperature: Annotated[float | None, typer.Option(help="Default synthesize.temperature.")] = None,
    split: Annotated[str | None, typer.Option(help="train, test or all (default synthesize.split).")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="Only these task ids (repeat).")] = None,
    rerun_llm_errors: Annotated[bool, typer.Option(help="Replay attempts the endpoint failed.")] = False,
    concurrency: Annotated[
        int | None, typer.Option(help="Episodes at once (default: the endpoint's max_concurrency).")
    ] = None,
) -> None:
    """Sample K agent trajectories per task and endpoint in the sandbox; valid ones are verified by execution.

    Valid: an IF prediction matching the reference exactly, or an MM/TS score reaching its family's bar
    (synthesize.pass_bars). Stored in trajectories partitions sampled--ENDPOINT--RELEASE; re-runs skip them.
    """
    from dareforge.trajectories import render_table
    from dareforge.trajectories import synthesize as synthesize_stage
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    with default_model():
        report = synthesize_stage(
            context(),
            name,
            endpoint,
            samples,
            temperature,
            split,
            version,
            task,
            rerun_llm_errors=rerun_llm_errors,
            concurrency=concurrency,
        )
    out.print(render_table(report))
    out.print(report.summary())


@command(panel=PANEL)
def probe(
    endpoint: EndpointsOption = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="Only these task ids (repeat).")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Episodes at once per endpoint.")] = None,
    obscured: Annotated[
        bool,
        typer.Option("--obscured", help="Memorization probe: originals vs obscured variants (see obscure)."),
    ] = False,
) -> None:
    """Shortcut probe: each model attempts each accepted task with the data withheld (only the test ids).

    A task more than validate.max_shortcut_share of the models still solve is rejected by the gate (re-run
    here), so the next release leaves it out. Per-model results: dareforge sql "select * from probes".
    With --obscured: each model attempts originals and their obscured variants; a drop suggests memorization.
    """
    from dareforge.probes import probe_memorization, probe_shortcuts

    with default_model():
        if obscured:
            report = probe_memorization(context(), endpoint, task, concurrency=concurrency)
            for m in report.models:
                out.print(
                    f"{m.endpoint} ({m.model}): {m.pairs} pairs, original {m.original:.3f}, obscured "
                    f"{m.obscured:.3f}, drop {m.drop:+.3f}; suspects: {', '.join(m.suspects) or 'none'}"
                )
            return
        report = probe_shortcuts(context(), endpoint, task, concurrency=concurrency)
    show(report.lines)
    for task_id, reason in report.outcomes["flagged"].items():
        out.print(f"  {task_id}: {reason}")
    show(stage("gate").run(Run(context())).lines)


@command(panel=PANEL)
def obscure(
    task: Annotated[list[str] | None, typer.Option("--task", help="Only these task ids (repeat).")] = None,
) -> None:
    """Build obscured variants: renamed columns and labels, rescaled numbers, re-keyed ids; references re-certified.

    Variants are never released; `dareforge probe --obscured` compares models on originals and variants.
    """
    from dareforge.probes import obscure_tasks

    show(obscure_tasks(context(), task).lines)
