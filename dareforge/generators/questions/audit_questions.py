"""Question programs that audit the data: the values a column misses, the columns that miss any, the rows that
repeat an earlier one."""

from __future__ import annotations

import numpy as np

from dareforge.generators.questions.question import Program, Question, Table, col, pick


class MissingAudit(Program):
    """How many values a column misses, or which columns miss any."""

    name = "missing-audit"
    operations = ("aggregate",)

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        frame = table.frame
        missing = [c for c in frame.columns if frame[c].isna().any() and c != table.id_column]
        if not missing:
            return None
        if rng.random() < 0.5:
            column = pick(rng, missing)
            text = f"How many values are missing (empty cells) in the column `{column}`?"
            body = f"answer = int({col(column)}.isna().sum())"
            return Question(self.name, {"column": column}, text, "numeric_exact", body, (column,))
        text = "Which columns have at least one missing (empty) value? List them in the order of the file."
        body = "answer = [c for c in df.columns if df[c].isna().any()]"
        return Question(
            self.name,
            {"columns": "any"},
            text,
            "list_exact",
            body,
            tuple(frame.columns),
            order="in the order of the file's columns",
            answer_in_data=True,
        )


class DuplicateAudit(Program):
    """How many rows repeat an earlier row in every column but the id."""

    name = "duplicate-audit"
    operations = ("aggregate",)

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        drop = [table.id_column] if table.id_column else []
        columns = [c for c in table.frame.columns if c not in drop]
        if len(columns) < 2:
            return None
        besides = f" except `{table.id_column}`" if table.id_column else ""
        text = (
            f"How many rows are exact duplicates of an earlier row in every column{besides}? Count each "
            "repetition, not the first occurrence."
        )
        body = f"answer = int(df.drop(columns={drop!r}).duplicated().sum())"
        return Question(self.name, {"ignore": drop}, text, "numeric_exact", body, tuple(columns))
