"""What a task family is: one object declaring everything the pipeline asks about a family's tasks.

A family says how its tasks are built (`build`, from one `Build` context), which prepared framings it applies
to, how they are graded (`grading`: exact reproduction of a reference run, a goal metric against held-out
answers, or a certified answer) and so which files hold the output, the truth and the reference predictions,
the metrics its tasks may carry, the bar an attempt must reach, its trivial answers (which must not reach it), how its obscured variant is made, and its words
for cards, prompts and peers' tables. Code outside `dareforge.families` asks the family object, never its name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from dareforge.errors import DareforgeError
from dareforge.generators.questions.scripts import ANSWER_FILE
from dareforge.generators.taskio import read_frames
from dareforge.reference_solutions.reference_code import (
    PREDICTIONS,
    REFERENCE_PREDICTIONS,
    STRONG_PREDICTIONS,
)
from dareforge.schema import PreparedSource, Source, Task, TaskType

if TYPE_CHECKING:
    from dareforge.context import RunContext
    from dareforge.generators.taskio import Runners, TaskWriter

Frames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]

Submission = pd.DataFrame | dict[str, Any]
"""Predictions keyed like the answers, or an answer document `{"answer": value}`; what `grade` takes."""


class TaskFiles(Protocol):
    """What a family's trivial answers read of a task (a validator's `TaskView` is one)."""

    task: Task
    prepared: PreparedSource

    @property
    def train(self) -> pd.DataFrame: ...

    @property
    def test(self) -> pd.DataFrame: ...

    def path(self, side: str, name: str) -> Path: ...


class Grading(StrEnum):
    EXACT = "exact"
    """Every prediction must reproduce the reference run's (instruction following)."""
    GOAL = "goal"
    """A metric over the held-out answers, any method (modelling, forecasting); strong and baseline scored."""
    ANSWER = "answer"
    """One certified answer in `answer.json` (questions)."""


ANSWERS = "answers.csv"
ANSWER_PASS_BAR = 0.99
"""A question attempt passes at this score: exact answers need 1; an approximate number within about 1% of the
certified one (KramaBench's RAE score 1/(1+0.01)) passes too."""


BAR_STEP = 0.01
"""A task's own bar is a multiple of this (rounded down): a number an instruction states as it is graded."""


class NoVariantError(DareforgeError):
    """A family's builder found no obscured variant of a task (the reason says why)."""


def unmapped(original: dict, drawn: dict) -> bool:
    return original == drawn


@dataclass(frozen=True)
class Files:
    """The files grading reads: what an attempt writes, the private file it is graded against, and the private
    predictions of the reference run the validators compare with the answers (None: no predictions)."""

    output: str
    truth: str
    reference: str | None


FILES = {
    Grading.EXACT: Files(PREDICTIONS, REFERENCE_PREDICTIONS, REFERENCE_PREDICTIONS),
    Grading.GOAL: Files(PREDICTIONS, ANSWERS, STRONG_PREDICTIONS),
    Grading.ANSWER: Files(ANSWER_FILE, ANSWER_FILE, None),
}


@dataclass(frozen=True)
class Words:
    """How a family is named to people: cards, reports and peers' tables."""

    asks: str
    """What a task asks, e.g. "classification, instruction following"."""
    agent: str
    """What the agent does, e.g. "build exactly the stated scikit-learn workflow"."""
    hub_category: str
    """The Hugging Face task category of a card's front matter."""
    column: str = ""
    """The column DARE-bench's result tables call it (default: the family's name)."""


@dataclass(frozen=True)
class DareBenchSlot:
    """Where a family's task goes in a DARE-bench folder: the problem kind and its variant (1 or 2)."""

    kind: str
    variant: int


@dataclass(frozen=True)
class Build:
    """What a family's builder builds from: one prepared framing, the writer that stores its tasks, the
    reference workers, and (for families that mix sources) the other sources' framings. The frames and the
    source's title are read once and shared by the builds of one framing (one `read` for them all)."""

    ctx: RunContext
    prepared: PreparedSource
    writer: TaskWriter
    runners: Runners
    family: Family
    others: Sequence[PreparedSource] = ()
    maps: Callable[[dict, dict], bool] = unmapped
    """Whether parameters drawn on this framing are an original task's pushed through the framing's obscuring
    map (equality when the framing is not obscured)."""
    read: dict[str, object] = field(default_factory=dict, repr=False, compare=False)

    @property
    def frames(self) -> Frames:
        """train, test and answers of the framing, as pandas reads them with its defaults."""
        if "frames" not in self.read:
            self.read["frames"] = read_frames(self.ctx, self.prepared)
        return self.read["frames"]  # type: ignore[return-value]

    @property
    def title(self) -> str:
        """The source's title (its id when it has none), as question instructions name the dataset."""
        if "title" not in self.read:
            sources = self.ctx.store.read_partition(Source, self.prepared.source_id)
            self.read["title"] = sources[-1].title if sources else self.prepared.source_id
        return self.read["title"]  # type: ignore[return-value]


