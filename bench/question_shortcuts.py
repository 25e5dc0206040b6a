"""The one-step baseline on the builtin catalog's QA questions: the share of candidate questions whose certified
answer one operation over `data.csv` gives (`generators/questions/one_step.py`), per program and overall.
Issue 27 asks that hard questions be those it cannot answer; today's programs are single operations."""

from __future__ import annotations

import io
import json
import tempfile
from collections import Counter

import pandas as pd

from bench.common import bench_config, generated
from dareforge.families.registry import family_of
from dareforge.generators.questions.one_step import one_step_solves
from dareforge.generators.questions.scripts import ANSWER_FILE
from dareforge.generators.questions.table_questions import DATA
from dareforge.schema import Task


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench_config(tmp)
        cfg.generate.lakes_per_source = 0
        ctx = generated(cfg)
        asked, solved = Counter(), Counter()
        for task in ctx.store.iter_records(Task):
            if task.status != "candidate" or not family_of(task).asks_question:
                continue
            if task.metric.answer_type == "boolean":
                continue
            frame = pd.read_csv(io.BytesIO(ctx.store.read_bytes(f"tasks/{task.id}/public/{DATA}")))
            answer = json.loads(ctx.store.read_bytes(f"tasks/{task.id}/private/{ANSWER_FILE}"))["answer"]
            program = json.loads(task.spec or "{}").get("program", "?")
            asked[program] += 1
            solved[program] += one_step_solves(task.metric, answer, frame)
    total, hits = sum(asked.values()), sum(solved.values())
    print(
        f"one-step baseline (builtin QA, booleans aside): solves {hits} of {total} ({hits / max(total, 1):.0%})"
    )
    for program, n in sorted(asked.items()):
        print(f"  {program}: {solved[program]} of {n}")
