"""The reference script of a question task: load the files, run the program's body, write `answer.json`.

The script is self-contained (pandas, numpy, scipy): the reference worker runs it, a gold trajectory plays it
as agent turns, and anyone can read it. It writes `answer.json` as `{"answer": ..., "subtasks": {...},
"checks": {...}}`: the grader reads only "answer"; the generator keeps the rest privately (sub-task answers,
and the numbers the program's degeneracy rules judge).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from dareforge.schema import AnswerType

ANSWER_FILE = "answer.json"


def subtask_file(sub_id: str) -> str:
    """The private file holding a sub-task's certified answer (`{"answer": ...}`, like answer.json)."""
    return f"subtask-{sub_id}.json"


HEADER = '''\
import json
import math

import numpy as np
import pandas as pd


def typed(value, kind, decimals=None):
    """The answer as plain JSON: numbers rounded as the question asks, lists of plain values, None if undefined."""
    if isinstance(value, (list, tuple, np.ndarray, pd.Index, pd.Series)):
        return [typed(v, "item") for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if kind == "boolean":
        return bool(value)
    if kind.startswith("numeric"):
        value = float(value)
        if not math.isfinite(value):
            return None
        if decimals is not None:
            return round(value, decimals)
        return int(value) if value.is_integer() else value
    if kind.startswith("string"):
        return str(value)
    return value
'''


@dataclass(frozen=True)
class Step:
    """A piece of code that sets `answer`, with how that answer is typed (the main question or a sub-task)."""

    body: str
    answer_type: AnswerType
    decimals: int | None = None


def compute_code(main: Step, subtasks: dict[str, Step]) -> str:
    """The body of the script after loading: the main answer, then each sub-task's in its own namespace."""
    lines = [
        "checks = {}",
        main.body.strip(),
        f"result = typed(answer, {main.answer_type!r}, {main.decimals!r})",
    ]
    if subtasks:
        lines += ["", "subtasks = {}"]
        for sub_id, step in subtasks.items():
            # Each sub-task's code runs in a function so that its names never clobber the main answer's.
            lines += [
                f"def subtask_{sub_id}(df):",
                *(f"    {line}" if line else "" for line in step.body.strip().splitlines()),
                "    return answer",
                f"subtasks[{sub_id!r}] = typed(subtask_{sub_id}(df), {step.answer_type!r}, {step.decimals!r})",
            ]
    else:
        lines.append("subtasks = {}")
    return "\n".join(lines)


WRITE = f"""\
checks = {{name: typed(value, "numeric") for name, value in checks.items()}}
with open({ANSWER_FILE!r}, "w") as fh:
    json.dump({{"answer": result, "subtasks": subtasks, "checks": checks}}, fh, sort_keys=True)
"""


def reference_script(load: str, main: Step, subtasks: dict[str, Step]) -> str:
    """The whole reference: imports, loading `df` from the files, computing, writing answer.json."""
    return "\n".join(
        [
            HEADER,
            "# Load the data as `df`.",
            load.strip(),
            "",
            "# Compute the answer.",
            compute_code(main, subtasks),
            "",
            "# Write answer.json.",
            WRITE,
        ]
    )


def with_cleaning(cleaning: str, script: str) -> str:
    """The reference run on the public (messy) files: the recorded cleaning step, then the reference."""
    return f"{cleaning.rstrip()}\n\n\n{script}"


@dataclass(frozen=True)
class Reference:
    """The parts of a question task's reference: how `df` is loaded, the main answer's code, each sub-task's,
    and for a Lake task the cleaning step that turns its public files into the clean ones."""

    load: str
    main: Step
    subtasks: dict[str, Step] = field(default_factory=dict)
    cleaning: str | None = None

    @property
    def script(self) -> str:
        return reference_script(self.load, self.main, self.subtasks)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_spec(cls, spec: str) -> Reference:
        """The reference recorded in a question task's spec (JSON, key "reference")."""
        parts = json.loads(spec)["reference"]
        return cls(
            load=parts["load"],
            main=Step(**parts["main"]),
            subtasks={k: Step(**v) for k, v in parts["subtasks"].items()},
            cleaning=parts["cleaning"],
        )
