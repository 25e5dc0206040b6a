"""The seam between Airflow and the stages: what every DAG task needs besides the stage function itself.

DAG files import this module at parse time, so it imports nothing heavy at the top (the stages, the store
and Airflow's metadata models are imported inside the functions that use them).

Pools (create them once per metadata database with `python -m dareforge.orchestration pools`; existing
pools keep the slots an operator gave them):
- `kaggle_api`: calls to the Kaggle API, which rate-limits per account; one at a time.
- `llm`: requests to the LLM endpoints (probes, agents, judges); slots = concurrent requests.
- `sandbox`: agent sandboxes (a Python kernel each, CPU and memory bound); slots = kernels at once.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dareforge.errors import TransientError

if TYPE_CHECKING:
    from dareforge.context import RunContext
    from dareforge.report import StageReport

log = logging.getLogger(__name__)

TASKS_ASSET = "dareforge://store/tasks"
INSTANCE_CPU = "task instance CPU-s:"
"""What `run_stage` logs last, before the instance's CPU seconds so far (its process and every descendant)."""
"""Updated when validation has re-decided the store's tasks (the verified set may have changed)."""
RELEASES_ASSET = "dareforge://releases"
"""Updated when a new release version is published; the event's extra names it: {"release": "NAME@VERSION"}."""
CORPORA_ASSET = "dareforge://corpora"
"""Updated when the training-data exports (SFT, RL) of a release were (re)built."""
DEFAULT_RELEASE = "dareforge"

POOLS: dict[str, tuple[int, str]] = {
    "kaggle_api": (1, "Kaggle API calls (per-account rate limit): one crawl at a time"),
    "llm": (8, "Concurrent requests to the LLM endpoints (probe, agent, judge)"),
    "sandbox": (4, "Concurrent agent sandboxes (one Python kernel each; CPU and memory bound)"),
}

NETWORK_RETRIES: dict[str, Any] = {
    "retries": 2,
    "retry_delay": timedelta(minutes=2),
    "retry_exponential_backoff": 2.0,  # a multiplier in Airflow 3.3; True would mean 1.0, no backoff
    "max_retry_delay": timedelta(minutes=30),
}
"""Task arguments for tasks that talk to remote services (Kaggle, object storage, the Hub)."""

STAGE_RETRIES: dict[str, Any] = {"retries": 2, "retry_delay": timedelta(seconds=15)}
"""Task arguments for the per-source and validate stages: a worker that dies (killed, out of memory) leaves its
task instances to the scheduler, which runs them again on another worker. Safe because every stage skips
finished work and writes atomically under the source's lock."""

# Errors that say nothing about the input: worth an Airflow retry. Missing files and permissions are not.
_NOT_TRANSIENT_OS = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)


def on_each_release(doc: str | None) -> dict[str, Any]:
    """The `@dag` arguments of a DAG that runs on every published release (the RELEASES_ASSET event names it),
    or by hand on the `release` param. It starts unpaused: a DAG that waits for an asset has nothing to run
    until a release is published, and a paused one would silently never follow the refresh."""
    from datetime import UTC, datetime

    from airflow.sdk import Asset, Param

    return {
        "schedule": [Asset(RELEASES_ASSET)],
        "start_date": datetime(2026, 1, 1, tzinfo=UTC),
        "catchup": False,
        "max_active_runs": 1,
        "is_paused_upon_creation": False,
        "tags": ["dareforge"],
        "doc_md": doc,
        "params": {
            "release": Param(
                DEFAULT_RELEASE, type="string", description="NAME or NAME@VERSION when triggered by hand."
            ),
        },
    }


def source_batches(source_ids: list[str], stage: str, most: int | None = None) -> list[list[str]]:
    """The sources the mapped `stage` of the refresh runs on, one list per task instance: contiguous batches
    of near-equal size, `plan.SOURCES_PER_INSTANCE[stage]` sources each, and at most `most` (default
    `plan.MAX_MAPPED_INSTANCES`) batches."""
    from dareforge.plan import MAX_MAPPED_INSTANCES, SOURCES_PER_INSTANCE

    return batches_of(source_ids, SOURCES_PER_INSTANCE[stage], most or MAX_MAPPED_INSTANCES)


