"""Training data from a release: gold trajectories -> sampled trajectories -> judge -> SFT and RL exports.

Runs when a release is published (the releases asset names NAME@VERSION) and on demand. Gold trajectories
need no model; sampling runs when `llm.endpoints` exist (workers do not start the embedded local model: that
is `dareforge run`'s) and judging when `judge.endpoint` is set: otherwise those tasks are skipped and the SFT
export holds the gold trajectories. Endpoint failures are played again on the next run.
Each task is idempotent: trajectories and judgements already stored are not played again, and an export whose
content is unchanged writes no new version.
"""

from __future__ import annotations

import logging

from airflow.sdk import Asset, dag, task

from dareforge.orchestration import CORPORA_ASSET, on_each_release

log = logging.getLogger("dareforge.dags")  # DAG modules get mangled names when Airflow loads them


@dag(dag_id="dare_sft", **on_each_release(__doc__))
def dare_sft():
    @task(pool="sandbox")
    def gold(params=None, triggering_asset_events=None) -> str:
        from dareforge.orchestration import context, release_to_audit
        from dareforge.trajectories.gold import gold_trajectories
        from dareforge.validators.audit import parse_release

        release = release_to_audit(triggering_asset_events, params["release"])
        name, version = parse_release(release)
        ctx = context()
        report = gold_trajectories(ctx, name, split=ctx.config.synthesize.split, version=version)
        log.info("gold %s: %s", release, report.summary())
        return release

    @task(pool="llm")
    def sample(release: str) -> str:
        from airflow.sdk.exceptions import AirflowSkipException

        from dareforge.orchestration import context, retry_only_transient
        from dareforge.trajectories.synthesize import synthesize
        from dareforge.validators.audit import parse_release

        ctx = context()
        if not ctx.config.llm.endpoints:
            raise AirflowSkipException("no llm.endpoints configured: the corpus holds gold trajectories only")
        name, version = parse_release(release)
        with retry_only_transient(f"synthesize {release}"):
            report = synthesize(ctx, name, version=version, rerun_llm_errors=True)
        log.info("synthesize %s: %s", release, report.summary())
        return release

    @task(pool="llm", trigger_rule="none_failed")
    def judge(release: str) -> str:
        from airflow.sdk.exceptions import AirflowSkipException

        from dareforge.judge import judge_trajectories
        from dareforge.orchestration import context, retry_only_transient

        ctx = context()
        if not ctx.config.judge.endpoint:
            raise AirflowSkipException(
                "no judge.endpoint configured: selection uses execution verification only"
            )
        with retry_only_transient(f"judge {release}"):
            report = judge_trajectories(ctx)
        log.info("judge: %s", report.summary())
        return release

    @task(outlets=[Asset(CORPORA_ASSET)], trigger_rule="none_failed")
    def export(release: str) -> list[str]:
        from dareforge.orchestration import context
        from dareforge.trajectories.corpus import build_corpus
        from dareforge.validators.audit import parse_release

        name, version = parse_release(release)
        result = build_corpus(context(), name, version)
        for note in result.notes:
            log.warning("corpus %s: %s", release, note)
        built = list(result.exports.values())
        for r in built:
            log.info("%s@%s (%s)", r.name, r.version, "new version" if r.created else "unchanged")
        return [r.export.prefix for r in built]

    release = gold()
    sampled = sample(release)
    judged = judge(release)
    sampled >> judged >> export(release)


dare_sft()
