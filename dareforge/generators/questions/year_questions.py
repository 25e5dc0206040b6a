"""Question programs over time, on a table with ISO dates or an integer year column: the mean of a numeric column
in one year, and its change in percent between two years."""

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
    pick,
)
from dareforge.generators.questions.scripts import Step

MEAN_DECIMALS = 3


def _periods(table: Table, rng: np.random.Generator) -> tuple[str, str, str] | None:
    """(time column, code giving each row's year, words) for a table with dates or a year column."""
    if table.dates and (not table.years or rng.random() < 0.5):
        column = pick(rng, table.dates)
        return column, f"pd.to_datetime({col(column)}).dt.year", f"whose `{column}` falls in the year"
    if table.years:
        column = pick(rng, table.years)
        return column, col(column), f"whose `{column}` is"
    return None


def _year_counts(table: Table, column: str, is_date: bool) -> pd.Series:
    values = table.frame[column].dropna()
    years = pd.to_datetime(values).dt.year if is_date else values.astype(int)
    counts = years.value_counts().sort_index()
    return counts[counts >= MIN_GROUP_ROWS]


class YearStat(Program):
    """The mean of a numeric column in one year (a time window)."""

    name = "time-window"
    operations = ("filter", "aggregate")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        periods = _periods(table, rng)
        numbers = [c for c in table.numeric if periods and c != periods[0]]
        if periods is None or not numbers:
            return None
        column, year_code, words = periods
        counts = _year_counts(table, column, column in table.dates)
        if counts.empty:
            return None
        year, number = int(pick(rng, list(counts.index))), pick(rng, numbers)
        text = (
            f"What is the mean `{number}` over the rows {words} {year}, ignoring missing values? "
            f"Round to {MEAN_DECIMALS} decimal places."
        )
        kept = f"{col(number)}[year == {year}]"
        body = (
            f"year = {year_code}\nanswer = {kept}.mean()\n{filter_checks(f'(year == {year})', column, kept)}"
        )
        params = {"number": number, "time": column, "year": year}
        return Question(
            self.name, params, text, "numeric_approximate", body, (number, column), decimals=MEAN_DECIMALS
        )


class Growth(Program):
    """The percentage change of a yearly mean between two years."""

    name = "growth-rate"
    operations = ("filter", "group-aggregate", "compare")

    def propose(self, table: Table, rng: np.random.Generator) -> Question | None:
        periods = _periods(table, rng)
        numbers = [c for c in table.numeric if periods and c != periods[0]]
        if periods is None or not numbers:
            return None
        column, year_code, words = periods
        counts = _year_counts(table, column, column in table.dates)
        if len(counts) < 2:
            return None
        first, second = sorted(int(counts.index[i]) for i in rng.choice(len(counts), 2, replace=False))
        number = pick(rng, numbers)
        text = (
            f"By what percentage did the mean `{number}` change from the rows {words} {first} to the rows "
            f"{words} {second}? Compute 100 * (mean in {second} - mean in {first}) / mean in {first}, ignoring "
            "missing values; a fall is negative."
        )
        body = (
            f"year = {year_code}\n"
            f"before = {col(number)}[year == {first}].mean()\n"
            f"after = {col(number)}[year == {second}].mean()\n"
            "answer = 100 * (after - before) / before\n"
            "checks = {'base': abs(float(before))}\n"
            + "\n".join(
                filter_checks(f"(year == {y})", column, f"{col(number)}[year == {y}]", name=f"year {y}")
                for y in (first, second)
            )
        )
        params = {"number": number, "time": column, "from": first, "to": second}
        steps = tuple(
            SubQuestion(
                f"What is the mean `{number}` over the rows {words} {year}, ignoring missing values? Round to "
                f"{MEAN_DECIMALS} decimal places.",
                Step(
                    f"year = {year_code}\nanswer = {col(number)}[year == {year}].mean()",
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
            return "the first year's mean is 0: the percentage change is undefined"
        return None
