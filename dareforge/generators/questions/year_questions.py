"""Question programs over time, on a table with ISO dates (a time of day or not) or an integer year column: the
mean of a numeric column in one year (one month, where the dates fall in one year), and its change in percent
between two years (months)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dareforge.generators.questions.question import (
    MIN_GROUP_ROWS,
    Checks,
    Program,
    Question,
    SubQuestion,
    Table,
    col,
    filter_checks,
    lit,
    pick,
)
from dareforge.generators.questions.scripts import Step

MEAN_DECIMALS = 3


def _periods(table: Table, rng: np.random.Generator) -> tuple[str, str, str, pd.Series] | None:
    """(time column, code giving each row's period, words, rows per period) for a table with dates or a year
    column. A period is a year; a date column whose rows fall in one year has months (`2024-03`) instead, as a
    person asks of a year's log."""
    if table.dates and (not table.years or rng.random() < 0.5):
        column = pick(rng, table.dates)
        when = table.parsed(column).dropna()
        counts = _counts(when.dt.year)
        if len(counts) >= 2:
            return column, f"{table.when(column)}.dt.year", f"whose `{column}` falls in the year", counts
        months = _counts(when.dt.strftime("%Y-%m"))
        return (
            column,
            f"{table.when(column)}.dt.strftime('%Y-%m')",
            f"whose `{column}` falls in the month",
            months,
        )
    if table.years:
        column = pick(rng, table.years)
        return column, col(column), f"whose `{column}` is", _counts(table.frame[column].dropna().astype(int))
    return None


def _counts(periods: pd.Series) -> pd.Series:
    """Rows per period, in order, of the periods with `MIN_GROUP_ROWS` rows or more."""
    counts = periods.value_counts().sort_index()
    return counts[counts >= MIN_GROUP_ROWS]


def _period(value: object) -> int | str:
    """A period as a plain value: a year as an int, a month as its text (`2024-03`); the question writes it as
    it is and its code compares it as a literal (`lit`)."""
    return value if isinstance(value, str) else int(value)


class YearStat(Program):
    """The mean of a numeric column in one year (a time window)."""

    name = "time-window"
    operations = ("filter", "aggregate")
    kind = "time"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        periods = _periods(table, rng)
        numbers = [c for c in table.numeric if periods and c != periods[0]]
        if periods is None or not numbers:
            return None
        column, year_code, words, counts = periods
        if counts.empty:
            return None
        year, number = _period(pick(rng, list(counts.index))), pick(rng, numbers)
        text = (
            f"What is the mean `{number}` over the rows {words} {year}, ignoring missing values? "
            f"Round to {MEAN_DECIMALS} decimal places."
        )
        kept = f"{col(number)}[year == {lit(year)}]"
        body = f"year = {year_code}\nanswer = {kept}.mean()\n{filter_checks(f'(year == {lit(year)})', column, kept)}"
        params = {"number": number, "time": column, "year": year}
        return Question(
            self.name, params, text, "numeric_approximate", body, (number, column), decimals=MEAN_DECIMALS
        )


class Growth(Program):
    """The percentage change of a yearly mean between two years."""

    name = "growth-rate"
    operations = ("filter", "group-aggregate", "compare")
    kind = "time"

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        periods = _periods(table, rng)
        numbers = [c for c in table.numeric if periods and c != periods[0]]
        if periods is None or not numbers:
            return None
        column, year_code, words, counts = periods
        if len(counts) < 2:
            return None
        first, second = (_period(counts.index[i]) for i in sorted(rng.choice(len(counts), 2, replace=False)))
        number = pick(rng, numbers)
        text = (
            f"By what percentage did the mean `{number}` change from the rows {words} {first} to the rows "
            f"{words} {second}? Compute 100 * (mean in {second} - mean in {first}) / mean in {first}, ignoring "
            "missing values; a fall is negative."
        )
        body = (
            f"year = {year_code}\n"
            f"before = {col(number)}[year == {lit(first)}].mean()\n"
            f"after = {col(number)}[year == {lit(second)}].mean()\n"
            "answer = 100 * (after - before) / before\n"
            "checks = {'base': abs(float(before))}\n"
            + "\n".join(
                filter_checks(
                    f"(year == {lit(y)})", column, f"{col(number)}[year == {lit(y)}]", name=f"year {y}"
                )
                for y in (first, second)
            )
        )
        params = {"number": number, "time": column, "from": first, "to": second}
        steps = tuple(
            SubQuestion(
                f"What is the mean `{number}` over the rows {words} {year}, ignoring missing values? Round to "
                f"{MEAN_DECIMALS} decimal places.",
                Step(
                    f"year = {year_code}\nanswer = {col(number)}[year == {lit(year)}].mean()",
                    "numeric_approximate",
                    MEAN_DECIMALS,
                ),
            )
            for year in (first, second)
        )
        return Question(
            self.name,
            params,
            text,
            "numeric_approximate",
            body,
            (number, column),
            decimals=2,
            unit="%",
            steps=steps,
        )

    def problem(self, checks: Checks) -> str | None:
        if not checks["base"] > 1e-9:
            return "the first period's mean is 0: the percentage change is undefined"
        return None
