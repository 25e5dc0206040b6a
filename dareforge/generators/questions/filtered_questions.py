"""Question programs on the rows a filter keeps (a numeric threshold or one category): how many there are, a
statistic of a numeric column over them, their share of the table, the distinct categories among them, their
extreme value."""

from __future__ import annotations

import numpy as np

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
    nice_threshold,
    pick,
    shown,
)


class CountWhere(Program):
    """How many rows pass a numeric threshold or equal a category."""

    name = "count-where"
    operations = ("filter", "aggregate")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if table.numeric and (not table.categorical or rng.random() < 0.5):
            column = pick(rng, table.numeric)
            threshold = nice_threshold(table.frame[column].dropna(), rng)
            text = f"How many rows have a `{column}` value greater than {shown(threshold)}?"
            mask = f"({col(column)} > {lit(threshold)})"
            params = {"column": column, "op": ">", "value": threshold}
        elif table.categorical:
            column = pick(rng, table.categorical)
            value = frequent_value(table, column, rng)
            if value is None:
                return None
            text = f"How many rows have `{column}` equal to {shown(value)}?"
            mask = equals(column, value)
            params = {"column": column, "op": "==", "value": lit(value)}
        else:
            return None
        body = f"answer = int({mask}.sum())\n{filter_checks(mask, column)}"
        return Question(self.name, params, text, "numeric_exact", body, (params["column"],))


STATS = {
    "mean": ("mean", "mean"),
    "median": ("median", "median"),
    "std": ("sample standard deviation (n - 1 in the denominator)", "std"),
    "sum": ("sum", "sum"),
}


class FilteredStat(Program):
    """A statistic of a numeric column over the rows of one category."""

    name = "filtered-stat"
    operations = ("filter", "aggregate")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        if number == group:
            return None
        value = frequent_value(table, group, rng)
        if value is None:
            return None
        stat = pick(rng, list(STATS))
        words, method = STATS[stat]
        decimals = 3
        text = (
            f"What is the {words} of `{number}` over the rows whose `{group}` is {shown(value)}, ignoring "
            f"missing values? Round to {decimals} decimal places."
        )
        kept = f"{col(number)}[{equals(group, value)}]"
        body = f"answer = {kept}.{method}()\n{filter_checks(equals(group, value), group, kept)}"
        params = {"number": number, "group": group, "value": lit(value), "stat": stat}
        # A median is often a value of the column itself.
        return Question(
            self.name,
            params,
            text,
            "numeric_approximate",
            body,
            (number, group),
            decimals=decimals,
            answer_in_data=stat == "median",
        )


class Share(Program):
    """The percentage of rows in one category."""

    name = "share"
    operations = ("filter", "aggregate")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.categorical:
            return None
        group = pick(rng, table.categorical)
        value = frequent_value(table, group, rng)
        if value is None:
            return None
        text = (
            f"What percentage of the rows have `{group}` equal to {shown(value)} (rows with a missing "
            f"`{group}` count in the total)?"
        )
        body = f"answer = 100 * {equals(group, value)}.mean()\n{filter_checks(equals(group, value), group)}"
        params = {"group": group, "value": lit(value)}
        return Question(self.name, params, text, "numeric_approximate", body, (group,), decimals=2, unit="%")


class DistinctUnder(Program):
    """How many distinct categories occur among rows above a threshold."""

    name = "distinct-count"
    operations = ("filter", "aggregate")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        if number == group:
            return None
        threshold = nice_threshold(table.frame[number].dropna(), rng)
        text = (
            f"How many distinct values of `{group}` occur among the rows whose `{number}` is greater than "
            f"{shown(threshold)}? Missing values do not count as a value."
        )
        mask = f"({col(number)} > {lit(threshold)})"
        body = (
            f"answer = int({col(group)}[{mask}].nunique())\n"
            f"checks = {{'all': int({col(group)}.nunique()), 'count': answer}}\n"
            f"{filter_checks(mask, number)}"
        )
        params = {"number": number, "group": group, "value": threshold}
        return Question(self.name, params, text, "numeric_exact", body, (number, group))

    def problem(self, checks: Checks) -> str | None:
        if checks["count"] == checks["all"]:
            return "every value occurs above the threshold: the count is the column's number of values"
        return None


class ExtremeWhere(Program):
    """The largest or smallest value of a numeric column within one category."""

    name = "extreme-where"
    operations = ("filter", "aggregate")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        if not table.numeric or not table.categorical:
            return None
        number, group = pick(rng, table.numeric), pick(rng, table.categorical)
        value = frequent_value(table, group, rng)
        if number == group or value is None:
            return None
        largest = bool(rng.random() < 0.5)
        text = (
            f"What is the {'largest' if largest else 'smallest'} `{number}` among the rows whose `{group}` is "
            f"{shown(value)} (missing values ignored)?"
        )
        kept = f"{col(number)}[{equals(group, value)}]"
        body = f"answer = {kept}.{'max' if largest else 'min'}()\n{filter_checks(equals(group, value), group, kept)}"
        params = {"number": number, "group": group, "value": lit(value), "largest": largest}
        return Question(self.name, params, text, "numeric_exact", body, (number, group), answer_in_data=True)
