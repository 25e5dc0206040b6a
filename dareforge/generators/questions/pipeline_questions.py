"""Question programs of several operations: a filter, then groups, then the top one; a derived column compared
across groups; rows against their own group's mean; a statistic over the most frequent groups.

Each states every convention its pipeline needs (strict or inclusive bounds, what a missing value does, how a
tie is broken, rounding) and carries its key intermediate results as sub-questions, each answered by its own
code from `df` and certified with the main answer. The code of a sub-question repeats the steps before it
(`prelude`): a sub-task is played on its own, so it cannot lean on the main body's names.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from dareforge.generators.questions.comparison_questions import TIE_TOLERANCE
from dareforge.generators.questions.question import (
    MIN_GROUP_ROWS,
    Checks,
    Program,
    Question,
    SubQuestion,
    Table,
    col,
    equals,
    extreme_checks,
    filter_checks,
    frequent_value,
    groups_of,
    lit,
    nice_threshold,
    pick,
    shown,
)
from dareforge.generators.questions.scripts import Step

DECIMALS = 3
GROUP_STATS = {"mean": "mean", "sum": "total", "median": "median"}
"""A statistic over a group's values, and how a question names it."""
ROW_STATS = {
    "mean": ("mean", "mean"),
    "median": ("median", "median"),
    "std": ("sample standard deviation (n - 1 in the denominator)", "std"),
}
TIE_RULE = "a tie goes to the value that comes first in ascending order"


@dataclass(frozen=True)
class RowFilter:
    """A condition on one column: its mask over `df`, and how a question says it."""

    mask: str
    words: str
    column: str
    params: dict[str, Any]


def row_filter(table: Table, rng: np.random.Generator, avoid: set[str]) -> RowFilter | None:
    """A numeric bound (inclusive or strict, either side) or one category, on a column not in `avoid`."""
    numeric = [c for c in table.numeric if c not in avoid]
    categorical = [c for c in table.categorical if c not in avoid]
    if numeric and (not categorical or rng.random() < 0.5):
        column = pick(rng, numeric)
        threshold = nice_threshold(table.frame[column].dropna(), rng)
        op = pick(rng, [">", ">=", "<", "<="])
        relation = {
            ">": "greater than",
            ">=": "greater than or equal to",
            "<": "less than",
            "<=": "less than or equal to",
        }[op]
        return RowFilter(
            f"({col(column)} {op} {lit(threshold)})",
            f"whose `{column}` is {relation} {shown(threshold)} (a missing `{column}` fails the condition)",
            column,
            {"filter": column, "op": op, "value": threshold},
        )
    if categorical:
        column = pick(rng, categorical)
        value = frequent_value(table, column, rng)
        if value is None:
            return None
        return RowFilter(
            equals(column, value),
            f"whose `{column}` is {shown(value)}",
            column,
            {"filter": column, "op": "==", "value": lit(value)},
        )
    return None


class NumberByGroup(Program):
    """A program on a numeric column and a different categorical one, drawn first; `ask` does the rest."""

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        return None if number == group else self.ask(table, rng, number, group)

    @abstractmethod
    def ask(self, table: Table, rng: np.random.Generator, number: str, group: str) -> Question | None:
        """The question on `number` by `group`, or None when the table has nothing for it."""


def _ranked(stats: str, highest: bool) -> str:
    """Code sorting a Series of group statistics best first, ties by the group's value (groupby sorts by it)."""
    return f"{stats}.dropna().sort_values(ascending={not highest}, kind='stable')"


