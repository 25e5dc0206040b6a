"""Shortcut-solvability probe (the DSGym idea): can a model solve a task without its data?

Every probed model (`probe.endpoints`, else every `llm.endpoints` entry) attempts every task the gate accepted
(every candidate when no gate has run) `probe.samples` times with the data withheld: the agent gets the
instruction with a note saying so, and one file, `test_ids.csv`, the key columns of the rows to predict. A
model solves the task when any attempt passes `probe.pass_bars` (IF: every prediction matches). A task that
models solve this way measures recall or a trivial rule, not data science.

Stored: each trajectory (partition `probe-no-data--<endpoint>`), one `ProbeResult` per task, endpoint and sample
(`probes` partition `no-data--<endpoint>`), and per task a `shortcut` finding in `validations` (partition
`shortcut--<source>`, apart from the validate stage's own) whose score is the share of probed models that
solved it, counting every configured probe model with stored results. The probe writes findings only; the gate
(the next stage of `dareforge.pipeline`, or `dareforge gate`) then rejects a task whose share exceeds
`validate.max_shortcut_share`, so releases leave it out. Played attempts are reused.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dareforge.agents.attempts import (
    Attempt,
    AttemptSettings,
    episode_workers,
    make_client,
    run_attempts,
    store_task_files,
)
from dareforge.config import EndpointConfig
from dareforge.context import RunContext
from dareforge.describe import describe_file
from dareforge.errors import ConfigError
from dareforge.families.registry import family_of, pass_bars
from dareforge.generators.taskio import originals
from dareforge.llm.endpoints import endpoints_for
from dareforge.queries import partition_name
from dareforge.report import StageReport
from dareforge.schema import ProbeResult, Record, SourceFile, Task, Validation, Verdict
from dareforge.scratch import temp_root
from dareforge.store import Store

log = logging.getLogger(__name__)

PROBE_VERSION = "1"
CHECKS_VERSION = f"probe-{PROBE_VERSION}"
CHECK = "shortcut"
NO_DATA = "no-data"
TEST_IDS = "test_ids.csv"


# -- shared by the probes ----------------------------------------------------------------------------------------
def probe_endpoints(ctx: RunContext, names: Iterable[str] | None = None) -> list[EndpointConfig]:
    return endpoints_for(ctx, names, "probe")


@dataclass
class ProbeRun:
    """What a probe played: each endpoint's results (in attempt order), counts, and the store keys written."""

    results: dict[str, list[ProbeResult]] = field(default_factory=dict)
    ran: int = 0
    reused: int = 0
    written: list[str] = field(default_factory=list)


def run_probe(
    ctx: RunContext,
    run: ProbeRun,
    endpoints: Sequence[EndpointConfig],
    attempts: Sequence[Attempt],
    name: str,
    concurrency: int | None,
) -> None:
    """Play `attempts` with each endpoint under the `probe:` settings, into `run`. Trajectories go to partition
    `probe-<name>--<endpoint>`; one ProbeResult per attempt (its kind names the probe) to `<name>--<endpoint>`,
    in place of the stored results about the same tasks."""
    config = ctx.config.probe
    probed = {a.task.id for a in attempts}
    for endpoint in endpoints:
        client = make_client(ctx, endpoint, "probe")
        settings = AttemptSettings(
            partition_name(f"probe-{name}", endpoint.name),
            episode_workers(endpoint, concurrency),
            config.temperature,
            pass_bars(config.pass_bars),
            rerun_llm_errors=True,  # an endpoint failure says nothing about the task: ask again next run
            max_tokens=config.max_tokens,
            label=f"probe {name}",
        )
        played = run_attempts(ctx, client, attempts, settings)
        run.ran, run.reused = run.ran + played.ran, run.reused + played.reused
        results = [
            ProbeResult(
                task_id=attempt.task.id,
                source_id=attempt.task.source_id,
                family=attempt.task.family,
                probe=attempt.kind,
                endpoint=trajectory.endpoint,
                model=trajectory.model,
                sample=attempt.sample,
                trajectory_id=trajectory.id,
                outcome=trajectory.outcome,
                score=trajectory.score,
                passed=bool(trajectory.passed),
                probe_version=PROBE_VERSION,
            )
            for attempt, trajectory in zip(attempts, played.trajectories, strict=True)
        ]
        run.results[endpoint.name] = results
        partition = partition_name(name, endpoint.name)
        if replace_rows(ctx.store, partition, results, probed):
            run.written.append(ctx.store.table_key(ProbeResult.table, partition))


