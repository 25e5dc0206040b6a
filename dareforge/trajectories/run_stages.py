"""The stages of `dareforge run` that use its models (`models.RunModels`): the shortcut probe, and the
trajectories (gold ones, which need no model, then sampled ones).

The probe is the first stage with the models up, so its report's first line says which models the run uses, or
why it has none and how to get one.
"""

from __future__ import annotations

from dareforge.context import RunContext
from dareforge.families.registry import family_of
from dareforge.probes.shortcut import probe_shortcuts, shortcut_candidates
from dareforge.publish.release import load_release
from dareforge.report import StageReport
from dareforge.trajectories.corpus import corpus_tasks
from dareforge.trajectories.gold import gold_trajectories
from dareforge.trajectories.models import RunModels
from dareforge.trajectories.synthesize import synthesize, task_set


def probe_with(ctx: RunContext, models: RunModels | None, task_ids: list[str] | None = None) -> StageReport:
    """The shortcut probe by the run's models (on `models.tasks_per_stage` tasks when the run limits them). Without
    a model the probe does not run: the report has only the line saying why, and no outcome."""
    if models is None or not models.endpoints:
        why = models.why if models is not None else "no models opened"
        line = (
            f"models: none ({why}); probe and sampling skipped. Add an endpoint under llm.endpoints in "
            "dareforge.yaml (name, base_url, model, api_key_env; see dareforge.example.yaml), then run "
            "[bold]dareforge probe[/], [bold]dareforge synthesize[/] or [bold]dareforge evaluate -e NAME[/]"
        )
        return StageReport("probe", lines=[line])
    limit = f", {models.tasks_per_stage} tasks per stage" if models.tasks_per_stage else ""
    candidates = task_ids if task_ids is not None else [t.id for t in shortcut_candidates(ctx)]
    limited = models.limit(candidates)  # None when the run gives its models every task
    report = probe_shortcuts(ctx, task_ids=task_ids if limited is None else limited)
    report.lines.insert(0, f"models: {', '.join(models.endpoints)} ({models.why}{limit})")
    return report


def play_trajectories(ctx: RunContext, release: str, models: RunModels | None) -> StageReport:
    """Gold trajectories of `release`'s `synthesize.split` tasks (see `run_gold_ids`), then, when the run has
    models, sampled ones (one attempt per task with the local model). Reused and `counts["played"]` count
    attempts; failures are the gold trajectories not verified (each points at a bug)."""
    golden = gold_trajectories(
        ctx, release, split=ctx.config.synthesize.split, task_ids=run_gold_ids(ctx, release)
    )
    report = StageReport(
        "trajectories", reused=golden.reused, failures=golden.failed, lines=[golden.summary()]
    )
    report.counts["played"] = golden.ran
    if models is not None and models.endpoints:
        task_ids = models.limit([t.id for t in corpus_tasks(ctx, load_release(ctx, release))])
        samples = 1 if models.local else None
        sampled = synthesize(ctx, release, samples=samples, task_ids=task_ids, rerun_llm_errors=True)
        report.reused += sampled.reused
        report.counts["played"] += sampled.ran
        report.lines.append(sampled.summary())
    return report


def run_gold_ids(ctx: RunContext, release: str) -> list[str] | None:
    """The tasks `dareforge run` plays gold for: every IF task of the split and the first
    `synthesize.gold_questions_per_run` question tasks by id (a question's gold takes as long as an IF task's,
    and there are many more of them); None for all."""
    cap = ctx.config.synthesize.gold_questions_per_run
    if cap is None:
        return None
    tasks = task_set(ctx, release, ctx.config.synthesize.split).tasks
    questions = sorted(t.id for t in tasks if family_of(t).asks_question)
    return [t.id for t in tasks if not family_of(t).asks_question] + questions[:cap]
