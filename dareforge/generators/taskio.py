"""Shared machinery of the task builders: reference workers, drafts, and the writer that stores tasks."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dareforge.context import RunContext
from dareforge.describe import describe_file
from dareforge.errors import DareforgeError
from dareforge.generators.prepare import prepared_file
from dareforge.hashing import fingerprint
from dareforge.reference_solutions.reference_runner import (
    READY_TIMEOUT_S,
    ReferenceRunner,
    package_versions,
)
from dareforge.report import StageReport
from dareforge.schema import PreparedSource, Task, TaskLimits

log = logging.getLogger(__name__)
GENERATOR_VERSION = "8"
"""Bump when a task's files change for the same prepared source (every task is generated again). 3: the strong
reference reads dates in UTC, categories as text, and fits a classifier without classes seen once. 4: IF specs
state only requirements that can change the predictions (no scaler for trees, no seed for LogisticRegression,
no n_jobs, no imputer without a missing value) and carry their mutation test (`private/sensitivity.json`). 5: IF
categorical features are read as text (a boolean column with blanks mixed bools with the imputer's 'missing');
a boolean target's instruction says how it is spelled; an instruction names a split that is not random (the time
column, or the groups kept apart). 6: a goal task whose strong reference scores below its family's bar carries
its own bar (`Task.pass_bar`), and every goal instruction states the bar it is graded at. 7: a forecast's strong
reference also chooses Holt-Winters smoothing per series when it forecasts the latest training rows best (the
script names the entity), and every strong script feeds its candidates the time and series columns. 8: an IF
reference is certified by two runs, the twin in another process with two threads (its recorded
`reference_seconds` sums two runs, not three); Holt-Winters smoothing starts its optimizer without statsmodels'
brute-force grid (on 78 series tasks of a catalog sample: mean forecast skill 0.151 against 0.150, 39% less CPU)."""


@dataclass
class Runners:
    """Two single-threaded workers: the reference run and its twin in another process (an IF twin runs with a
    raised thread limit, so one run tests both the process and the thread count)."""

    main: ReferenceRunner
    twin: ReferenceRunner

    @classmethod
    def start(cls, timeout_s: float, ready_timeout_s: float = READY_TIMEOUT_S) -> Runners:
        runners = cls(*(ReferenceRunner(1, timeout_s, ready_timeout_s) for _ in range(2)))
        runners.main.start()
        runners.twin.start()
        return runners

    def close(self) -> None:
        self.main.close()
        self.twin.close()


def limits_of(ctx: RunContext) -> TaskLimits:
    return TaskLimits(
        turns=ctx.config.generate.limits_turns, seconds_per_execution=ctx.config.generate.limits_seconds
    )


@dataclass
class Draft:
    """A task being built in a local folder: `public/` and `private/` are filled by the family's builder."""

    family: str
    seed: int
    key: str
    folder: Path
    fields: dict = field(default_factory=dict)

    @property
    def public(self) -> Path:
        return self.folder / "public"

    @property
    def private(self) -> Path:
        return self.folder / "private"


class TaskWriter:
    """Gives each draft its id and folder, skips finished tasks, and stores finished drafts atomically; counts
    what it reused, failed and wrote (with the references' CPU seconds) into its stage's report."""

    def __init__(self, ctx: RunContext, prepared: PreparedSource, report: StageReport):
        self.ctx, self.prepared, self.report = ctx, prepared, report

    def task_id(self, family: str, seed: int, spec_key: str) -> str:
        """What a task's id hashes; a writer of derived tasks (obscured variants) hashes what defines those."""
        return fingerprint(GENERATOR_VERSION, self.prepared.version, family, seed, spec_key)

    def build(self, family: str, seed: int, spec_key: str, fill: Callable[[Draft], None]) -> Task | None:
        task_id = self.task_id(family, seed, spec_key)
        manifest = self.ctx.store.read_manifest(f"tasks/{task_id}")
        if manifest is not None:
            self.report.reused += 1
            return Task.model_validate(manifest["task"])
        # This process's own folder: another process building the same task id drafts in its own.
        folder = self.ctx.scratch_dir(f"task-{task_id}")
        try:
            draft = Draft(family=family, seed=seed, key=task_id, folder=folder)
            draft.public.mkdir()
            draft.private.mkdir()
            try:
                fill(draft)
            except (DareforgeError, ValueError, KeyError) as exc:
                self.report.failures[f"{self.prepared.source_id}/{family}/{seed}"] = str(exc)
                log.warning("%s: %s (seed %d) not generated: %s", self.prepared.source_id, family, seed, exc)
                return None
            return self._store(draft)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _store(self, draft: Draft) -> Task:
        store, prefix = self.ctx.store, f"tasks/{draft.key}"
        listing = {}
        for side in ("public", "private"):
            root = draft.folder / side
            listing[side] = [
                describe_file(p, p.relative_to(root).as_posix())
                for p in sorted(root.rglob("*"))
                if p.is_file()
            ]
            for f in listing[side]:
                store.put_file(root / f.name, f"{prefix}/{side}/{f.name}")
        task = Task(
            id=draft.key,
            family=draft.family,
            source_id=self.prepared.source_id,
            source_version=self.prepared.source_version,
            framing=self.prepared.framing,
            prepared_version=self.prepared.version,
            generator_version=GENERATOR_VERSION,
            seed=draft.seed,
            public_files=listing["public"],
            private_files=listing["private"],
            package_versions=package_versions(),
            **draft.fields,
        )
        store.write_manifest(prefix, {"task": task.model_dump(mode="json")})
        self.report.written.append(prefix)
        spent = self.report.seconds_in.get("references", 0.0)
        self.report.seconds_in["references"] = spent + (task.scores.reference_seconds or 0.0)
        return task


def read_frames(ctx: RunContext, prepared: PreparedSource) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """train, test and answers of a prepared source, as pandas reads them with its defaults."""
    frames = [
        pd.read_csv(prepared_file(ctx, prepared, name)) for name in ("train.csv", "test.csv", "answers.csv")
    ]
    return frames[0], frames[1], frames[2]


def originals(ctx: RunContext, task_ids: Iterable[str] | None = None) -> list[Task]:
    """Candidate tasks that are not variants (only `task_ids` when given), sorted by id."""
    wanted = None if task_ids is None else set(task_ids)
    tasks = {
        t.id: t
        for t in ctx.store.iter_records(Task)
        if t.status == "candidate" and t.variant_of is None and (wanted is None or t.id in wanted)
    }
    return sorted(tasks.values(), key=lambda t: t.id)
