"""Great Expectations results read as findings: what each expectation observed, in a few words a person can
act on (the failing keys, the unexpected values), and one finding per check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dareforge.validators.check import Finding

if TYPE_CHECKING:
    from great_expectations.core.expectation_validation_result import ExpectationValidationResult

KEY = "key"  # index name of the derived key frames; Data Docs and observed values show it
TASK = "task"  # index name of the frames that hold the rows of many tasks (the task records)
MAX_REASON = 400
MAX_EXAMPLES = 3


@dataclass(frozen=True)
class Outcome:
    suite: str
    label: str
    type: str
    success: bool
    observed: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "expectation": self.label,
            "type": self.type,
            "success": self.success,
            "observed": self.observed,
        }


def outcome_of(suite: str, result: ExpectationValidationResult) -> Outcome:
    config = result.expectation_config
    return Outcome(suite, _label(config), config.type, bool(result.success), _observed(result))


def _label(config: Any) -> str:
    return (config.meta or {}).get("label") or config.type


def _observed(result: ExpectationValidationResult) -> str:
    """A short text of what GX measured: an error, the observed value, or the unexpected rows."""
    error = _error_message(result.exception_info)
    if error:
        return f"error: {_short(error, 120)}"
    kind = result.expectation_config.type
    detail = result.result or {}
    if kind == "expect_column_to_exist":
        return "present" if result.success else "absent"
    if kind == "expect_table_columns_to_match_set":
        mismatched = (detail.get("details") or {}).get("mismatched") or {}
        parts = [f"{what}: {', '.join(map(str, cols))}" for what, cols in sorted(mismatched.items()) if cols]
        return "; ".join(parts) if parts else "columns as expected"
    if "observed_value" in detail:
        return _short(_plain(detail["observed_value"]), 80)
    if "unexpected_count" in detail:
        indexed = detail.get("partial_unexpected_index_list") or []
        keyed = [i[KEY] for i in indexed if isinstance(i, dict) and KEY in i]
        unexpected = detail.get("partial_unexpected_list") or []
        return _unexpected_rows(kind, int(detail["unexpected_count"] or 0), keyed, unexpected)
    return _short(_plain(detail), 80)


def _unexpected_rows(kind: str, count: int, keyed: list[Any], unexpected: list[Any]) -> str:
    """How many rows are unexpected, with a few examples: their keys (`keyed`), else their distinct values."""
    if not count:
        return "0 unexpected rows"
    if keyed:
        values = keyed
    elif kind == "expect_column_values_to_not_be_null":
        values = []  # the values are all null; the count says it
    else:
        distinct = {str(_plain(v)): _plain(v) for v in unexpected}
        values = list(distinct.values())
    shown = ", ".join(_short(_plain(v), 30) for v in values[:MAX_EXAMPLES])
    shown += ", ..." if len(values) > MAX_EXAMPLES else ""
    return f"{count} unexpected row{'s' * (count != 1)}" + (f": {shown}" if shown else "")


def outcomes_per_task(
    suite: str, result: ExpectationValidationResult, task_ids: list[str]
) -> dict[str, Outcome]:
    """A row-wise expectation run on the rows of many tasks (indexed by `TASK`, with GX's COMPLETE result format,
    whose unexpected-index list names every unexpected row) as one outcome per task: it passes when none of the
    task's own rows is unexpected, and says what those rows hold, as `outcome_of` says it of a task's own frame."""
    config = result.expectation_config
    label = _label(config)
    if raised(result):
        failed = Outcome(suite, label, config.type, False, _observed(result))
        return dict.fromkeys(task_ids, failed)
    detail = result.result or {}
    if "unexpected_index_list" not in detail:
        raise ValueError(f"{label}: {config.type} names no unexpected rows, so it cannot be told per task")
    rows: dict[str, list[dict[str, Any]]] = {task_id: [] for task_id in task_ids}
    for row in detail["unexpected_index_list"]:
        rows[row[TASK]].append(row)
    return {
        task_id: Outcome(
            suite, label, config.type, not own, _unexpected_rows(config.type, len(own), *_values(own))
        )
        for task_id, own in rows.items()
    }


def _values(rows: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """The keys (`KEY`) of unexpected rows as GX lists them, and their values (a tuple for a pair of columns)."""
    keyed = [row[KEY] for row in rows if KEY in row]
    values = [[v for name, v in row.items() if name not in (TASK, KEY)] for row in rows]
    return keyed, [v[0] if len(v) == 1 else tuple(v) for v in values]


def raised(result: ExpectationValidationResult) -> bool:
    """Whether the expectation raised instead of judging the rows."""
    return _error_message(result.exception_info) is not None


def _error_message(info: Any) -> str | None:
    if not isinstance(info, dict):
        return None
    if info.get("raised_exception"):
        return str(info.get("exception_message") or "exception")
    for value in info.values():
        if isinstance(value, dict) and value.get("raised_exception"):
            return str(value.get("exception_message") or "exception")
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value.item() if hasattr(value, "item") and callable(value.item) else value


def _short(value: Any, limit: int) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def finding_of(outcomes: list[Outcome], skipped: dict[str, str], suites_version: str) -> Finding:
    failed = [o for o in outcomes if not o.success]
    total = len(outcomes)
    if failed:
        listed = "; ".join(f"{o.label} ({o.observed})" for o in failed)
        reason = _short(f"{len(failed)} of {total} expectations fail: {listed}", MAX_REASON)
    else:
        reason = f"all {total} expectations pass"
    details: dict[str, Any] = {
        "suites_version": suites_version,
        "expectations": [o.as_dict() for o in outcomes],
    }
    if skipped:
        details["skipped"] = skipped
    score = (total - len(failed)) / total if total else None
    return Finding(reason, score, flagged=bool(failed), details=details)