def batches_of(items: list[str], per_batch: int, most: int) -> list[list[str]]:
    """`items` in order, in at most `most` contiguous batches of about `per_batch` (sizes differ by one at
    most)."""
    count = min(most, -(-len(items) // per_batch))
    if not count:
        return []
    size, extra = divmod(len(items), count)
    batches, start = [], 0
    for n in range(count):
        end = start + size + (n < extra)
        batches.append(items[start:end])
        start = end
    return batches


def context() -> RunContext:
    """The run context of one Airflow task: `dareforge.yaml` (or $DAREFORGE_CONFIG) plus DAREFORGE_* env vars."""
    from dareforge.config_loader import load_config
    from dareforge.context import RunContext

    return RunContext.from_config(load_config(), show_progress=False)


def run_stage(name: str, ids: list[str] | None = None) -> StageReport:
    """Run the pipeline stage `name` on `ids` in this task's context, logging its summary lines.

    A stage that needs models opens them as `dareforge run` does: the configured endpoints, else the embedded
    local model (started on this worker for the task's duration when `make local-llm` installed it), else none
    (the report's lines say why)."""
    from rich.text import Text

    from dareforge.pipeline import Run, stage
    from dareforge.report import process_tree_cpu_seconds

    each, run = stage(name), Run(context())
    with ExitStack() as models:
        if each.needs_models:
            # Imported here only: the models' modules (openai, the graders, sklearn's metrics) cost a stage task's
            # fresh process about 4 CPU-seconds, ten times what understanding a small source takes.
            from dareforge.trajectories.models import run_models

            run.models = models.enter_context(run_models(run.ctx, run.ctx.work_dir))
        report = each.run(run, ids)
    for line in report.lines:
        if isinstance(line, str):  # tables are for terminals; the store has their rows
            log.info("%s", Text.from_markup(line).plain)
    for label, why in report.failures.items():
        log.warning("%s %s: %s", name, label, why)
    # The whole task process's cost (its start-up, the stage, its live reference workers): what the cluster's
    # figures weigh each mapped stage's start-up against (`dareforge.cluster.instance_cpu`).
    log.info("%s %.2f", INSTANCE_CPU, process_tree_cpu_seconds())
    return report


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, TransientError) or (
        isinstance(exc, OSError) and not isinstance(exc, _NOT_TRANSIENT_OS)
    )


@contextmanager
def retry_only_transient(what: str) -> Iterator[None]:
    """Let transient errors reach Airflow's retries; fail any other error at once (a retry cannot fix it)."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        yield
    except Exception as exc:
        if is_transient(exc):
            log.warning("%s: transient %s, left to Airflow's retries: %s", what, type(exc).__name__, exc)
            raise
        raise AirflowFailException(f"{what}: {type(exc).__name__}: {exc} (not transient; no retry)") from exc


def publish_release(name: str, version: str | None, outlet_events: Any) -> str:
    """Build release `name` and annotate the RELEASES_ASSET event; returns the release's store prefix.

    A release whose content equals the latest version is not published again: the task is skipped, so no
    asset event is emitted and the audit DAG does not run for nothing.
    """
    from airflow.sdk import Asset
    from airflow.sdk.exceptions import AirflowSkipException

    from dareforge.publish.release import build_release

    with retry_only_transient(f"publish {name}"):
        result = build_release(context(), name, version=version or None)
    if not result.created:
        raise AirflowSkipException(
            f"release {name}: nothing new to publish, {result.version} holds this content"
        )
    spec = f"{result.name}@{result.version}"
    log.info("published %s (previous %s); excluded: %s", spec, result.previous, result.excluded or "none")
    outlet_events[Asset(RELEASES_ASSET)].extra = {"release": spec}
    return result.release.prefix


def release_to_audit(triggering_asset_events: Mapping[Any, Any] | None, default: str) -> str:
    """NAME@VERSION from the newest RELEASES_ASSET event that triggered the run, else `default` (a param)."""
    from airflow.sdk import Asset

    events = list((triggering_asset_events or {}).get(Asset(RELEASES_ASSET), []))
    specs = [e.extra.get("release") for e in sorted(events, key=lambda e: e.timestamp) if e.extra]
    specs = [s for s in specs if s]
    return specs[-1] if specs else default


def ensure_pools(pools: Mapping[str, tuple[int, str]] = POOLS) -> list[str]:
    """Create the pools the DAGs use in Airflow's metadata database; returns the names it created."""
    from airflow.models.pool import Pool

    created = []
    for name, (slots, description) in pools.items():
        if Pool.get_pool(name) is None:
            Pool.create_or_update_pool(name, slots, description, include_deferred=False)
            created.append(name)
    return created


def main(argv: list[str]) -> int:
    if argv != ["pools"]:
        print("usage: python -m dareforge.orchestration pools", file=sys.stderr)
        return 2
    created = ensure_pools()
    print(f"pools created: {', '.join(created) or 'none (all exist)'}; known: {', '.join(POOLS)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
