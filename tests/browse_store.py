"""The store the workbench tests browse: one builtin source's prediction tasks, gated and released, plus one
hostile task whose source, column names, cells, instruction, ladder rungs, trajectories, probes and run log
hold markup that must render as text."""

from __future__ import annotations

import json
from pathlib import Path

from dareforge.context import RunContext
from dareforge.describe import describe_file
from dareforge.publish.release import build_release
from dareforge.run_record import RUNS, RunRecord
from dareforge.schema import FilterDecision, ProbeResult, Source, Step, Task, Trajectory, Validation
from dareforge.trajectories import GOLD_ENDPOINT
from dareforge.validators.gate import LADDER, gate
from tests.stores import generate_tasks, prediction_only, store_config

SCRIPT = "<script>window.__pwned = 1</script>"
IMG = '"><img src=x onerror="window.__pwned = 2">'
HOSTILE_SOURCE = "mirror.hostile"
HOSTILE_TASK = "0hostile0task0id"
RELEASE = "browse"
RUNGS = [  # the hostile task's ladder, weakest first; the first rung's name is markup
    {"name": SCRIPT, "score": 0.31, "low": 0.25, "high": 0.37},
    {"name": "linear", "score": 0.62, "low": 0.55, "high": 0.69},
    {"name": "boosted", "score": 0.81, "low": 0.77, "high": 0.86},
]
GOLD_OUTPUT = f"gold output {IMG}"
SAMPLED_ERROR = f"Traceback: {SCRIPT}"


def browse_context(root: Path) -> RunContext:
    return RunContext.from_config(prediction_only(store_config(root, ["sklearn-iris"])), show_progress=False)


def build_browse_store(root: Path) -> RunContext:
    ctx = generate_tasks(browse_context(root))
    tasks = sorted((t for t in ctx.store.read_records(Task) if t.variant_of is None), key=lambda t: t.id)
    findings = [
        Validation(
            task_id=t.id, source_id=t.source_id, check="leakage-copy", reason="no copy", checks_version="test"
        )
        for t in tasks
    ]
    _add_hostile_task(ctx, tasks[0], root)
    findings.append(
        Validation(
            task_id=HOSTILE_TASK,
            source_id=HOSTILE_SOURCE,
            check="leakage-copy",
            flagged=True,
            reason=f"column {SCRIPT} copies the label {IMG}",
            checks_version="test",
        )
    )
    findings.append(
        Validation(
            task_id=HOSTILE_TASK,
            source_id=HOSTILE_SOURCE,
            check=LADDER,
            score=1.0,
            reason="rungs in ladder order",
            details=json.dumps({"rungs": RUNGS}),
            checks_version="test",
        )
    )
    ctx.store.write_records("all", findings)
    _add_agent_runs(ctx, tasks[0].family)
    gate(ctx)
    build_release(ctx, RELEASE)
    record = RunRecord(started="20260301T000000Z", jobs=1, tasks=len(tasks) + 1, accepted=len(tasks))
    record.failures = {"prepare": {HOSTILE_SOURCE: f"failed on {SCRIPT}"}}
    ctx.store.write_json(
        f"{RUNS}/{record.started}.json", {k: v for k, v in vars(record).items() if k[0] != "_"}
    )
    return ctx


def _add_agent_runs(ctx: RunContext, family: str) -> None:
    """The hostile task's gold and sampled trajectories and a probe, whose outputs hold markup."""

    def trajectory(
        endpoint: str, model: str, steps: list[Step], outcome: str, score: float | None
    ) -> Trajectory:
        return Trajectory(
            id=f"{endpoint}0trajectory",
            task_id=HOSTILE_TASK,
            family=family,
            endpoint=endpoint,
            model=model,
            steps=steps,
            outcome=outcome,
            score=score,
            passed=score is not None and score > 0.5,
        )

    gold = trajectory(
        GOLD_ENDPOINT.name,
        GOLD_ENDPOINT.model,
        [
            Step(role="user", content="Predict the label."),
            Step(role="assistant", content="Reading the files.", code="print(open('train.csv').read())"),
            Step(role="execution", content=GOLD_OUTPUT, seconds=0.25),
        ],
        "graded",
        0.9,
    )
    sampled = trajectory(
        "local",
        f"model {SCRIPT}",
        [
            Step(role="user", content="Predict the label."),
            Step(role="assistant", content="", code="1/0"),
            Step(role="execution", content="", error=SAMPLED_ERROR),
        ],
        "code-error",
        None,
    )
    probe = ProbeResult(
        task_id=HOSTILE_TASK,
        source_id=HOSTILE_SOURCE,
        family=family,
        probe="no-data",
        endpoint="local",
        model=f"prober {IMG}",
        sample=0,
        trajectory_id="probe0trajectory",
        outcome="graded",
        score=0.12,
        probe_version="test",
    )
    ctx.store.write_records(HOSTILE_SOURCE, [gold, sampled])
    ctx.store.write_records(HOSTILE_SOURCE, [probe])


def _add_hostile_task(ctx: RunContext, model: Task, root: Path) -> None:
    """A task (and its source) as a hostile upstream would shape them: markup in every outside value."""
    folder = root / "hostile"
    folder.mkdir()
    train = folder / "train.csv"
    train.write_text(
        f'id,"{IMG}",{SCRIPT.replace(",", " ")}\n1,"{IMG.replace(chr(34), chr(34) * 2)}",{SCRIPT}\n'
    )
    public = [describe_file(train, "train.csv")]
    task = model.model_copy(
        update={
            "id": HOSTILE_TASK,
            "source_id": HOSTILE_SOURCE,
            "instruction": f"Predict {SCRIPT} from the column {IMG}.\nSecond line & more.",
            "difficulty": "hard",
            "public_files": public,
            "private_files": [],
        }
    )
    ctx.store.put_file(train, f"tasks/{HOSTILE_TASK}/public/train.csv")
    ctx.store.write_manifest(f"tasks/{HOSTILE_TASK}", {"task": task.model_dump(mode="json"), "files": []})
    ctx.store.write_records(HOSTILE_SOURCE, [task])
    ctx.store.write_records(
        HOSTILE_SOURCE,
        [
            Source(
                id=HOSTILE_SOURCE,
                origin="mirror",
                kind="dataset",
                ref="someone/hostile",
                title=f"Hostile {SCRIPT}",
                description=f"Cells hold {IMG}",
                version="v1",
            )
        ],
    )
    ctx.store.write_records(
        HOSTILE_SOURCE,
        [
            FilterDecision(
                source_id=HOSTILE_SOURCE,
                source_version="v1",
                rule="licence",
                kept=True,
                reason=f"ok {SCRIPT}",
                rules_fingerprint="f",
            )
        ],
    )
