"""The store the workbench tests browse: one builtin source's prediction tasks, gated, plus one hostile task
whose source, column names, cells and instruction hold markup that must render as text."""

from __future__ import annotations

from pathlib import Path

from dareforge.context import RunContext
from dareforge.describe import describe_file
from dareforge.schema import FilterDecision, Source, Task, Validation
from dareforge.validators.gate import gate
from tests.stores import generate_tasks, prediction_only, store_config

SCRIPT = "<script>window.__pwned = 1</script>"
IMG = '"><img src=x onerror="window.__pwned = 2">'
HOSTILE_SOURCE = "mirror.hostile"
HOSTILE_TASK = "0hostile0task0id"


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
    ctx.store.write_records("all", findings)
    gate(ctx)
    return ctx


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