class FilterGroupRank(NumberByGroup):
    """Among the rows a filter keeps, the group with the highest (or lowest) mean, total or median."""

    name = "filter-group-rank"
    operations = ("filter", "group-aggregate", "rank")

    def ask(self, table: Table, rng: np.random.Generator, number: str, group: str) -> Question | None:
        where = row_filter(table, rng, {number, group})
        if where is None:
            return None
        stat, highest = pick(rng, list(GROUP_STATS)), bool(rng.random() < 0.5)
        best = "highest" if highest else "lowest"
        prelude = (
            f"kept = df[{where.mask}]\n"
            f"stats = {_ranked(f'kept.groupby({group!r})[{number!r}].{stat}()', highest)}\n"
        )
        scope = f"Among the rows {where.words}"
        text = (
            f"{scope}, which value of `{group}` has the {best} {GROUP_STATS[stat]} `{number}`? Missing values of "
            f"`{number}` are ignored, rows with a missing `{group}` belong to no group, and {TIE_RULE}."
        )
        body = (
            prelude + "answer = stats.index[0]\n"
            "checks = {'groups': len(stats), "
            "'gap': abs(float(stats.iloc[0] - stats.iloc[1])) if len(stats) > 1 else 0.0, "
            "'scale': abs(float(stats.iloc[0])) if len(stats) else 0.0}\n"
            f"{filter_checks(where.mask, where.column, f'kept[{number!r}]')}\n"
            f"{extreme_checks(f'kept.groupby({group!r})[{number!r}].count()', '[answer]')}"
        )
        steps = (
            SubQuestion(
                f"How many rows are there {where.words}?",
                Step(f"answer = int({where.mask}.sum())", "numeric_exact"),
            ),
            SubQuestion(
                f"{scope}, what is the {best} {GROUP_STATS[stat]} `{number}` over the values of `{group}` "
                f"(missing values of `{number}` ignored)? Round to {DECIMALS} decimal places.",
                Step(
                    f"kept = df[{where.mask}]\n"
                    f"answer = kept.groupby({group!r})[{number!r}].{stat}().{'max' if highest else 'min'}()",
                    "numeric_approximate",
                    DECIMALS,
                ),
                answer_in_data=stat == "median",
            ),
        )
        params = {"number": number, "group": group, "stat": stat, "highest": highest, **where.params}
        return Question(
            self.name,
            params,
            text,
            "string_exact",
            body,
            (number, group, where.column),
            answer_in_data=True,
            steps=steps,
        )

    def problem(self, checks: Checks) -> str | None:
        if checks["groups"] < 2:
            return "fewer than two groups among the kept rows: nothing to rank"
        if checks["gap"] <= TIE_TOLERANCE * max(1.0, checks["scale"]):
            return "a tie for the top place: the answer hangs on the tie rule alone"
        return None


class GroupGap(NumberByGroup):
    """A per-row derived value (a ratio of two columns, or whether a value is above the column's mean), its
    mean within each group, and the gap between the highest and the lowest group."""

    name = "group-gap"
    operations = ("derive", "group-aggregate", "rank", "compare")

    def ask(self, table: Table, rng: np.random.Generator, number: str, group: str) -> Question | None:
        positive = [
            c for c in table.numeric if c not in (number, group) and bool((table.frame[c].dropna() > 0).all())
        ]
        if positive and rng.random() < 0.5:
            divisor = pick(rng, positive)
            derived = f"{col(number)} / {col(divisor)}"
            words = f"the ratio `{number}` / `{divisor}` (missing where either is missing)"
            used: tuple[str, ...] = (number, divisor, group)
        else:
            divisor = None
            derived = f"({col(number)} > {col(number)}.mean()).astype(float).where({col(number)}.notna())"
            words = (
                f"1 if its `{number}` is greater than the mean `{number}` of all rows (missing values ignored), "
                f"else 0 (missing where `{number}` is missing)"
            )
            used = (number, group)
        prelude = f"derived = {derived}\nmeans = derived.groupby({col(group)}).mean().dropna()\n"
        text = (
            f"For each row, compute {words}. Take its mean within each value of `{group}`, ignoring missing "
            f"values (rows with a missing `{group}` belong to no group). What is the difference between the "
            f"highest and the lowest of these group means? Round to {DECIMALS} decimal places."
        )
        body = (
            prelude + "answer = means.max() - means.min()\nchecks = {'groups': len(means)}\n"
            f"{extreme_checks(f'derived.groupby({col(group)}).count()', '[means.idxmax(), means.idxmin()] if len(means) else []')}"
        )
        steps = (
            SubQuestion(
                f"For each row, compute {words}. What is its mean over all rows, ignoring missing values? "
                f"Round to {DECIMALS} decimal places.",
                Step(f"derived = {derived}\nanswer = derived.mean()", "numeric_approximate", DECIMALS),
            ),
            SubQuestion(
                f"For each row, compute {words}. Which value of `{group}` has the highest mean of it (missing "
                f"values ignored; {TIE_RULE})?",
                Step(prelude + f"answer = {_ranked('means', True)}.index[0]", "string_exact"),
                answer_in_data=True,
            ),
        )
        params = {"number": number, "group": group, "divisor": divisor}
        return Question(
            self.name, params, text, "numeric_approximate", body, used, decimals=DECIMALS, steps=steps
        )

    def problem(self, checks: Checks) -> str | None:
        if checks["groups"] < 2:
            return "fewer than two groups have a value: there is no gap"
        return None


