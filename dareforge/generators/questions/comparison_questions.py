"""Question programs that compare: categories by a statistic of a numeric column (the top one, the top k, one
against another) and two numeric columns by Pearson's correlation. Each judges its answered candidate: a tie, a
near-tie or a correlation near 0 leaves the answer hanging on details. None asks a yes/no question: true and
false are guesses that pass half of them."""

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
    extreme_checks,
    groups_of,
    lit,
    pick,
    shown,
)

TIE_TOLERANCE = 1e-9
MIN_CORRELATION = 0.05
MIN_RELATIVE_GAP = 0.01
DECIMALS = 3


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
            "if len(stats) > 1 else 0.0, 'scale': abs(float(stats.iloc[0]))}\n"
            + extreme_checks(f"df.groupby({group!r})[{number!r}].count()", "[answer]")
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
            extreme = extreme_checks(f"df.groupby({group!r})[{number!r}].count()", "answer")
        else:
            text = f"List the {k} most frequent values of `{group}` (by number of rows), most frequent first."
            body = f"ranked = {col(group)}.value_counts()\n"
            columns = (group,)
            order = "most frequent first"
            extreme = ""  # a count names no group by a few values: every row counts
        body += (
            f"answer = list(ranked.index[:{k}])\n"
            f"checks = {{'groups': len(ranked), 'gap': float(ranked.iloc[{k - 1}] - ranked.iloc[{k}]) "
            f"if len(ranked) > {k} else 0.0}}\n{extreme}"
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
    """Pearson's correlation of two numeric columns.

    Never whether it is significant: a true/false answer is one of the two guesses every question gets (half of
    them pass), and the test's p-value is no answer either (near 0 for any real correlation, where a relative
    error means nothing)."""

    name = "correlation"
    operations = ("aggregate",)

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if len(table.numeric) < 2:
            return None
        first, second = (table.numeric[i] for i in rng.choice(len(table.numeric), 2, replace=False))
        text = (
            f"What is the Pearson correlation coefficient between `{first}` and `{second}` (over the rows where "
            "both are present)? Round to 3 decimal places."
        )
        body = (
            "from scipy import stats as _stats\n"
            f"both = df[[{first!r}, {second!r}]].dropna()\n"
            f"r = _stats.pearsonr(both[{first!r}], both[{second!r}])[0]\n"
            "answer = float(r)\nchecks = {'r': float(r)}"
        )
        params = {"first": first, "second": second}
        return Question(self.name, params, text, "numeric_approximate", body, (first, second), decimals=3)

    def problem(self, checks: Checks) -> str | None:
        r = checks["r"]
        if not math.isfinite(r):
            return "the correlation is undefined (a constant column)"
        if abs(r) > 1 - 1e-9:
            return "a perfect correlation: one column is a linear function of the other"
        if abs(r) < MIN_CORRELATION:
            return "a correlation near 0: its relative error would be meaningless"
        return None


class CompareGroups(Program):
    """How far one category's mean lies above another's (a signed difference).

    Asked as a number, not as "is it higher?": a true/false verdict is one of the two guesses every question
    gets, so half of such questions pass a guess; the difference also says which mean is higher."""

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
            f"What is the mean `{number}` of the rows whose `{group}` is {shown(first)} minus the mean `{number}` "
            f"of the rows whose `{group}` is {shown(second)} (missing values ignored; negative when the first "
            f"is lower)? Round to {DECIMALS} decimal places."
        )
        body = (
            f"a = {col(number)}[{equals(group, first)}].mean()\n"
            f"b = {col(number)}[{equals(group, second)}].mean()\n"
            "answer = float(a - b)\n"
            "checks = {'gap': abs(float(a - b)), 'scale': max(abs(float(a)), abs(float(b)))}"
        )
        params = {"number": number, "group": group, "first": lit(first), "second": lit(second)}
        return Question(
            self.name, params, text, "numeric_approximate", body, (number, group), decimals=DECIMALS
        )

    def problem(self, checks: Checks) -> str | None:
        if not checks["gap"] > MIN_RELATIVE_GAP * checks["scale"]:
            return "the two means are within 1% of each other: their difference is mostly rounding"
        return None
