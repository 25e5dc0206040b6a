"""Which sources a per-source stage finished under the same inputs, so `dareforge run` starts no worker pool for
them.

Why: a re-run with nothing changed spent about 60% of the first run's CPU, nearly all of it starting the worker
pools of understand, prepare, generate and check (each worker imports the whole stack) only for every worker to
find its sources finished. After a stage finishes a source without a failure it records the source's key here:
a digest of the stage's name, the code, the configuration and the source's partitions of the tables the stage
reads. Not those it writes: later stages write some of them too (check's `validations` are validate's and the
probe's as well), and the stage's own checks in the parent find an output that went missing. A source whose recorded key matches runs in the parent process instead of a worker.

The key only decides *where* a source runs, never *whether*: the stage function still runs on it and makes its
own checks (versions, manifests), so a key that missed a change costs parallelism, not correctness.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from dareforge.hashing import fingerprint, sha256_bytes

if TYPE_CHECKING:
    from dareforge.context import RunContext
    from dareforge.report import StageReport

LEDGER = "ledger"


@dataclass(frozen=True)
class StageInputs:
    """What a stage's key covers besides the code and the configuration: its name and the tables it reads
    (`Stage.reads`; folders, ending in `/`, are left to the stage's own checks)."""

    name: str
    tables: tuple[str, ...]


@cache
def _code() -> str:
    """The package's code: a new version of any module may decide differently for the same inputs."""
    package = Path(__file__).parent
    return sha256_bytes(b"".join(p.read_bytes() for p in sorted(package.rglob("*.py"))))


def source_key(ctx: RunContext, stage: StageInputs, source_id: str) -> str:
    tables = sorted({t for t in stage.tables if not t.endswith("/")})
    partitions = {}
    for table in tables:
        key = ctx.store.table_key(table, source_id)
        partitions[table] = ctx.store.records_digest(key) if ctx.store.exists(key) else None
    return fingerprint(stage.name, _code(), ctx.config.model_dump(mode="json"), partitions)


def _entry(stage: StageInputs, source_id: str) -> str:
    return f"{LEDGER}/{stage.name}/{source_id}.json"


def settled(ctx: RunContext, stage: StageInputs, source_ids: list[str]) -> set[str]:
    """The sources of `source_ids` the stage finished before under the same key."""
    found = set()
    for source_id in source_ids:
        entry = _entry(stage, source_id)
        if ctx.store.exists(entry) and ctx.store.read_json(entry) == source_key(ctx, stage, source_id):
            found.add(source_id)
    return found


def record(ctx: RunContext, stage: StageInputs, report: StageReport, source_ids: list[str]) -> None:
    """Record the key of each of `source_ids` the stage finished without a failure (after its writes)."""
    for source_id in source_ids:
        failed = any(label == source_id or label.startswith(f"{source_id}/") for label in report.failures)
        if failed:
            ctx.store.remove_prefix(_entry(stage, source_id))
        else:
            ctx.store.write_json(_entry(stage, source_id), source_key(ctx, stage, source_id))
