"""The registered task families, in the order cards, reports and the generate stage take them.

Adding a family: write its module (one `Family` object, see `family.py`) and add one line to `REGISTERED`.
Everything else (generate, validate, grading, probes, release cards, exports) finds it here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from dareforge.config import Config
from dareforge.crawlers.rules import RowNeed
from dareforge.errors import ConfigError, DareforgeError
from dareforge.families import class_if, class_mm, lake, qa, reg_if, reg_mm, ts_cf, ts_xf
from dareforge.families.family import Family, Grading, Needs
from dareforge.schema import PreparedSource, Task, TaskType

REGISTERED: dict[str, Family] = {
    f.name: f
    for f in (
        class_if.FAMILY,
        class_mm.FAMILY,
        reg_if.FAMILY,
        reg_mm.FAMILY,
        ts_xf.FAMILY,
        ts_cf.FAMILY,
        qa.FAMILY,
        lake.FAMILY,
    )
}


class UnknownFamilyError(DareforgeError):
    pass


def families() -> list[Family]:
    return list(REGISTERED.values())


def family_named(name: str) -> Family:
    """The registered family `name`; an unknown name is an error that lists the registered ones."""
    try:
        return REGISTERED[name]
    except KeyError:
        raise UnknownFamilyError(
            f"unknown task family {name!r}; registered: {', '.join(REGISTERED)} "
            "(a family is one module in dareforge/families/ plus its line in families/registry.py)"
        ) from None


def family_of(task: Task) -> Family:
    return family_named(task.family)


def needs(family: Family, config: Config) -> Needs:
    """What `family` needs of a table: its own `needs`, or `rules.min_rows` as every family's row minimum when
    the config sets it (a number there overrides the families, as the source-wide minimum once did)."""
    rows = config.rules.min_rows
    return family.needs if rows is None else replace(family.needs, rows=rows, why=f"rules.min_rows={rows}")


def row_needs(config: Config) -> list[RowNeed]:
    """Every family's row minimum, as the filter stage takes it handed in (crawlers sit below the families)."""
    return [RowNeed(f.name, needs(f, config).rows, needs(f, config).why) for f in families()]


def model_needs(kind: TaskType, config: Config) -> Needs:
    """The least any family predicting `kind` needs: a table below it is no `kind` framing (it may still pose
    questions)."""
    return min((needs(f, config) for f in families() if f.kind == kind), key=lambda n: n.rows)


def question_needs(config: Config) -> Needs:
    """The least any question family needs: a table at least that large poses questions though no model fits."""
    return min((needs(f, config) for f in families() if f.asks_question), key=lambda n: n.rows)


def skip_reason(family: Family, prepared: PreparedSource, config: Config) -> str | None:
    """Why `family` poses no task on the framing `prepared` (None: it does)."""
    if family.applies(prepared):
        return None
    framing = prepared.framing or "the framing"
    if prepared.questions_only:
        short = needs(family, config).short_by(prepared.n_rows)
        return f"{framing} poses questions only: " + (
            short or f"no {family.kind} target passed understand's checks (the framing's reason says why)"
        )
    if family.kind != prepared.task_type:
        return f"{framing} is a {prepared.task_type} framing, not {family.kind}"
    return family.skips or f"{family.name} does not apply to {framing}"


def in_order(names: Iterable[str]) -> list[str]:
    """Distinct family names in registry order (names no longer registered last, by name)."""
    present = set(names)
    return [n for n in REGISTERED if n in present] + sorted(present - set(REGISTERED))


def pass_bars(overrides: Mapping[str, float]) -> dict[str, float]:
    """The bar of every goal-graded family (its own, or the configured override), plus the overrides of other
    families; exact families pass only at 1.0 whatever is configured. An unknown name is a config error."""
    unknown = sorted(set(overrides) - set(REGISTERED))
    if unknown:
        raise ConfigError(f"pass_bars names unknown families {unknown}; registered: {', '.join(REGISTERED)}")
    goal = {f.name: f.pass_bar for f in REGISTERED.values() if f.grading == Grading.GOAL}
    return goal | dict(overrides)


def bar_of(task: Task, overrides: Mapping[str, float] | None = None) -> float:
    """The score an attempt at `task` must reach to pass: 1.0 for an exact family; the task's own bar where it
    carries one (its family's is out of its strong reference's reach; see `Family.own_bar`), whatever the
    family's bar is configured to; else its family's bar (`overrides`, else the family's own)."""
    family = family_of(task)
    if family.exact:
        return 1.0
    if task.pass_bar is not None:
        return task.pass_bar
    return (overrides or {}).get(family.name, family.pass_bar)


def bar_rule() -> str:
    """The pass-bar rule in words, for cards: every goal family's bar and when a task carries its own."""
    goal = ", ".join(f"{f.name} {f.pass_bar:g}" for f in REGISTERED.values() if f.grading == Grading.GOAL)
    return (
        f"A modelling or forecasting task passes at its family's bar ({goal}), or at its own bar (`pass_bar`) "
        "where its strong reference scores below the family's: the lower bound of the strong reference's 95% "
        "bootstrap interval over the test rows, rounded down to 0.01, kept only where the trivial answer and the "
        "weakest model of the solver ladder score clearly below it (the upper bounds of their intervals plus "
        "`validate.min_task_bar_gap`); a task that has no such bar is not released. Every task's instruction "
        "states the bar it is graded at, and every grader uses that bar."
    )
