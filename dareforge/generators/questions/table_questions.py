"""QA tasks: a question about one table, the public training rows of a prepared framing (`data.csv`).

The table is the framing's `train.csv`, which every prediction task of the source already publishes; a
question never sees the held-out rows, so no task's private answers reach another task's public files.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator

import numpy as np
import pandas as pd

from dareforge.context import RunContext
from dareforge.generators.questions.build import Posed, subtasks_of
from dareforge.generators.questions.programs import PROGRAMS, is_multi_step
from dareforge.generators.questions.question import Question, Table
from dareforge.schema import PreparedSource

DATA = "data.csv"
ANSWER_NOTE = (
    'Write the answer to `answer.json` in the working directory as a JSON object with the single key "answer", '
    'e.g. {"answer": <your answer>}. Only `answer.json` is graded.'
)


def seeded(*parts: object) -> np.random.Generator:
    """A generator seeded by what a choice belongs to (non-negative integers as they are, anything else by the
    CRC32 of its text)."""
    return np.random.default_rng(
        [p if isinstance(p, int) and p >= 0 else zlib.crc32(str(p).encode()) for p in parts]
    )


def answer_lines(question: Question) -> list[str]:
    """The question, its format, and where the answer goes: the last lines of every question instruction."""
    return [f"Question: {question.text}", "", f"Answer format: {question.format_note}.", ANSWER_NOTE]


def qa_instruction(question: Question, rows: int, title: str | None) -> str:
    """The instruction; `title` None (an obscured variant) names no dataset."""
    named = f' ({rows} rows, from the dataset "{title}")' if title is not None else f" ({rows} rows)"
    return "\n".join([f"Answer a question about the table in `{DATA}`{named}.", "", *answer_lines(question)])


def program_order(rng: np.random.Generator, exclude: frozenset[str] = frozenset()) -> list[str]:
    """Every program once, in a seeded order that alternates pipelines (programs of several operations) with
    the shorter programs, a pipeline first: about half of a source's questions are asked as pipelines."""
    names = sorted(n for n in PROGRAMS if n not in exclude)
    shuffled = [names[i] for i in rng.permutation(len(names))]
    pipelines = [n for n in shuffled if is_multi_step(PROGRAMS[n])]
    shorter = [n for n in shuffled if not is_multi_step(PROGRAMS[n])]
    return [n for pair in itertools.zip_longest(pipelines, shorter) for n in pair if n is not None]


def qa_questions(ctx: RunContext, prepared: PreparedSource, table: Table) -> Iterator[Question]:
    """The candidate questions on a framing's table, in the order `qa_tasks` asks them: each attempt's choices
    are seeded by the source, the framing and the attempt's number, so a re-run (or the same source obscured,
    whose columns keep their order) draws the same questions."""
    cfg = ctx.config.generate
    order = program_order(seeded(cfg.seed, prepared.source_id, prepared.framing, "qa"))
    for attempt in range(cfg.qa_per_source * cfg.question_attempts):
        rng = seeded(cfg.seed, prepared.source_id, prepared.framing, "qa", attempt)
        question = PROGRAMS[order[attempt % len(order)]].draw(table, rng)
        if question is not None:
            yield question


def kind_questions(ctx: RunContext, prepared: PreparedSource, table: Table, kind: str) -> Iterator[Question]:
    """Candidate questions of the programs that ask about columns of `kind` (`Program.kind`), for a table whose
    first questions left that kind of column unasked; seeded like `qa_questions`' by the source, the framing,
    the kind and the attempt's number."""
    cfg = ctx.config.generate
    names = sorted(n for n, p in PROGRAMS.items() if p.kind == kind)
    for attempt in range(cfg.question_attempts * len(names)):
        rng = seeded(cfg.seed, prepared.source_id, prepared.framing, "qa", kind, attempt)
        question = PROGRAMS[names[attempt % len(names)]].draw(table, rng)
        if question is not None:
            yield question


def table_posed(question: Question, table: pd.DataFrame, title: str | None) -> Posed:
    """`question` posed on a framing's training rows (`table`, as pandas reads them), published as `data.csv`."""
    return Posed(
        question=question,
        load=f"df = pd.read_csv({DATA!r})",
        instruction=qa_instruction(question, len(table), title),
        spec={
            "kind": "qa",
            "program": question.program,
            "params": question.params,
            "answer_in_data": question.answer_in_data,
            "data": DATA,
        },
        subtasks=subtasks_of(question),
        operations=list(PROGRAMS[question.program].operations),
        visible_table=table,
    )
