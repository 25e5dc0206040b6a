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


def read_text(path) -> pd.DataFrame:
    """A table as the grader reads it (a path or an open file): every cell as text, so keys such as "007" stay
    as written."""
    return pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")


def constant_column(predictions: pd.DataFrame, targets: Sequence[str]) -> str | None:
    """`target = value` of the first target column that holds one value on every row, else None: reference
    predictions that one guess reproduces (an IF task that asks nothing, whatever its instruction states)."""
    for target in targets:
        values = predictions[target].unique()
        if len(values) == 1:
            return f"{target} = {values[0]}"
    return None


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


@dataclass(frozen=True)
class Needs:
    """What a family needs of a table before it poses a task on it. The filter keeps a source when some family's
    needs are met (the smallest `rows` is the source's floor); understand and generate skip a family on a table
    below its needs and record why, so a 40-row table still gets questions though no model is fit on it."""

    rows: int
    """Fewest rows (a series: fewest distinct timestamps, whatever its season)."""
    why: str
    """Why that many, in words a skip reason quotes."""
    seasons: int = 0
    """A series: whole seasons its training part must span before the held-out share (0: no season needed)."""

    def periods(self, season: int, test_share: float) -> int:
        """Distinct timestamps a series with `season` steps per season needs: `seasons` whole seasons left for
        training once `test_share` of its time is held out, and at least `rows` (a series with no known season
        has a season of 1 step)."""
        return max(self.rows, math.ceil(self.seasons * season / (1 - test_share) - 1e-9))

    def short_by(self, rows: int) -> str | None:
        """Why a table of `rows` rows is too small for the family, or None when it is large enough."""
        return None if rows >= self.rows else f"{rows} rows, fewer than the {self.rows} it needs ({self.why})"


QUESTIONS = Needs(
    20,
    "a question's count, share or group statistic is then computed over several rows, not read off one or two; "
    "a person asks questions of a 40-row table",
)
MODELS = Needs(
    100,
    "a model needs rows to learn from and a held-out share large enough to score it (20 test rows at "
    "prepare.test_share 0.2); the learnability check cross-validates 3 folds on them",
)
SERIES = Needs(
    20,
    "a forecast is scored on whole seasons: two seasons of its period to learn from (24 months, 14 days) before "
    "the held-out horizon, and 20 periods at least (4 held out) when it has no known season (a series shorter "
    "than that has none: `forecast.season_length`); an 87-row monthly series is a series",
    seasons=2,
)


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
    needs: Needs
    """What it needs of a table (rows; a series: periods in seasons); see `Needs`."""
    skips: str = ""
    """Why `applies` refuses a framing of its own kind, when it can (the generate report records it)."""
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
