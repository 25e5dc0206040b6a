"""The stages of `dareforge run` that use its models (`models.RunModels`): the shortcut probe.

The probe is the first stage with the models up, so its report's first line says which models the run uses, or
why it has none and how to get one.
"""

from __future__ import annotations

from dareforge.context import RunContext
from dareforge.probes.shortcut import probe_shortcuts, shortcut_candidates
from dareforge.report import StageReport
from dareforge.trajectories.models import RunModels


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
    report = probe_shortcuts(ctx, task_ids=models.limit(candidates))
    report.lines.insert(0, f"models: {', '.join(models.endpoints)} ({models.why}{limit})")
    return report