def replace_rows(store: Store, partition: str, rows: Sequence[Record], task_ids: set[str]) -> bool:
    """Write `rows` into `partition` in place of its stored rows about `task_ids`; other rows stay."""
    cls = type(rows[0])
    with store.partition_lock(cls, partition):
        kept = [r for r in store.read_partition(cls, partition) if r.task_id not in task_ids]
        merged = sorted([*kept, *rows], key=lambda r: r.model_dump_json())
        return store.write_records(partition, merged)


def score_of(result: ProbeResult) -> float:
    """A result's score with failures (no score, NaN) counted as 0."""
    score = result.score
    return score if score is not None and score == score else 0.0


# -- the no-data probe -------------------------------------------------------------------------------------------
def withheld_note(task: Task) -> str:
    if family_of(task).asks_question:
        return (
            "Note: the data of this task is withheld. The working directory holds no files; write `answer.json` "
            "as described above from what you know."
        )
    keys = ", ".join(f"`{c}`" for c in task.metric.key_columns)
    return (
        "Note: the data of this task is withheld. There is no `train.csv` and no `test.csv`; the working "
        f"directory holds only `{TEST_IDS}`, the key columns ({keys}) of the rows to predict. Write "
        "`predictions.csv` as described above, one row per row of that file, from what you know."
    )


def no_data_task(store: Store, task: Task) -> tuple[Task, bytes | None]:
    """The task as the probe shows it (instruction with the note, `test_ids.csv` as its only file) and that
    file's bytes (the key columns of the public test.csv, exactly as written there). A question task keeps no
    file at all (its question is all it asks)."""
    note = f"{task.instruction.rstrip()}\n\n{withheld_note(task)}"
    if family_of(task).asks_question:
        return task.model_copy(update={"instruction": note, "public_files": []}), None
    with store.open(f"tasks/{task.id}/public/test.csv") as fh:
        test = pd.read_csv(fh, dtype=str, keep_default_na=False)
    data = test[task.metric.key_columns].to_csv(index=False).encode()
    probe_task = task.model_copy(update={"instruction": note, "public_files": [_describe(data)]})
    return probe_task, data


def _describe(data: bytes) -> SourceFile:
    with tempfile.TemporaryDirectory(prefix="dareforge-probe-", dir=temp_root()) as tmp:
        path = Path(tmp) / TEST_IDS
        path.write_bytes(data)
        return describe_file(path, TEST_IDS)


def no_data_attempts(store: Store, tasks: Sequence[Task], samples: int) -> list[Attempt]:
    attempts = []
    for task in tasks:
        probe_task, data = no_data_task(store, task)
        answers_only = store_task_files(store, task.model_copy(update={"public_files": []}))

        def materialize(
            tmp: Path, data: bytes | None = data, answers_only=answers_only
        ) -> tuple[Path, Path | None]:
            public = tmp / NO_DATA
            public.mkdir()
            if data is not None:
                (public / TEST_IDS).write_bytes(data)
            return public, answers_only(tmp)[1]

        attempts += [Attempt(probe_task, sample, materialize, NO_DATA) for sample in range(samples)]
    return attempts


def shortcut_candidates(ctx: RunContext, task_ids: Iterable[str] | None = None) -> list[Task]:
    """Candidate tasks (not variants) the gate accepted, or rejected only for a shortcut (so a new probe model
    can still clear them); every candidate when no gate has run."""
    tasks = originals(ctx, task_ids)
    verdicts = {v.task_id: v for v in ctx.store.iter_records(Verdict)}
    if not verdicts:
        return tasks
    return [
        t
        for t in tasks
        if (v := verdicts.get(t.id)) is not None and all(r.startswith(f"{CHECK}:") for r in v.reasons)
    ]


