"""Weekly refresh: crawl -> filter -> understand, prepare, generate, check (each per batch of sources) -> validate ->
probe -> gate -> publish. Understand and prepare take many sources to a mapped instance, generate and check fewer
(`dareforge.plan.SOURCES_PER_INSTANCE`): a task instance's start-up stays a small share of its work.

The shortcut probe runs with the models `dareforge run` uses: the LLM endpoints configured, else the embedded local
model when `make local-llm` installed it (started on the worker for the probe task only); models attempt each
accepted task without its data, and tasks most of them still solve are rejected by the gate before publishing.
Without any model the probe is skipped, and its log says how to get one.

Every task runs one stage of `dareforge.pipeline.STAGES` (the task named by the stage's `dag_task`; a test
checks that this DAG and the list agree) on the store named by `dareforge.yaml` / DAREFORGE_* env vars and returns
store keys or ids, never data. Stages skip work whose outputs exist, so a re-run (or a retry) is cheap, and a
refresh that finds nothing new publishes nothing (the publish task is skipped and no release event is sent).
"""

from __future__ import annotations

import logging

from airflow.sdk import Asset, CronTriggerTimetable, Param, chain, dag, task

from dareforge.orchestration import (
    DEFAULT_RELEASE,
    NETWORK_RETRIES,
    RELEASES_ASSET,
    STAGE_RETRIES,
    TASKS_ASSET,
)

log = logging.getLogger("dareforge.dags")  # DAG modules get mangled names when Airflow loads them

# Mapped instances named by their source in the UI (by the first one and how many more, for a batch).
BY_SOURCE = (
    "{{ task.op_kwargs['source_ids'][0] }}"
    "{% if task.op_kwargs['source_ids'] | length > 1 %} +{{ task.op_kwargs['source_ids'] | length - 1 }}{% endif %}"
)


@dag(
    dag_id="dare_refresh",
    # Sundays 00:00 UTC. No start_date: unpausing then waits for the next Sunday instead of running the last
    # one at once (a start_date in the past made Airflow schedule that interval the moment the DAG was unpaused,
    # and a manual trigger then queued behind it).
    schedule=CronTriggerTimetable("0 0 * * 0", timezone="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["dareforge"],
    doc_md=__doc__,
    params={
        "release": Param(DEFAULT_RELEASE, type="string", description="Release name the last task publishes."),
    },
)
def dare_refresh():
    @task(pool="kaggle_api", **NETWORK_RETRIES)
    def crawl() -> list[str]:
        from dareforge.errors import TransientError
        from dareforge.orchestration import retry_only_transient, run_stage

        with retry_only_transient("crawl"):
            report = run_stage("crawl")
            if listing_failed := report.outcomes.get("listing failed"):
                # The report keeps only messages; Kaggle's client already retried its own transient errors.
                raise TransientError(f"listing failed: {listing_failed}")
        return report.written

    @task
    def filter_sources() -> list[str]:
        from dareforge.orchestration import run_stage

        return run_stage("filter").written

    @task
    def accepted_sources() -> list[list[str]]:
        """The accepted sources in batches for understand and prepare, one per mapped instance."""
        from dareforge.orchestration import context, source_batches
        from dareforge.queries import accepted_source_ids

        return source_batches(accepted_source_ids(context()), "understand")

    @task
    def generate_batches(prepared: list[list[str] | None]) -> list[list[str]]:
        """The prepared sources of every prepare instance, in the smaller batches of generate and check."""
        from dareforge.orchestration import source_batches

        return source_batches([s for batch in prepared if batch for s in batch], "generate")

    @task(map_index_template=BY_SOURCE, **STAGE_RETRIES)
    def understand(source_ids: list[str]) -> list[str] | None:
        """The sources of the batch with a chosen framing; None when none holds a task (why: `framings`)."""
        from dareforge.orchestration import run_stage

        report = run_stage("understand", source_ids)
        framed = report.labels("framed")
        for source_id in source_ids:
            if source_id not in framed:
                log.warning("understand %s: no task: %s", source_id, report.failures.get(source_id))
        return [s for s in source_ids if s in framed] or None

    @task(map_index_template=BY_SOURCE, **STAGE_RETRIES)
    def prepare(source_ids: list[str]) -> list[str] | None:
        """The sources of the batch once prepared; a source that failed (reason in the log) is left out, and a
        batch with none prepared maps no generate instance (None)."""
        from dareforge.orchestration import run_stage

        report = run_stage("prepare", source_ids)
        # labelled "<source>/<framing>"
        done = {label.split("/")[0] for label in [*report.labels("prepared"), *report.labels("unchanged")]}
        return [s for s in source_ids if s in done] or None

    @task(map_index_template=BY_SOURCE, **STAGE_RETRIES)
    def generate(source_ids: list[str]) -> list[str]:
        """Store keys of the task records written for the batch's prepared sources."""
        from dareforge.orchestration import run_stage

        return run_stage("generate", source_ids).written

    @task(map_index_template=BY_SOURCE, **STAGE_RETRIES)
    def check(source_ids: list[str]) -> list[str]:
        """Store keys of the findings written for the batch's tasks (the per-task checks and the ladder)."""
        from dareforge.orchestration import run_stage

        return run_stage("check", source_ids).written

    @task(outlets=[Asset(TASKS_ASSET)], **STAGE_RETRIES)
    def validate() -> list[str]:
        from dareforge.orchestration import run_stage

        return run_stage("validate").written

    @task(pool="llm")
    def probe() -> int:
        """Tasks most probe models solved without their data (the gate task then rejects them)."""
        from airflow.sdk.exceptions import AirflowSkipException
        from rich.text import Text

        from dareforge.orchestration import retry_only_transient, run_stage

        with retry_only_transient("probe"):
            report = run_stage("probe")
        if "probed" not in report.outcomes:  # no model: the first line says why and how to get one
            raise AirflowSkipException(Text.from_markup(report.lines[0]).plain)
        return len(report.labels("flagged"))

    @task(trigger_rule="none_failed")
    def gate() -> int:
        """Re-decide every task with the probe's findings (only the gate writes verdicts)."""
        from dareforge.orchestration import run_stage

        return len(run_stage("gate").labels("rejected"))

    @task(outlets=[Asset(RELEASES_ASSET)], trigger_rule="none_failed", **NETWORK_RETRIES)
    def publish(params=None, outlet_events=None) -> str:
        from dareforge.orchestration import publish_release

        return publish_release(params["release"], None, outlet_events)

    sources = accepted_sources()
    framed = understand.expand(source_ids=sources)
    batches = generate_batches(prepare.expand(source_ids=framed))
    # The batches that generated go on to check, whether or not they wrote anything new.
    checked = check.expand(source_ids=batches)
    generated = generate.expand(source_ids=batches)
    chain(crawl(), filter_sources(), sources)
    chain(generated, checked, validate(), probe(), gate(), publish())


dare_refresh()
