"""`dareforge` commands for probes and training data: probe, obscure, synthesize, judge, export.

Registered on the main app by `dareforge.cli`; each command runs one stage function, as the DAGs do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from dareforge.cli import ReleaseOption, _ctx, _fail, app, out
from dareforge.errors import DareforgeError

EndpointsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--endpoint", "-e", help="Endpoint name from llm.endpoints (repeat; default: the config's)."
    ),
]
ToOption = Annotated[Path | None, typer.Option("--to", help="Also copy the export into this folder.")]
HubOption = Annotated[str | None, typer.Option("--hub", help="Also push it to this Hugging Face namespace.")]


@contextlib.contextmanager
def default_model() -> Iterator[None]:
    """The configured endpoints; without any, the embedded local model (endpoint `local`) for the command."""
    from dareforge.trajectories.models import run_models

    ctx = _ctx()
    with run_models(ctx, ctx.work_dir) as models:
        if models.local:
            out.print(
                f"[dim]no llm.endpoints configured: the {models.why} serves as endpoint {models.endpoints[0]!r} "
                "(about 30 s per attempt on 2 cores; limit the work with --task and --samples)[/]"
            )
        yield


@app.command()
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

    try:
        report = judge_trajectories(_ctx(), partition or None, endpoint, concurrency=concurrency)
    except DareforgeError as exc:
        _fail(exc)
    out.print(report.summary())


@app.command()
def export(
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="sft: chosen trajectories as chat messages; rl: tasks with a reward spec; "
            "dare-bench: DARE-bench's own layout; kramabench: KramaBench's workload (QA and Lake tasks).",
        ),
    ] = "sft",
    release: ReleaseOption = "dareforge",
    strategy: Annotated[
        str | None, typer.Option(help="fastest-valid, all-valid, diverse-valid or top2-diverse.")
    ] = None,
    dest: Annotated[
        Path | None,
        typer.Option(
            "--dest", help="dare-bench, kramabench: folder to write (default data/export/<format>)."
        ),
    ] = None,
    to: ToOption = None,
    hub: HubOption = None,
) -> None:
    """Export a release as training data (sft, rl: versioned like releases) or in another benchmark's layout.

    sft keeps verified trajectories (gold and sampled) of the release's synthesize.split tasks that pass the
    judge thresholds and the diversity filter, chosen by the strategy; rl holds the same tasks as prompts and
    DARE-bench's reward (0.1 well-formed + 1.0 IF match or the MM/TS metric). Both load with `datasets`.
    """
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    try:
        if fmt == "dare-bench":
            _export_dare_bench(name, version, dest or Path("data/export/dare-bench"))
            return
        if fmt == "kramabench":
            _export_kramabench(name, version, dest or Path("data/export/kramabench"))
            return
        if fmt not in ("sft", "rl"):
            raise DareforgeError(f"unknown --format {fmt!r}; choose sft, rl, dare-bench or kramabench")
        from dareforge.trajectories.corpus import build_corpus

        result = build_corpus(_ctx(), name, version, formats=[fmt], strategy=strategy)
        for note in result.notes:
            out.print(f"[yellow]{note}[/]")
        built = result.sft if fmt == "sft" else result.rl
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
    except DareforgeError as exc:
        _fail(exc)


def _export_dare_bench(name: str, version: str | None, dest: Path) -> None:
    from dareforge.publish.export import export_dare_bench
    from dareforge.publish.release import load_release

    loaded = load_release(_ctx(), name, version)
    report = export_dare_bench(_ctx(), name, loaded.version, dest)
    out.print(f"exported {name}@{loaded.version} to {report.dest}: {len(report.folders)} folders")
    for key, why in sorted(report.skipped.items()):
        out.print(f"  skipped {key}: {why}")


def _export_kramabench(name: str, version: str | None, dest: Path) -> None:
    from dareforge.publish.kramabench import export_kramabench

    report = export_kramabench(_ctx(), name, version, dest)
    out.print(
        f"exported {len(report.tasks)} QA/Lake tasks ({report.subtasks} sub-tasks) of {name} to {report.dest}: "
        f"workload {report.workload}"
    )


def _publish(export, to: Path | None, hub: str | None) -> None:
    from dareforge.publish.hub import HubTarget
    from dareforge.publish.targets import LocalTarget

    if to is not None:
        out.print(f"copied to {LocalTarget(to).publish(export)}")
    if hub is not None:
        out.print(f"pushed to {HubTarget(hub).publish(export)}")


@app.command()
def gold(
    release: ReleaseOption = "dareforge",
    split: Annotated[str, typer.Option(help="train, test or all.")] = "train",
    from_store: Annotated[
        bool, typer.Option("--store", help="Use the store's candidate tasks instead of a release.")
    ] = False,
    task: Annotated[list[str] | None, typer.Option("--task", help="Only these task ids (repeat).")] = None,
    workers: Annotated[int | None, typer.Option(help="Episodes at once (default: CPUs).")] = None,
) -> None:
    """Play one gold trajectory per IF task: the reference pipeline as agent turns, run for real in the sandbox.

    Every observation is a true kernel output and each trajectory is verified by grading its predictions,
    so the SFT export has data without any model. Exit 1 if a gold trajectory fails (it points at a bug).
    """
    from dareforge.trajectories import gold_trajectories
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    try:
        report = gold_trajectories(_ctx(), None if from_store else name, split, version, task, workers)
    except DareforgeError as exc:
        _fail(exc)
    out.print(report.summary())
    for task_id, why in sorted({**report.failed, **report.skipped}.items()):
        out.print(f"  {task_id}: {why}")
    if report.failed:
        raise typer.Exit(1)


@app.command()
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
    try:
        with default_model():
            report = synthesize_stage(
                _ctx(),
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
    except DareforgeError as exc:
        _fail(exc)
    out.print(render_table(report))
    out.print(report.summary())


# -- the model part of `dareforge run` -----------------------------------------------------------------------
def probe_for_run(ctx, models):
    """The shortcut probe before the release is cut (the gate re-decides), or None without a model."""
    if not models.endpoints:
        return None
    from dareforge.probes import probe_shortcuts
    from dareforge.probes.shortcut import shortcut_candidates

    task_ids = models.limit([t.id for t in shortcut_candidates(ctx)])
    return probe_shortcuts(ctx, task_ids=task_ids)


def trajectories_for_run(ctx, models, release: str):
    """Gold trajectories of the release's train IF tasks, and sampled ones when there is a model."""
    from dareforge.publish.release import load_release
    from dareforge.trajectories import gold_trajectories
    from dareforge.trajectories import synthesize as synthesize_stage
    from dareforge.trajectories.corpus import corpus_tasks

    golden = gold_trajectories(
        ctx, release, split=ctx.config.synthesize.split, task_ids=run_gold_ids(ctx, release)
    )
    sampled = None
    if models.endpoints:
        task_ids = models.limit([t.id for t in corpus_tasks(ctx, load_release(ctx, release))])
        samples = 1 if models.local else None
        sampled = synthesize_stage(ctx, release, samples=samples, task_ids=task_ids, rerun_llm_errors=True)
    return golden, sampled