class AboveGroupMean(NumberByGroup):
    """The share of rows whose value is above the mean of their own group."""

    name = "above-group-mean"
    operations = ("group-aggregate", "derive", "filter", "aggregate")

    def ask(self, table: Table, rng: np.random.Generator, number: str, group: str) -> Question | None:
        largest = groups_of(table, group)
        if largest.empty or largest.iloc[0] < MIN_GROUP_ROWS:
            return None
        value = largest.index[0]
        prelude = (
            f"both = df[[{group!r}, {number!r}]].dropna()\n"
            f"above = both[{number!r}] > both.groupby({group!r})[{number!r}].transform('mean')\n"
        )
        scope = f"Consider the rows where both `{number}` and `{group}` are present."
        text = (
            f"{scope} What percentage of them have a `{number}` strictly greater than the mean `{number}` of "
            f"the rows (among them) that share their `{group}`? Round to 2 decimal places."
        )
        body = (
            prelude + "answer = 100 * above.mean()\nchecks = {'rows': len(both), 'above': int(above.sum())}"
        )
        steps = (
            SubQuestion(
                f"How many rows have both `{number}` and `{group}` present?",
                Step(f"answer = len(df[[{group!r}, {number!r}]].dropna())", "numeric_exact"),
            ),
            SubQuestion(
                f"What is the mean `{number}` of the rows whose `{group}` is {shown(value)}, ignoring missing "
                f"values? Round to {DECIMALS} decimal places.",
                Step(
                    f"answer = {col(number)}[{equals(group, value)}].mean()", "numeric_approximate", DECIMALS
                ),
            ),
            SubQuestion(
                f"{scope} How many of them have a `{number}` strictly greater than the mean `{number}` of the "
                f"rows (among them) that share their `{group}`?",
                Step(prelude + "answer = int(above.sum())", "numeric_exact"),
            ),
        )
        params = {"number": number, "group": group, "named": lit(value)}
        return Question(
            self.name,
            params,
            text,
            "numeric_approximate",
            body,
            (number, group),
            decimals=2,
            unit="%",
            steps=steps,
        )

    def problem(self, checks: Checks) -> str | None:
        if checks["above"] in (0, checks["rows"]):
            return "no row or every row is above its group's mean: the share says nothing"
        return None


class TopGroupsStat(NumberByGroup):
    """A statistic of a numeric column over the rows of the k most frequent groups."""

    name = "top-groups-stat"
    operations = ("group-aggregate", "rank", "filter", "aggregate")

    def ask(self, table: Table, rng: np.random.Generator, number: str, group: str) -> Question | None:
        k = int(rng.integers(2, 4))
        if len(groups_of(table, group)) <= k:
            return None
        stat = pick(rng, list(ROW_STATS))
        words, method = ROW_STATS[stat]
        ranking = (
            f"counts = {col(group)}.value_counts()\n"
            f"top = sorted(counts.index, key=lambda v: (-counts[v], str(v)))[:{k}]\n"
        )
        chosen = (
            f"the {k} most frequent values of `{group}` (by number of rows; a tie goes to the value first in "
            "ascending order as text; a missing value is no value)"
        )
        text = (
            f"Take {chosen}. Over the rows whose `{group}` is one of them, what is the {words} of `{number}`, "
            f"ignoring missing values? Round to {DECIMALS} decimal places."
        )
        kept = f"kept = df[{col(group)}.isin(top)]\n"
        body = (
            ranking
            + kept
            + f"answer = kept[{number!r}].{method}()\nchecks = {{'groups': len(counts)}}\n"
            + filter_checks(f"{col(group)}.isin(top)", group, f"kept[{number!r}]")
        )
        steps = (
            SubQuestion(
                f"List {chosen}.",
                Step(ranking + "answer = top", "list_exact"),
                answer_in_data=True,
                note="a JSON list of the values as they appear in the data, most frequent first",
            ),
            SubQuestion(
                f"How many rows have a `{group}` that is one of {chosen}?",
                Step(ranking + kept + "answer = len(kept)", "numeric_exact"),
            ),
        )
        params = {"number": number, "group": group, "k": k, "stat": stat}
        return Question(
            self.name,
            params,
            text,
            "numeric_approximate",
            body,
            (number, group),
            decimals=DECIMALS,
            answer_in_data=stat == "median",
            steps=steps,
        )
