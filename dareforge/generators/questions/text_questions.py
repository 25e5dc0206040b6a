"""Question programs over the columns no group or number question reads: free text, searched for a word it
contains (how many rows, and a numeric column's mean over them), and a row key, named as the row an extreme
belongs to (within one category, when the table has one)."""

from __future__ import annotations

import numpy as np

from dareforge.generators.questions.comparison_questions import TIE_TOLERANCE
from dareforge.generators.questions.question import (
    Checks,
    Program,
    Question,
    Table,
    col,
    equals,
    filter_checks,
    frequent_value,
    lit,
    pick,
    shown,
    words_of,
)

MEAN_DECIMALS = 3
MAX_WORDS = 20
"""A word is drawn among a column's most common ones: a rare word filters a handful of rows."""


class TextContains(Program):
    """How many rows' free text contains a word, or a numeric column's mean over those rows."""

    name = "text-contains"
    operations = ("filter", "aggregate")
    kind = "text"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.texts:
            return None
        column = pick(rng, table.texts)
        words = words_of(table.frame[column])
        if words.empty:
            return None
        word = str(pick(rng, list(words.index[:MAX_WORDS])))
        mask = f"{col(column)}.str.contains({word!r}, regex=False, na=False)"
        where = f'whose `{column}` contains the text "{word}" (case-sensitive, anywhere in the value)'
        numbers = [c for c in table.numeric if c != column]
        if numbers and rng.random() < 0.5:
            number = pick(rng, numbers)
            kept = f"{col(number)}[{mask}]"
            text = (
                f"What is the mean `{number}` over the rows {where}, ignoring missing values? Round to "
                f"{MEAN_DECIMALS} decimal places."
            )
            body = f"answer = {kept}.mean()\n{filter_checks(mask, column, kept)}"
            params = {"text": column, "word": word, "number": number}
            return Question(
                self.name, params, text, "numeric_approximate", body, (column, number), decimals=MEAN_DECIMALS
            )
        text = f"How many rows are there {where}?"
        body = f"answer = int({mask}.sum())\n{filter_checks(mask, column)}"
        return Question(self.name, {"text": column, "word": word}, text, "numeric_exact", body, (column,))


class KeyOfExtreme(Program):
    """Which row (by its key) holds the largest or smallest value of a numeric column, among the rows of one
    category where the table has categories."""

    name = "key-of-extreme"
    operations = ("filter", "rank")
    kind = "key"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        numbers = [c for c in table.numeric if c not in table.keys]
        if not table.keys or not numbers or not table.categorical:
            return None
        key, number, group = pick(rng, table.keys), pick(rng, numbers), pick(rng, table.categorical)
        value = frequent_value(table, group, rng)
        if value is None or group in (key, number):
            return None
        largest = bool(rng.random() < 0.5)
        text = (
            f"Among the rows whose `{group}` is {shown(value)}, which `{key}` has the "
            f"{'largest' if largest else 'smallest'} `{number}` (missing values ignored)?"
        )
        ranked = f"df[{equals(group, value)}].dropna(subset=[{number!r}]).sort_values({number!r}, ascending={not largest})"
        body = (
            f"ranked = {ranked}\n"
            f"answer = ranked[{key!r}].iloc[0]\n"
            f"checks = {{'rows': len(ranked), 'gap': abs(float(ranked[{number!r}].iloc[0] - ranked[{number!r}].iloc[1])) "
            f"if len(ranked) > 1 else 0.0, 'scale': abs(float(ranked[{number!r}].iloc[0]))}}\n"
            f"{filter_checks(equals(group, value), group, f'{col(number)}[{equals(group, value)}]')}"
        )
        params = {"key": key, "number": number, "group": group, "value": lit(value), "largest": largest}
        return Question(
            self.name, params, text, "string_exact", body, (key, number, group), answer_in_data=True
        )

    def problem(self, checks: Checks) -> str | None:
        if checks["gap"] <= TIE_TOLERANCE * max(1.0, checks["scale"]):
            return "a tie for the extreme: two rows share the value, so two keys answer it"
        return None