def run_gold_ids(ctx, release: str) -> list[str] | None:
    """The tasks `dareforge run` plays gold for: every IF task of the split and the first
    `synthesize.gold_questions_per_run` question tasks by id (a question's gold takes as long as an IF task's,
    and there are many more of them); None for all."""
    from dareforge.trajectories.synthesize import task_set

    cap = ctx.config.synthesize.gold_questions_per_run
    if cap is None:
        return None
    tasks = task_set(ctx, release, ctx.config.synthesize.split).tasks
    questions = sorted(t.id for t in tasks if t.is_question)
    return [t.id for t in tasks if not t.is_question] + questions[:cap]


def print_run_training(models, probed, trained, corpus) -> None:
    golden, sampled = trained
    if models.endpoints:
        limit = f", {models.tasks_per_stage} tasks per stage" if models.tasks_per_stage else ""
        out.print(f"models: {', '.join(models.endpoints)} ({models.why}{limit})")
        out.print(f"probe: {probed.summary()}")
    else:
        out.print(
            f"models: none ({models.why}); probe and sampling skipped. Add an endpoint under llm.endpoints in "
            "dareforge.yaml (name, base_url, model, api_key_env; see dareforge.example.yaml), then run "
            "[bold]dareforge probe[/], [bold]dareforge synthesize[/] or [bold]dareforge evaluate -e NAME[/]"
        )
    out.print(golden.summary())
    if sampled is not None:
        out.print(sampled.summary())
    for note in corpus.notes:
        out.print(f"corpus: {note}")
    for built in (corpus.sft, corpus.rl):
        if built is not None:
            state = "new version" if built.created else "unchanged"
            out.print(f"{built.export.kind}: {built.name}@{built.version} ({state})")


@app.command()
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

    try:
        with default_model():
            if obscured:
                report = probe_memorization(_ctx(), endpoint, task, concurrency=concurrency)
                for m in report.models:
                    out.print(
                        f"{m.endpoint} ({m.model}): {m.pairs} pairs, original {m.original:.3f}, obscured "
                        f"{m.obscured:.3f}, drop {m.drop:+.3f}; suspects: {', '.join(m.suspects) or 'none'}"
                    )
                return
            report = probe_shortcuts(_ctx(), endpoint, task, concurrency=concurrency)
    except DareforgeError as exc:
        _fail(exc)
    out.print(report.summary())
    for finding in report.findings:
        if finding.task_id in report.flagged:
            out.print(f"  {finding.task_id}: {finding.reason}")


@app.command()
def obscure(
    task: Annotated[list[str] | None, typer.Option("--task", help="Only these task ids (repeat).")] = None,
) -> None:
    """Build obscured variants: renamed columns and labels, rescaled numbers, re-keyed ids; references re-certified.

    Variants are never released; `dareforge probe --obscured` compares models on originals and variants.
    """
    from dareforge.probes import obscure_tasks

    try:
        report = obscure_tasks(_ctx(), task)
    except DareforgeError as exc:
        _fail(exc)
    out.print(
        f"obscure: {len(report.variants)} variants ({dict(report.families)}), {len(report.rejected)} rejected, "
        f"{len(report.failures)} failed, {report.reused} reused, {len(report.skipped)} skipped"
    )
    for key, why in sorted({**report.rejected, **report.failures, **report.skipped}.items()):
        out.print(f"  {key}: {why}")
