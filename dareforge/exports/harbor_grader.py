"""The `tests/` folder of an exported Harbor task: `test.sh`, the grading script and dareforge's own grader.

The grader is ours, not a re-implementation: `tests/grader/dareforge/` holds the source of
`dareforge.reference_solutions.{graders,answers,metrics,submission_files}` and `dareforge.errors`, byte for byte, beside two
small stand-ins for the modules they import that need pydantic (not in the task's image): `schema.py` with
`MetricSpec` and `ANSWER_METRIC`, `reference_solutions/results.py` with `GradeResult` and `Rejected` as plain
classes of the same fields. So the grade inside the container is dareforge's grade, on the packages the
Dockerfile pins (numpy, pandas, scikit-learn); `tests/test_harbor.py` checks the stand-ins keep the real
models' fields and that both graders give the same score to gold and to wrong submissions.

`grade.py` reads `grading.json` (metric, family, grading kind, pass bar, the output and truth files), grades
`/app/<output>` against `/tests/<truth>`, and writes Harbor's reward, `/logs/verifier/reward.txt`: 1 when the
grade passes dareforge's bar for the family (exact families: a score of 1; goal families: the family's pass bar;
questions: `ANSWER_PASS_BAR`), else 0; `/logs/verifier/grade.json` keeps the score, the error and the bar. A
grader crash (a bad answers file: the task's fault) gives reward 0 with the error in `grade.json`. A reward or
grade file found before grading (an agent's, where `/logs` is shared) is removed first: only this run's counts.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from dareforge import errors
from dareforge.reference_solutions import answers, graders, metrics, submission_files
from dareforge.schema import ANSWER_METRIC, MetricSpec

BUNDLE = "grader"
"""The folder under tests/ holding the `dareforge` package the grading script imports."""

VERBATIM = {
    "dareforge/errors.py": errors,
    "dareforge/reference_solutions/graders.py": graders,
    "dareforge/reference_solutions/answers.py": answers,
    "dareforge/reference_solutions/metrics.py": metrics,
    "dareforge/reference_solutions/submission_files.py": submission_files,
}

SCHEMA_STANDIN = '''"""Stand-in for dareforge.schema inside a Harbor task: what the grader imports from it, without pydantic."""

from dataclasses import dataclass

ANSWER_METRIC = {answer_metric!r}


@dataclass(frozen=True)
class MetricSpec:
    name: str
    target_columns: list
    key_columns: list
    tolerance: float | None = None
    k: int | None = None
    scale: list | None = None
    answer_type: str | None = None
    decimals: int | None = None
    unit: str | None = None
'''

RESULTS_STANDIN = '''"""Stand-in for dareforge.reference_solutions.results inside a Harbor task, without pydantic."""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class GradeResult:
    score: float
    error: str | None = None
    rows: int = 0
    method: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


Paraphrase = Callable[[str, str], bool | None]


class Rejected(Exception):
    """A problem with a submission or an answers file; the caller decides whose fault it is."""
'''


def reward_passes(grading: str, score: float, bar: float) -> bool:
    """Whether a grade earns Harbor's reward 1: an exact family's score must be 1, any other must reach the bar.
    (Its source is also `grade.py`'s, so the host's certified grades and the verifier's follow one rule.)"""
    return score >= 1.0 if grading == "exact" else score >= bar


_GRADE_TEMPLATE = '''"""Grades this task as dareforge grades it and writes Harbor's reward (see grading.json)."""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOGS = Path("/logs/verifier")
sys.path.insert(0, str(HERE / "grader"))

# PASS RULE

# Only this run's verdict counts: a reward file already here (an agent's, where /logs is shared) is removed first.
LOGS.mkdir(parents=True, exist_ok=True)
for stale in ("reward.txt", "reward.json", "grade.json"):
    (LOGS / stale).unlink(missing_ok=True)
config = json.loads((HERE / "grading.json").read_text())
details = {"family": config["family"], "bar": config["bar"], "score": None, "error": None}
try:
    import dareforge
    from dareforge.reference_solutions.graders import grade
    from dareforge.schema import MetricSpec

    details["grader"] = str(Path(dareforge.__file__).resolve().parent)
    result = grade(MetricSpec(**config["metric"]), Path("/app") / config["output"], HERE / config["truth"])
    details.update(score=result.score, error=result.error, rows=result.rows, method=result.method)
    passed = reward_passes(config["grading"], result.score, config["bar"])
except Exception as exc:  # the task's fault (e.g. a bad answers file): no pass
    details["error"] = f"the grader failed: {type(exc).__name__}: {exc}"
    passed = False
details["passed"] = passed
(LOGS / "grade.json").write_text(json.dumps(details, indent=1, sort_keys=True))
(LOGS / "reward.txt").write_text("1\\n" if passed else "0\\n")
print(json.dumps(details, sort_keys=True))
'''
GRADE_SCRIPT = _GRADE_TEMPLATE.replace("# PASS RULE\n", inspect.getsource(reward_passes))

TEST_SCRIPT = """#!/bin/bash
# Harbor's verifier entry point: grade /app's output with dareforge's grader, reward in /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python /tests/grade.py
"""


def grader_files() -> dict[str, bytes]:
    """The grader bundle, path under tests/ -> bytes (the same for every task)."""
    files = {f"{BUNDLE}/{path}": Path(str(module.__file__)).read_bytes() for path, module in VERBATIM.items()}
    for package in ("dareforge", "dareforge/reference_solutions"):
        files[f"{BUNDLE}/{package}/__init__.py"] = b""
    files[f"{BUNDLE}/dareforge/schema.py"] = SCHEMA_STANDIN.format(answer_metric=ANSWER_METRIC).encode()
    files[f"{BUNDLE}/dareforge/reference_solutions/results.py"] = RESULTS_STANDIN.encode()
    files["grade.py"] = GRADE_SCRIPT.encode()
    files["test.sh"] = TEST_SCRIPT.encode()
    return files


def grading_config(
    metric: dict[str, Any], family: str, grading: str, bar: float, output: str, truth: str
) -> bytes:
    """`tests/grading.json`: what `grade.py` grades and the bar it passes at."""
    document = {
        "metric": metric,
        "family": family,
        "grading": grading,
        "bar": bar,
        "output": output,
        "truth": truth,
    }
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


def host_grade(tests: Path, output: Path) -> tuple[float, dict[str, Any]]:
    """The reward and details `tests/grade.py` would give `output`, graded in this process: the same grader
    modules the bundle holds byte for byte, the same `grading.json`, the same rule. Only for outputs dareforge
    made itself (a release's stored reference outputs): an agent's output is graded in the verifier's sandbox."""
    config = json.loads((tests / "grading.json").read_text())
    details: dict[str, Any] = {"family": config["family"], "bar": config["bar"], "score": None, "error": None}
    try:
        result = graders.grade(MetricSpec(**config["metric"]), output, tests / config["truth"])
        details.update(score=result.score, error=result.error, rows=result.rows, method=result.method)
        passed = reward_passes(config["grading"], result.score, config["bar"])
    except Exception as exc:  # as grade.py: a grader crash is the task's fault, no pass
        details["error"] = f"the grader failed: {type(exc).__name__}: {exc}"
        passed = False
    details["passed"] = passed
    return (1.0 if passed else 0.0), details