def probe_shortcuts(
    ctx: RunContext,
    endpoints: Iterable[str] | None = None,
    task_ids: Iterable[str] | None = None,
    concurrency: int | None = None,
) -> StageReport:
    """Probe the tasks (see `shortcut_candidates`) with the endpoints; see the module doc and `_report`."""
    chosen = probe_endpoints(ctx, endpoints)
    played = ProbeRun()
    tasks = shortcut_candidates(ctx, task_ids)
    if not tasks:
        log.warning("probe: no tasks to probe (none accepted by the gate, or none generated)")
        return _report(ctx, chosen, played, [])
    run_probe(
        ctx,
        played,
        chosen,
        no_data_attempts(ctx.store, tasks, ctx.config.probe.samples),
        NO_DATA,
        concurrency,
    )
    # Every configured probe model counts, not only the ones played now: probing one new model later must
    # not erase what the others showed.
    counted = probe_endpoints(ctx, [*(e.name for e in chosen), *(e.name for e in _configured(ctx))])
    found = findings(ctx.store, tasks, counted)
    by_source: dict[str, list[Validation]] = defaultdict(list)
    for finding in found:
        by_source[finding.source_id].append(finding)
    for source_id, rows in sorted(by_source.items()):
        partition = f"{CHECK}--{source_id}"
        if replace_rows(ctx.store, partition, rows, {t.id for t in tasks}):
            played.written.append(ctx.store.table_key(Validation.table, partition))
    report = _report(ctx, chosen, played, found)
    log.info(
        "probe %s: %d tasks, %d played, %d reused, %d solvable without their data",
        NO_DATA,
        len(tasks),
        played.ran,
        played.reused,
        len(report.labels("flagged")),
    )
    return report


def _report(
    ctx: RunContext, chosen: Sequence[EndpointConfig], played: ProbeRun, found: Sequence[Validation]
) -> StageReport:
    """The probe's report. Outcomes: `probed` (task -> its finding's reason) and `flagged` (those more than
    `validate.max_shortcut_share` of the probed models solved without the data), both present once the probe
    ran, empty or not; reused: attempts found played; counts: `played`, the attempts played now."""
    max_share = ctx.config.validate_.max_shortcut_share
    report = StageReport(
        "probe", written=played.written, reused=played.reused, outcomes={"probed": {}, "flagged": {}}
    )
    report.counts["played"] = played.ran
    for finding in found:
        report.add("probed", finding.task_id, finding.reason)
        if finding.score is not None and finding.score > max_share:
            report.add("flagged", finding.task_id, finding.reason)
    report.lines = [
        f"probe: {len(found)} tasks probed without their data by {', '.join(e.name for e in chosen)}: "
        f"{len(report.labels('flagged'))} shortcut-solvable (share > validate.max_shortcut_share={max_share:g}); "
        f"{played.ran} attempts played, {played.reused} reused"
    ]
    return report


def _configured(ctx: RunContext) -> list[EndpointConfig]:
    try:
        return probe_endpoints(ctx)
    except ConfigError:
        return []


def findings(store: Store, tasks: Sequence[Task], endpoints: Sequence[EndpointConfig]) -> list[Validation]:
    """One `shortcut` finding per task from the stored results of `endpoints` (their current model only)."""
    results: dict[str, dict[str, list[ProbeResult]]] = defaultdict(lambda: defaultdict(list))
    for endpoint in endpoints:
        for r in store.read_partition(ProbeResult, partition_name(NO_DATA, endpoint.name)):
            # An attempt the endpoint failed (llm-error) is no evidence either way: it neither solves nor
            # fails the task, so a model with only failed attempts is left out of the share.
            if r.model == endpoint.model and r.probe_version == PROBE_VERSION and r.outcome != "llm-error":
                results[r.task_id][endpoint.name].append(r)
    out = []
    for task in tasks:
        per_model = results.get(task.id, {})
        if not per_model:
            continue
        solved = sorted(name for name, rows in per_model.items() if any(r.passed for r in rows))
        details = {
            name: {
                "model": rows[0].model,
                "solved": name in solved,
                "best_score": max(score_of(r) for r in rows),
                "outcomes": sorted(r.outcome for r in rows),
                "samples": len(rows),
            }
            for name, rows in sorted(per_model.items())
        }
        reason = f"{len(solved)} of {len(per_model)} models solved it without the data"
        out.append(
            Validation(
                task_id=task.id,
                source_id=task.source_id,
                check=CHECK,
                score=len(solved) / len(per_model),
                reason=f"{reason}: {', '.join(solved)}" if solved else reason,
                details=json.dumps(details, sort_keys=True),
                checks_version=CHECKS_VERSION,
            )
        )
    return out
