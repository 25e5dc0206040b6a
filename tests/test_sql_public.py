"""Without --private, `dareforge sql` shows no private material: every value of every table it can read is
scanned against the store's private files (reference programs, answers, reference predictions, their
checksums) and the certified answers of its question tasks."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dareforge.cli import app
from dareforge.context import RunContext
from dareforge.schema import RECORDS, Judgement, Step, Task, Trajectory
from dareforge.validators.validate import validate
from tests.stores import generate_tasks, store_config

PUBLIC_COLUMNS = {
    "tasks": "id family source_id source_version framing prepared_version generator_version seed instruction "
    "public_files metric limits subtasks difficulty operations package_versions status reject_reason variant_of "
    "pass_bar",
    "validations": "task_id source_id check score flagged reason checks_version",
    "trajectories": "id task_id family endpoint model sample temperature protocol outcome score passed "
    "prompt_tokens completion_tokens seconds",
    "judgements": "trajectory_id task_id judge_endpoint judge_model status query_clarity educational_value "
    "exploratory_competence execution_robustness task_alignment answer_plausibility overall attempts "
    "judge_version",
    "reviews": "id task_id release task_fingerprint reviewer decision at",
}
"""The public columns of the tables with private ones: a column added to one of them fails
`test_every_column_was_decided` until it is listed here or in `confined_sql.PRIVATE_COLUMNS`. The other tables
(sources, filter_decisions, framings, prepared, prepare_failures, verdicts, probes) are about public sources,
or hold scores and reasons only; `prepared.files` leaves the answers' file out."""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A small store with every kind of task (IF, MM, QA, Lake), validated, and a trajectory and judgement that
    quote a question's reference program and answer, as a gold trajectory does."""
    root = tmp_path_factory.mktemp("public")
    ctx = generate_tasks(RunContext.from_config(store_config(root, ["sklearn-iris"]), show_progress=False))
    validate(ctx)
    question = next(t for t in ctx.store.read_records(Task) if t.family == "QA" and t.status == "candidate")
    program = ctx.store.read_bytes(f"tasks/{question.id}/private/reference.py").decode()
    answer = json.loads(ctx.store.read_bytes(f"tasks/{question.id}/private/answer.json"))["answer"]
    said = f"The answer is {json.dumps(answer)}."
    trajectory = Trajectory(
        id="gold-1",
        task_id=question.id,
        family="QA",
        endpoint="gold",
        model="reference",
        steps=[Step(role="assistant", content=said, code=program), Step(role="execution", content=said)],
        outcome="graded",
        score=1.0,
        passed=True,
        detail=f"answer {json.dumps(answer)} matches",
    )
    ctx.store.write_records(question.id, [trajectory])
    judgement = Judgement(
        trajectory_id="gold-1",
        task_id=question.id,
        judge_endpoint="j",
        judge_model="m",
        status="scored",
        rationale=f"It ran {program} and said {said}",
        judge_version="1",
    )
    ctx.store.write_records(question.id, [judgement])
    return ctx, root


def query(root: Path, sql: str, *private: str) -> list[dict]:
    result = CliRunner().invoke(
        app,
        ["-q", "--store", str(root / "store"), "sql", *private, sql, "-f", "json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def leaves(value) -> list[str]:
    """Every value inside `value` as text (JSON text columns decoded too), and `value` itself."""
    found = [value if isinstance(value, str) else json.dumps(value, default=str)]
    if isinstance(value, str) and value[:1] in "[{":
        try:
            value = json.loads(value)
        except ValueError:
            return found
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found.extend(leaves(item))
    return found


def private_material(root: Path) -> tuple[set[str], set[str], set[str]]:
    """(lines of code and data lines of the private files, their checksums, computed certified answers)."""
    store = root / "store"
    files = [*store.glob("tasks/*/private/*"), *store.glob("prepared/*/*/files/answers.csv")]
    lines, checksums, answers = set(), set(), set()
    for file in files:
        data = file.read_bytes()
        checksums.add(hashlib.sha256(data).hexdigest())
        text = data.decode()
        if file.suffix in (".py", ".csv"):
            # A line of a program, or a row of answers (an id with its target): long enough to be no accident.
            lines |= {line.strip() for line in text.splitlines() if len(line.strip()) >= 8 and "," in line}
            lines |= {line.strip() for line in text.splitlines() if len(line.strip()) >= 20}
        if file.name == "answer.json" or file.name.startswith("subtask-"):
            answer = json.loads(text)["answer"]
            for item in answer if isinstance(answer, list) else [answer]:
                # A computed number of four significant digits or more does not equal a public value by chance.
                if isinstance(item, float) and len(f"{item}".strip("-0").replace(".", "")) >= 4:
                    answers.add(f"{item}")
        if file.name == "spec.json" or file.suffix == ".json":
            for body in re.findall(r'"body": "((?:[^"\\]|\\.)*)"', text):
                lines |= {
                    line.strip() for line in json.loads(f'"{body}"').splitlines() if len(line.strip()) >= 20
                }
    return lines, checksums, answers


def test_no_public_value_holds_private_material(built):
    _, root = built
    lines, checksums, answers = private_material(root)
    assert lines and checksums and answers  # the scan has something to find
    found = []
    for table in sorted(RECORDS):
        for row in query(root, f"select * from {table}"):
            for column, value in row.items():
                for text in leaves(value):
                    hits = [c for c in checksums if c in text]
                    hits += [line for line in lines if line in text]
                    hits += [a for a in answers if re.search(rf"(?<![\d.]){re.escape(a)}(?!\d)", text)]
                    found += [(table, column, hit[:60]) for hit in hits]
    assert not found, (sorted({(table, column) for table, column, _ in found}), found[:3])


def test_private_shows_what_public_hides(built):
    """The scan can fail: with --private the reference program is there, in tasks.spec and trajectories."""
    _, root = built
    lines, _, _ = private_material(root)
    specs = query(root, "select spec from tasks where family = 'QA'", "--private")
    assert any(line in (row["spec"] or "") for row in specs for line in lines)
    steps = query(root, "select steps from trajectories", "--private")
    assert any(line in json.dumps(row["steps"]) for row in steps for line in lines)
    refused = CliRunner().invoke(app, ["-q", "--store", str(root / "store"), "sql", "select spec from tasks"])
    assert refused.exit_code == 2 and 'column "spec" not found' in refused.output


def test_every_column_was_decided(built):
    from dareforge.confined_sql import PRIVATE_COLUMNS

    _, root = built
    assert set(PRIVATE_COLUMNS) == set(PUBLIC_COLUMNS)
    for table, public in PUBLIC_COLUMNS.items():
        shown = [row["column_name"] for row in query(root, f"describe {table}")]
        assert shown == [c for c in RECORDS[table].model_fields if c in public.split()], table
        assert set(public.split()) | set(PRIVATE_COLUMNS[table]) == set(RECORDS[table].model_fields), table


def test_a_questions_best_guess_stays_private(built):
    """The trivial check's public reason scores a question's best guess without naming it: the name is a value
    ("1", "the first `x` of data.csv") and its score says how close that value is to the answer."""
    _, root = built
    rows = query(
        root,
        "select v.reason, v.details from validations v join tasks t on t.id = v.task_id "
        "where v.\"check\" = 'trivial' and t.family in ('QA', 'Lake') and v.details is not null",
        "--private",
    )
    assert rows
    for row in rows:
        best = json.loads(row["details"])["best"]
        assert f"{best} scores" not in row["reason"] and "a guess scores" in row["reason"]
