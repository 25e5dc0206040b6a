"""Grading reads a submission in bounded memory (issue 42): a predictions CSV is streamed, only its key and
target columns kept, and refused past the answers' rows and a margin, a field count or a cell size, each with a
reason. The peak is measured in a child process (its maximum resident size), never the time it takes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from dareforge.reference_solutions.graders import grade
from dareforge.reference_solutions.submission_files import (
    MAX_CELL_CHARS,
    MAX_CSV_COLUMNS,
    MAX_PREDICTIONS_BYTES,
    MAX_ROW_CHARS,
    ROW_MARGIN,
)
from dareforge.schema import MetricSpec

ANSWERS = "id,y\n007,1\n008,0\n009,1\n"
SPEC = MetricSpec(name="exact-match", target_columns=["y"], key_columns=["id"])
GRADING_PEAK_MB = 64
"""What grading a 1 GiB predictions CSV may add to the grading process's peak resident size (README)."""


@pytest.fixture
def answers(tmp_path):
    path = tmp_path / "answers.csv"
    path.write_text(ANSWERS)
    return path


def graded(tmp_path, answers, text: str):
    path = tmp_path / "predictions.csv"
    path.write_text(text)
    return grade(SPEC, path, answers)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "id,y\n" + "a,1\n" * (3 + ROW_MARGIN + 1),
            f"predictions.csv has more than {3 + ROW_MARGIN} rows (the test file's rows and a margin",
        ),
        ("id,y," + ",".join(f"c{i}" for i in range(MAX_CSV_COLUMNS)) + "\n007,1\n", "fields, more than the"),
        (
            f"id,y\n007,{'1' * (MAX_CELL_CHARS + 1)}\n",
            f"a cell of {MAX_CELL_CHARS + 1} characters in column 'y'",
        ),
        ("id,y\n007," + "1" * (MAX_ROW_CHARS + 1), f"a record of more than {MAX_ROW_CHARS} characters"),
        ('id,y\n007,"' + "\n" * (MAX_ROW_CHARS + 1), f"a record of more than {MAX_ROW_CHARS} characters"),
    ],
    ids=["rows", "columns", "cell", "line", "quoted-lines"],
)
def test_a_submission_past_a_bound_is_refused_with_the_bound_named(tmp_path, answers, text, reason):
    result = graded(tmp_path, answers, text)
    assert result.score == 0.0 and result.error.startswith("submission cannot be graded: "), result
    assert reason in result.error, result.error


def test_within_the_bounds_a_submission_grades_as_before(tmp_path, answers):
    extra = "".join(f"x{i},0\n" for i in range(ROW_MARGIN))  # unknown keys: named, not refused for size
    wide = "id,y," + ",".join(f"c{i}" for i in range(MAX_CSV_COLUMNS - 2)) + "\n"
    row = ",".join(["0"] * (MAX_CSV_COLUMNS - 2))
    assert graded(tmp_path, answers, "id,y\n007,1\n008,0\n009,1\n").score == 1.0
    assert "x0" in graded(tmp_path, answers, ANSWERS + extra).error
    full = f"{wide}007,1,{row}\n008,0,{row}\n009,{'1'},{row}\n"
    assert graded(tmp_path, answers, full).score == 1.0
    assert graded(tmp_path, answers, f"id,y\n007,1{' ' * (MAX_CELL_CHARS - 1)}\n008,0\n009,1\n").score == 1.0


GRADE_IN_A_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from dareforge.reference_solutions.graders import grade
    from dareforge.schema import MetricSpec
    spec = MetricSpec(name="exact-match", target_columns=["y"], key_columns=["id"])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = grade(spec, sys.argv[1], sys.argv[2])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"error": result.error, "grown_kb": after - before}))
    """
)


@pytest.mark.parametrize("header", ["id,y", "a,1"], ids=["rows-past-the-answers", "wrong-header"])
def test_grading_a_1_gib_predictions_file_stays_within_its_memory_bound(tmp_path, answers, header):
    path = tmp_path / "predictions.csv"
    block = b"a,1\n" * (1 << 18)  # 1 MiB
    with open(path, "wb") as fh:
        fh.write(header.encode() + b"\n")
        for _ in range(MAX_PREDICTIONS_BYTES // len(block) - 1):
            fh.write(block)
    assert MAX_PREDICTIONS_BYTES - len(block) < path.stat().st_size <= MAX_PREDICTIONS_BYTES
    child = subprocess.run(
        [sys.executable, "-c", GRADE_IN_A_CHILD, str(path), str(answers)],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(child.stdout)
    assert report["grown_kb"] / 1024 <= GRADING_PEAK_MB, report
    assert report["error"].startswith("submission "), report
