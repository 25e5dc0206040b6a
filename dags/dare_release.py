"""Manual release: re-gate the validated tasks with the current thresholds, then publish release `name`.

The release holds the store's verified tasks (see `dareforge.publish.release`). Leave `version` empty for a
date-based one; a release whose content equals the latest version is not published again (the task is skipped).
A published release updates the releases asset, which starts the audit DAG.
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import Asset, Param, dag, task

from dareforge.orchestration import DEFAULT_RELEASE, NETWORK_RETRIES, RELEASES_ASSET


@dag(
    dag_id="dare_release",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["dareforge"],
    doc_md=__doc__,
    params={
        "name": Param(DEFAULT_RELEASE, type="string", description="Release name (letters, digits, . _ -)."),
        "version": Param(
            None, type=["null", "string"], description="Explicit version; empty for date-based."
        ),
    },
)
def dare_release():
    @task
    def gate() -> list[str]:
        from dareforge.orchestration import run_stage

        return run_stage("gate").written

    @task(outlets=[Asset(RELEASES_ASSET)], **NETWORK_RETRIES)
    def publish(params=None, outlet_events=None) -> str:
        from dareforge.orchestration import publish_release

        return publish_release(params["name"], params["version"], outlet_events)

    gate() >> publish()


dare_release()
