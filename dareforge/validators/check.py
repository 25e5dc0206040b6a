"""The one interface of a validation check, and the view of a task that checks read.

A check looks at one task and returns a Finding: a score (what a threshold in `validate:` applies to), a flag
for defects that need no threshold, and a reason a person can act on. Checks never decide acceptance; the
gate does, from stored findings, so changing a threshold needs no re-run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pandas as pd

from dareforge.config import Config
from dareforge.families.family import Family
from dareforge.families.registry import family_of
from dareforge.hashing import sha256_file
from dareforge.schema import PreparedSource, Task, Validation

T = TypeVar("T")


@dataclass(frozen=True)
class Finding:
    reason: str
    score: float | None = None
    flagged: bool = False
    details: dict[str, Any] | None = None

    def details_json(self) -> str | None:
        return json.dumps(self.details, sort_keys=True, default=str) if self.details is not None else None

    def record(self, task_id: str, source_id: str, check: str, checks_version: str) -> Validation:
        """The finding as the `validations` row the gate reads."""
        return Validation(
            task_id=task_id,
            source_id=source_id,
            check=check,
            score=self.score,
            flagged=self.flagged,
            reason=self.reason,
            details=self.details_json(),
            checks_version=checks_version,
        )


@dataclass
class TaskView:
    """A task with local copies of its files; frames are read on first use, with pandas' defaults."""

    task: Task
    prepared: PreparedSource
    folder: Path = field(repr=False)
    shared: dict[Hashable, Any] = field(default_factory=dict, repr=False, compare=False)
    """What checks derive from the task's files (`derived`), under keys that name the files by content: the
    views of one source's tasks share one (`validate.check`), so what a framing's variants would each derive
    from their byte-identical test rows and answers is derived once."""
    _digests: dict[tuple[str, str], str] = field(default_factory=dict, init=False, repr=False, compare=False)

    @cached_property
    def family(self) -> Family:
        return family_of(self.task)

    @property
    def is_question(self) -> bool:
        return self.family.asks_question

    def path(self, side: str, name: str) -> Path:
        return self.folder / side / name

    def has(self, side: str, name: str) -> bool:
        return self.path(side, name).exists()

    def frame(self, side: str, name: str) -> pd.DataFrame:
        return pd.read_csv(self.path(side, name))

    def digest(self, side: str, name: str) -> str:
        """The sha256 of a file's bytes: how a `derived` key names what it was derived from."""
        if (side, name) not in self._digests:
            self._digests[side, name] = sha256_file(self.path(side, name))
        return self._digests[side, name]

    def derived(self, key: Hashable, derive: Callable[[], T]) -> T:
        """`derive()`, worked out once for every view sharing `shared`: `key` must name everything it depends
        on (files by `digest`, never by task). What it returns is shared, so no caller changes it in place."""
        if key not in self.shared:
            self.shared[key] = derive()
        return self.shared[key]

    @cached_property
    def train(self) -> pd.DataFrame:
        return self.frame("public", "train.csv")

    @cached_property
    def test(self) -> pd.DataFrame:
        return self.frame("public", "test.csv")

    @cached_property
    def answers(self) -> pd.DataFrame:
        return self.frame("private", "answers.csv")


class Check(Protocol):
    name: str

    def run(self, view: TaskView, config: Config) -> Finding: ...


class RunCheck(Protocol):
    """A check that needs every task of the run at once (duplicates across sources)."""

    name: str

    def run_all(self, views: list[TaskView], config: Config) -> dict[str, Finding]: ...
