"""Question programs that compare: categories by a statistic of a numeric column (the top one, the top k, one
against another) and two numeric columns by Pearson's correlation. Each judges its answered candidate: a tie, a
near-tie, a correlation near 0 or a p-value near the 5% level leaves the answer hanging on details."""

from __future__ import annotations

import math

import numpy as np

from dareforge.generators.questions.question import (
    MIN_GROUP_ROWS,
    Checks,
    Program,
    Question,
    Table,
    col,
    equals,
    groups_of,
    lit,
    pick,
    shown,
)

TIE_TOLERANCE = 1e-9
MIN_CORRELATION = 0.05
P_VALUE_BAND = (0.025, 0.1)
"""A test whose p-value falls here is too close to the 5% level: the verdict would hang on the test's details."""
MIN_RELATIVE_GAP = 0.01


class GroupExtreme(Program):
    """Which category has the highest (or lowest) mean or total of a numeric column."""

    name = "group-argmax"
    operations = ("group-aggregate", "rank")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        if number == group:
            return None
        highest = bool(rng.random() < 0.5)
        how = pick(rng, ["mean", "sum"])
        text = (
            f"Which value of `{group}` has the {'highest' if highest else 'lowest'} "
            f"{'mean' if how == 'mean' else 'total'} `{number}` (missing values ignored)?"
        )
        body = (
            f"stats = df.groupby({group!r})[{number!r}].{how}().sort_values(ascending={not highest})\n"
            "answer = stats.index[0]\n"
            "checks = {'groups': len(stats), 'gap': abs(float(stats.iloc[0] - stats.iloc[1])) "
            "if len(stats) > 1 else 0.0, 'scale': abs(float(stats.iloc[0]))}"
        )
        params = {"number": number, "group": group, "highest": highest, "stat": how}
        return Question(self.name, params, text, "string_exact", body, (number, group), answer_in_data=True)

    def problem(self, checks: Checks) -> str | None:
        if checks["groups"] < 2:
            return "fewer than two groups: nothing to compare"
        if checks["gap"] <= TIE_TOLERANCE * max(1.0, checks["scale"]):
            return "a tie for the top place: two groups share the extreme value"
        return None


class TopK(Program):
    """The k most frequent categories, or the k with the largest mean of a numeric column."""

    name = "top-k"
    operations = ("group-aggregate", "rank")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.categorical:
            return None
        group = pick(rng, table.categorical)
        k = int(rng.integers(2, 4))
        if table.numeric and rng.random() < 0.5:
            number = pick(rng, [c for c in table.numeric if c != group] or [""])
            if not number:
                return None
            text = (
                f"List the {k} values of `{group}` with the largest mean `{number}` (missing values ignored), "
                "largest first."
            )
            body = f"ranked = df.groupby({group!r})[{number!r}].mean().sort_values(ascending=False)\n"
            columns: tuple[str, ...] = (group, number)
            order = "largest mean first"
        else:
            text = f"List the {k} most frequent values of `{group}` (by number of rows), most frequent first."
            body = f"ranked = {col(group)}.value_counts()\n"
            columns = (group,)
            order = "most frequent first"
        body += (
            f"answer = list(ranked.index[:{k}])\n"
            f"checks = {{'groups': len(ranked), 'gap': float(ranked.iloc[{k - 1}] - ranked.iloc[{k}]) "
            f"if len(ranked) > {k} else 0.0}}"
        )
        params = {"group": group, "k": k, "by": columns[-1]}
        return Question(
            self.name, params, text, "list_exact", body, columns, order=order, answer_in_data=True
        )

    def problem(self, checks: Checks) -> str | None:
        if checks["gap"] <= TIE_TOLERANCE:
            return "a tie at the k-th place: the list is not unique"
        return None


class Correlation(Program):
    """Pearson's correlation of two numeric columns, or whether it is significant."""

    name = "correlation"
    operations = ("aggregate",)

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if len(table.numeric) < 2:
            return None
        first, second = (table.numeric[i] for i in rng.choice(len(table.numeric), 2, replace=False))
        pairs = "over the rows where both are present"
        test = bool(rng.random() < 0.4)
        body = (
            "from scipy import stats as _stats\n"
            f"both = df[[{first!r}, {second!r}]].dropna()\n"
            f"r, p = _stats.pearsonr(both[{first!r}], both[{second!r}])\n"
        )
        params = {"first": first, "second": second, "test": test}
        if test:
            text = (
                f"Is the Pearson correlation between `{first}` and `{second}` ({pairs}) significantly different "
                "from zero at the 5% level, by the two-sided test of scipy.stats.pearsonr?"
            )
            body += "answer = bool(p < 0.05)\nchecks = {'p_value': float(p), 'r': float(r), 'test': 1}"
            return Question(self.name, params, text, "boolean", body, (first, second))
        text = (
            f"What is the Pearson correlation coefficient between `{first}` and `{second}` ({pairs})? "
            "Round to 3 decimal places."
        )
        body += "answer = float(r)\nchecks = {'p_value': float(p), 'r': float(r), 'test': 0}"
        return Question(self.name, params, text, "numeric_approximate", body, (first, second), decimals=3)

    def problem(self, checks: Checks) -> str | None:
        r, p = checks["r"], checks["p_value"]
        if not math.isfinite(r):
            return "the correlation is undefined (a constant column)"
        if abs(r) > 1 - 1e-9:
            return "a perfect correlation: one column is a linear function of the other"
        if not checks["test"] and abs(r) < MIN_CORRELATION:
            return "a correlation near 0: its relative error would be meaningless"
        if checks["test"] and P_VALUE_BAND[0] <= p <= P_VALUE_BAND[1]:
            return f"the p-value ({p:.3f}) is too close to the 5% level"
        return None


class CompareGroups(Program):
    """Whether one category's mean exceeds another's."""

    name = "compare-groups"
    operations = ("group-aggregate", "compare")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        values = [v for v, n in groups_of(table, group).items() if n >= MIN_GROUP_ROWS]
        if number == group or len(values) < 2:
            return None
        first, second = (values[i] for i in rng.choice(len(values), 2, replace=False))
        text = (
            f"Is the mean `{number}` of the rows whose `{group}` is {shown(first)} higher than that of the rows "
            f"whose `{group}` is {shown(second)} (missing values ignored)?"
        )
        body = (
            f"a = {col(number)}[{equals(group, first)}].mean()\n"
            f"b = {col(number)}[{equals(group, second)}].mean()\n"
            "answer = bool(a > b)\n"
            "checks = {'gap': abs(float(a - b)), 'scale': max(abs(float(a)), abs(float(b)))}"
        )
        params = {"number": number, "group": group, "first": lit(first), "second": lit(second)}
        return Question(self.name, params, text, "boolean", body, (number, group))

    def problem(self, checks: Checks) -> str | None:
        if not checks["gap"] > MIN_RELATIVE_GAP * checks["scale"]:
            return "the two means are within 1% of each other: the verdict hangs on rounding"
        return None
