"""Question programs: seeded choices on a table, a precise question, and the pandas body that answers it.

Each program's `propose(table, rng)` draws one candidate `Question` (or None when the table has nothing for it):
the question's text states what to compute, the answer type and format (rounding, units, list order); its
`body` is Python that reads the table as `df` and sets `answer` (and adds to `checks`, which the script starts
empty, numbers the program's `problem` judges: the gap behind a top-1, the correlation itself; and those of
`question.filter_checks` / `extreme_checks`, which `shared_problem` judges). Column names and values enter the code as Python literals
(`repr`), never by string pasting, so any column name is safe.

The body is the reference solution: `scripts.py` wraps it into the script the reference worker runs, and the
generator runs the same text to screen the candidate. Nothing here reads files.

The programs, by kind: `filtered_questions`, `comparison_questions`, `audit_questions`, `year_questions`,
`text_questions` (free text and row keys), and the programs of several operations in `pipeline_questions`; what they share is in `question`.
"""

from __future__ import annotations

from dareforge.generators.questions.audit_questions import DuplicateAudit, MissingAudit
from dareforge.generators.questions.comparison_questions import CompareGroups, Correlation, GroupExtreme, TopK
from dareforge.generators.questions.filtered_questions import (
    CountWhere,
    DistinctUnder,
    ExtremeWhere,
    FilteredStat,
    Share,
)
from dareforge.generators.questions.pipeline_questions import (
    AboveGroupMean,
    FilterGroupRank,
    GroupGap,
    TopGroupsStat,
)
from dareforge.generators.questions.question import Program
from dareforge.generators.questions.text_questions import KeyOfExtreme, TextContains
from dareforge.generators.questions.year_questions import Growth, YearStat

QUESTIONS_VERSION = "7"
"""Part of every question task's spec, hence of its id: bump it when a program, its rendering or a degeneracy
rule changes, so stored questions are asked and judged again (prediction tasks keep their ids)."""

PROGRAMS: dict[str, Program] = {
    p.name: p
    for p in (
        CountWhere(),
        FilteredStat(),
        GroupExtreme(),
        TopK(),
        Share(),
        MissingAudit(),
        DuplicateAudit(),
        Correlation(),
        CompareGroups(),
        DistinctUnder(),
        ExtremeWhere(),
        YearStat(),
        Growth(),
        FilterGroupRank(),
        GroupGap(),
        AboveGroupMean(),
        TopGroupsStat(),
        TextContains(),
        KeyOfExtreme(),
    )
}

MULTI_STEP = 3
"""Operations from which a program is a pipeline (a hard question, unless a shortcut answers it)."""


def is_multi_step(program: Program) -> bool:
    return len(program.operations) >= MULTI_STEP