Builder = Callable[[Build], Sequence[Task | None]]
VariantBuilder = Callable[[Build, Task], Task | None]


@dataclass(frozen=True)
class Family:
    """One task family. See the module doc; `dareforge.families` registers them."""

    name: str
    kind: TaskType | None
    """The prediction problem its tasks pose (None: a question, no predictions)."""
    grading: Grading
    metrics: tuple[str, ...]
    """Metric names a task of the family may carry (the task-record suite rejects any other)."""
    words: Words
    build: Builder
    """The family's tasks on one framing (None where a draft failed; the writer recorded why)."""
    applies: Callable[[PreparedSource], bool]
    trivial: Callable[[TaskFiles], dict[str, Submission]]
    """Its trivial answers to a task, by name: submissions made without doing the task (see `trivial.py`); the
    gate rejects a task where the best one reaches the pass bar."""
    per_framing: bool = True
    """Built on every framing of a source; False: on its first framing only (another framing's table is the
    same data split another way)."""
    pass_bar: float = 1.0
    """The score an attempt must reach to pass (`*.pass_bars` in the config may override it)."""
    variant: VariantBuilder | None = None
    """Its obscured variant: the family built again on the obscured framing; None: it has none."""
    no_variant: str = ""
    """Why it has no obscured variant (when `variant` is None)."""
    certificate_runs: int = 1
    """Reference runs a task's certificate makes (its reference seconds are their sum)."""
    shows_clean_data: int = 0
    """How well a task's files show its source's clean data, lower first: the duplicate check compares sources
    through the task that shows most."""
    dare_bench: DareBenchSlot | None = None

    @property
    def files(self) -> Files:
        return FILES[self.grading]

    @property
    def asks_question(self) -> bool:
        return self.grading == Grading.ANSWER

    @property
    def exact(self) -> bool:
        return self.grading == Grading.EXACT

    @property
    def scored_against_baseline(self) -> bool:
        """Its tasks carry strong and baseline reference scores (goal metrics)."""
        return self.grading == Grading.GOAL

    @property
    def column(self) -> str:
        return self.words.column or self.name

    def own_bar(self, strong: float, strong_low: float) -> float | None:
        """The bar a goal task of this family carries when its strong reference scores `strong` (`strong_low`
        the lower bound of its bootstrap interval) below the family's bar, else None (the family's bar holds).

        The rule: the lower bound rounded down to `BAR_STEP`. The strong reference reaches it, and a solution
        as good as the strong reference still reaches it on the test rows drawn; the gate (`reachable`) then
        rejects the task unless the trivial answer and the weakest model of the solver ladder score clearly
        below it, so the bar still tells a solver from a guess."""
        if self.grading != Grading.GOAL or strong >= self.pass_bar:
            return None
        # The tiny addend keeps a bound that is a multiple of the step (0.62 read as 0.6199999...) at itself.
        return round(math.floor(min(strong_low, strong) / BAR_STEP + 1e-9) * BAR_STEP, 2)

    @property
    def reward(self) -> str:
        """What the RL reward adds to a well-formed output's format reward."""
        return "1.0 for an exact match" if self.exact else "the metric score"


def until_accepted(cap: int, drafts: Iterable[Callable[[], Task | None]]) -> list[Task]:
    """The tasks `drafts` build (each one task, or None when its draft failed) until `cap` of them are
    candidates; degenerate ones are kept as rejected tasks with their reason, and a task drawn twice counts once."""
    tasks: dict[str, Task] = {}
    accepted = 0
    for draft in drafts:
        if accepted >= cap:
            break
        task = draft()
        if task is not None and task.id not in tasks:
            tasks[task.id] = task
            accepted += task.status == "candidate"
    return list(tasks.values())


def predicts(kind: TaskType) -> Callable[[PreparedSource], bool]:
    """A prediction family's `applies`: framings with a learnable target of `kind`."""
    return lambda prepared: not prepared.questions_only and prepared.task_type == kind


def any_framing(prepared: PreparedSource) -> bool:
    """A question family's `applies`: every framing has a table to ask about."""
    return True
