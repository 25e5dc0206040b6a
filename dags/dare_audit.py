"""Audit a published release: re-run every check on its tasks and fail if any is now rejected or missing.

Runs whenever a release is published (the releases asset; the event names NAME@VERSION) and on demand with
`release` = NAME (latest version) or NAME@VERSION. The HTML report's store key is the task's return value.
"""

from __future__ import annotations

import logging

from airflow.sdk import dag, task

from dareforge.orchestration import on_each_release

log = logging.getLogger("dareforge.dags")  # DAG modules get mangled names when Airflow loads them


@dag(dag_id="dare_audit", **on_each_release(__doc__))
def dare_audit():
    @task
    def audit(params=None, triggering_asset_events=None) -> str | None:
        from dareforge.errors import DareforgeError
        from dareforge.orchestration import context, release_to_audit
        from dareforge.validators.audit import audit

        release = release_to_audit(triggering_asset_events, params["release"])
        report = audit(context(), release)
        log.info(
            "audit %s@%s: %d tasks, %d now rejected, %d missing, %d check scores moved; report %s",
            report.release,
            report.version,
            report.tasks,
            len(report.now_rejected),
            len(report.missing),
            len(report.moved),
            report.report_key,
        )
        if report.now_rejected or report.missing:
            raise DareforgeError(
                f"release {report.release}@{report.version} no longer passes: now rejected "
                f"{sorted(report.now_rejected)}, missing {report.missing}; see {report.report_key}"
            )
        return report.report_key

    audit()


dare_audit()
