"""Gold trajectories: each IF task's reference pipeline (and each QA/Lake task's question program) played as an
agent episode, for SFT data with no LLM.

The replies are written from the task's spec, which is what its instruction states: look at the data; apply
the filters, printing the rows left after each; build the features and the pipeline and fit it; predict, write
`predictions.csv` and check it; answer. The code cells are the reference script's own sections
(`if_reference_sections`), in order, with only printing in between, so the predictions are the reference's.

`GoldClient` hands these replies to the real agent loop (`dareforge.agents.attempts.run_attempts`, attempt kind
"gold"), so every observation is a true output of the sandboxed kernel, and the episode is graded like any
other: a gold trajectory is **verified** when every prediction matches the reference run (score 1.0). An
unverified one points at a bug (the reference code changed since certification, or the sandbox's stack differs
from the one that certified the task); it is stored all the same and reported with its outcome and detail.

A question task's replies come from the reference recorded in its spec: look at the files (names, sizes,
first lines); for a Lake task, run the recorded cleaning step; load the data and compute the answer with the
program's own code; write `answer.json`; answer. Verified when the answer grades 1 against the certified one.

`regrade` replays a stored trajectory's replies in a fresh sandbox and grades what they write, so anyone can
check an exported trajectory without trusting the record: the predictions must be byte-identical and score 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from dareforge.agents.attempts import (
    AttemptSettings,
    Materializer,
    attempts_for,
    default_sandbox_factory,
    run_attempts,
)
from dareforge.agents.grading import output_file
from dareforge.agents.loop import SandboxFactory, run_agent
from dareforge.agents.protocol import protocol_for, task_prompt
from dareforge.context import RunContext
from dareforge.errors import DareforgeError
from dareforge.families.registry import family_of
from dareforge.generators.questions.scripts import ANSWER_FILE, HEADER, Reference, compute_code
from dareforge.llm import ChatResult
from dareforge.queries import partition_name
from dareforge.reference_solutions.reference_code import PREDICTIONS, Section, if_reference_sections, literal
from dareforge.reference_solutions.spec import IFSpec, RangeFilter
from dareforge.schema import Task, Trajectory
from dareforge.scratch import temp_root
from dareforge.trajectories.synthesize import task_set

log = logging.getLogger(__name__)

GOLD_VERSION = "1"
"""Bump when the replies change: it is part of the model name, hence of every gold trajectory id."""
GOLD_KIND = "gold"


class GoldError(DareforgeError):
    pass


@dataclass(frozen=True)
class ScriptEndpoint:
    name: str
    model: str
    protocol: str = "tags"


GOLD_ENDPOINT = ScriptEndpoint("gold", f"reference-pipeline-{GOLD_VERSION}")


class GoldClient:
    """A chat client that answers from pre-written replies: per task prompt, the reply for each turn.

    The loop's first user message is the task prompt, so it tells the tasks apart; the number of assistant
    messages so far says which reply comes next; a reply is its text, or a whole `ChatResult` (with its tool
    calls, to replay a tools trajectory). A task with no replies gets an error (an `llm-error`
    trajectory), never a made-up reply.
    """

    def __init__(
        self, replies: Mapping[str, Sequence[str | ChatResult]], endpoint: ScriptEndpoint = GOLD_ENDPOINT
    ):
        self.endpoint = endpoint
        self.replies = {prompt: list(texts) for prompt, texts in replies.items()}

    @classmethod
    def for_tasks(cls, tasks: Iterable[Task]) -> GoldClient:
        replies: dict[str, list[str]] = {}
        for task in tasks:
            prompt, mine = task_prompt(task), gold_replies(task)
            if replies.setdefault(prompt, mine) != mine:
                # Cannot happen while the instruction states the whole spec; fail rather than mix two tasks up.
                raise GoldError(f"task {task.id} has the prompt of another task but other gold replies")
        return cls(replies)

    async def chat(self, messages: list[dict[str, Any]], **params: Any) -> ChatResult:
        prompt = next((m["content"] for m in messages if m["role"] == "user"), "")
        replies = self.replies.get(prompt)
        if not replies:
            return ChatResult(error="no scripted replies for this task", error_kind="script")
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn >= len(replies):
            return ChatResult(
                error=f"the script has {len(replies)} replies; turn {turn + 1} asked", error_kind="script"
            )
        reply = replies[turn]
        return reply if isinstance(reply, ChatResult) else ChatResult(text=reply, finish_reason="stop")


# -- the replies ----------------------------------------------------------------------------------------------
@dataclass
class Turn:
    reasoning: str
    code: str

    def reply(self) -> str:
        return f"<reasoning>\n{self.reasoning}\n</reasoning>\n<code>\n{self.code.rstrip()}\n</code>"


def spec_of(task: Task) -> IFSpec:
    if not family_of(task).exact:
        raise GoldError(f"task {task.id} is {task.family}: gold trajectories exist for IF tasks only")
    if not task.spec:
        raise GoldError(f"IF task {task.id} has no spec; regenerate it with `dareforge generate`")
    return IFSpec.model_validate_json(task.spec)


LOOK_AT_FILES = """\
import os

for name in sorted(os.listdir(".")):
    if name.endswith(".csv"):
        with open(name) as fh:
            head = [next(fh, "").rstrip() for _ in range(3)]
        print(f"{name}: {os.path.getsize(name)} bytes")
        for line in head:
            print("    " + line[:200])
"""


def question_replies(task: Task) -> list[str]:
    """The gold agent's replies to a QA or Lake task, from the reference recorded in its spec."""
    if not task.spec:
        raise GoldError(f"{task.family} task {task.id} has no spec; regenerate it with `dareforge generate`")
    try:
        reference = Reference.from_spec(task.spec)
        files = json.loads(task.spec).get("files") or {}
    except (ValueError, KeyError, TypeError) as exc:
        raise GoldError(
            f"{task.family} task {task.id} records no reference in its spec ({exc}); regenerate it"
        ) from exc
    turns = [Turn("I start by looking at the files: their names, sizes and first lines.", LOOK_AT_FILES)]
    if reference.cleaning is not None:
        mess = "; ".join(f"`{name}`: {', '.join(kinds) or 'clean'}" for name, kinds in sorted(files.items()))
        turns.append(
            Turn(
                "The question needs the files of its table, and they are untidy "
                f"({mess}). I clean each one on its text, so no value changes: drop the extra header line, "
                "read the missing-value markers as empty, remove thousands separators, bring columns given in "
                "thousands back to their unit, and write every date as YYYY-MM-DD.",
                f"{reference.cleaning.rstrip()}\nprint('cleaned:', {sorted(files)!r})",
            )
        )
    compute = "\n".join(
        [
            HEADER,
            reference.load,
            "print(df.shape)",
            compute_code(reference.main, {}),
            "print('answer:', result)",
        ]
    )
    turns.append(
        Turn(
            "I load the data into one table and compute what the question asks, in its stated format.",
            compute,
        )
    )
    turns.append(
        Turn(
            f"I write the answer to {ANSWER_FILE} and read it back.",
            f'with open("{ANSWER_FILE}", "w") as fh:\n    json.dump({{"answer": result}}, fh)\nprint(open("{ANSWER_FILE}").read())',
        )
    )
    if len(turns) > task.limits.turns:
        raise GoldError(
            f"task {task.id} allows {task.limits.turns} code executions; its gold needs {len(turns)}"
        )
    answer = (
        "<reasoning>\n"
        f"{ANSWER_FILE} holds the answer computed from the data as the question asks, in its stated format.\n"
        f"</reasoning>\n<answer>\n{ANSWER_FILE} is written.\n</answer>"
    )
    return [turn.reply() for turn in turns] + [answer]


def gold_replies(task: Task) -> list[str]:
    """The gold agent's replies to `task`: code turns within `task.limits.turns` executions, then the answer."""
    if family_of(task).asks_question:
        return question_replies(task)
    spec = spec_of(task)
    if task.limits.turns < 1:
        raise GoldError(f"task {task.id} allows no code execution (limits.turns = {task.limits.turns})")
    turns = plan_turns(spec, if_reference_sections(spec))
    while len(turns) > task.limits.turns:
        # Looking at the data and filtering share a cell first: the later cells are the ones worth seeing apart.
        first, second = turns[0], turns[1]
        turns[:2] = [Turn(f"{first.reasoning}\n\n{second.reasoning}", f"{first.code}\n{second.code}")]
    answer = (
        "<reasoning>\n"
        f"{PREDICTIONS} holds one prediction of `{spec.target}` per row of test.csv, made by the workflow exactly as "
        "instructed (same filters in the same order, same features, preprocessing and model parameters), and the "
        "check shows the expected columns and no missing prediction.\n"
        "</reasoning>\n"
        f"<answer>\n{PREDICTIONS} is written.\n</answer>"
    )
    return [turn.reply() for turn in turns] + [answer]


def plan_turns(spec: IFSpec, sections: list[Section]) -> list[Turn]:
    """Four cells: look at the data, filter (when there are filters), features + pipeline + fit, predict and check."""
    by_kind: dict[str, list[Section]] = {}
    for section in sections:
        by_kind.setdefault(section.kind, []).append(section)

    def code(*kinds: str) -> str:
        return "".join(s.code for kind in kinds for s in by_kind.get(kind, []))

    fit = code("dates", "features") + _features_check() + code("pipeline", "fit") + _fit_check(spec)
    turns = [Turn(_look_reasoning(spec), code("imports", "load") + _look_code(spec))]
    if spec.filters:
        turns.append(Turn(_filter_reasoning(spec), _filter_code(spec, by_kind["filter"])))
    turns.append(Turn(_fit_reasoning(spec), fit))
    turns.append(Turn(_predict_reasoning(spec), code("predict") + _predict_check(spec)))
    return turns


def _classification(spec: IFSpec) -> bool:
    return spec.task_type.value == "classification"


def _names(columns: Sequence[str]) -> str:
    return ", ".join(f"`{c}`" for c in columns) if columns else "none"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _used_columns(spec: IFSpec) -> list[str]:
    date = [spec.date_parts.column] if spec.date_parts else []
    filtered = [f.column for f in spec.filters]
    return list(
        dict.fromkeys([spec.id_column, spec.target, *spec.numeric, *spec.categorical, *date, *filtered])
    )


def _look_reasoning(spec: IFSpec) -> str:
    return (
        f"The instruction fixes the whole workflow to predict `{spec.target}` ({spec.task_type.value}): "
        f"{_count(len(spec.filters), 'filter')} on the training rows, "
        f"{_count(len(spec.numeric_features) + len(spec.categorical), 'feature')}, their preprocessing, and a "
        f"{spec.model.name}. Before following it I load both files with "
        "pandas' defaults and look at them: their size, each column's type and missing values (the imputers will "
        "fill those), the first rows of the columns the workflow uses, and the target's "
        f"{'classes' if _classification(spec) else 'distribution'}."
    )


def _look_code(spec: IFSpec) -> str:
    target = repr(spec.target)
    summary = "value_counts(dropna=False)" if _classification(spec) else "describe()"
    return (
        'print(f"train.csv: {train.shape[0]} rows, {train.shape[1]} columns; '
        'test.csv: {test.shape[0]} rows, {test.shape[1]} columns")\n'
        "print(pd.DataFrame({\n"
        '    "dtype": train.dtypes.astype(str),\n'
        '    "missing in train": train.isna().sum(),\n'
        '    "missing in test": test.isna().sum().reindex(train.columns).astype("Int64"),\n'
        "}).to_string())\n"
        f"print(train[{_used_columns(spec)!r}].head().to_string())\n"
        f"print({f'target {spec.target}:'!r})\n"
        f"print(train[{target}].{summary}.to_string())\n"
    )


def _filter_words(f: Any) -> str:
    if isinstance(f, RangeFilter):
        return f"`{f.column}` between {literal(f.low)} and {literal(f.high)} inclusive"
    shown = ", ".join(repr(v) for v in f.allowed[:10])
    more = f" and {len(f.allowed) - 10} more" if len(f.allowed) > 10 else ""
    return f"`{f.column}` one of {shown}{more}"


def _filter_reasoning(spec: IFSpec) -> str:
    listed = "; ".join(f"{i}) keep rows with {_filter_words(f)}" for i, f in enumerate(spec.filters, 1))
    return (
        "Next the cleaning, on the training rows only and in the stated order, always keeping a row whose "
        f"filtered value is missing: {listed}. The training file holds noise rows that these filters are meant to "
        "drop, so I print the row count before and after each filter to see what each one removes."
    )


def _filter_code(spec: IFSpec, sections: list[Section]) -> str:
    lines = ['print("training rows before filtering:", len(train))']
    for f, section in zip(spec.filters, sections, strict=True):
        lines.append(section.code.rstrip("\n"))
        lines.append(f"print({f'rows left after the {f.column} filter:'!r}, len(train))")
    return "\n".join(lines) + "\n"


def _fit_reasoning(spec: IFSpec) -> str:
    parts = []
    if spec.date_parts:
        derived = ", ".join(
            f"`{name}` ({part})"
            for part, name in zip(spec.date_parts.parts, spec.date_parts.derived, strict=True)
        )
        parts.append(
            f"In both files I parse `{spec.date_parts.column}` with `pd.to_datetime` and add {derived} from its "
            "`.dt` accessor."
        )
    numeric, categorical = spec.numeric_features, spec.categorical
    inputs = [f"the numeric features {_names(numeric)}"] if numeric else []
    inputs += [f"the categorical features {_names(categorical)}"] if categorical else []
    parts.append(f"The model sees {' and '.join(inputs)}, in this order, and no other column.")
    if categorical:
        parts.append(
            "I cast the categorical columns to plain objects with NaN for missing values, because scikit-learn's "
            "imputers and encoders treat pandas' string dtype inconsistently."
        )
    steps = []
    if numeric:
        scaled = {
            "standard": ", then scaled with StandardScaler",
            "minmax": ", then scaled with MinMaxScaler",
        }
        steps.append(
            f"the numeric features imputed with the {spec.numeric_imputer}{scaled.get(spec.scaler, '')}"
        )
    if categorical:
        fill = (
            "the most frequent value"
            if spec.categorical_imputer == "most_frequent"
            else "the string 'missing'"
        )
        steps.append(
            f"the categorical features imputed with {fill}, then {spec.encoder}-encoded with unknown categories "
            "tolerated"
        )
    params = ", ".join(f"{k}={v!r}" for k, v in spec.model.params.items())
    parts.append(
        f"One ColumnTransformer prepares {'; then '.join(steps)}. It goes with `{spec.model.name}({params})`, every "
        f"other parameter at its default, into one Pipeline fitted on the cleaned rows to predict `{spec.target}`. "
        "I print the pipeline to check it, and its score on the training rows only as a sanity check."
    )
    return " ".join(parts)


def _features_check() -> str:
    return 'print("features:", features)\nprint("X:", X.shape, "X_test:", X_test.shape)\n'


def _fit_check(spec: IFSpec) -> str:
    what = "accuracy" if _classification(spec) else "R^2"
    return f'print(model)\nprint("{what} on the cleaned training rows:", round(model.score(X, train[{spec.target!r}]), 4))\n'


def _predict_reasoning(spec: IFSpec) -> str:
    return (
        f"Now I predict every row of test.csv and write {PREDICTIONS} with exactly the columns `{spec.id_column}` "
        f"and `{spec.target}`, then read the file back to check it has one row per test row and no missing "
        "prediction."
    )


def _predict_check(spec: IFSpec) -> str:
    target = repr(spec.target)
    summary = "value_counts().to_string()" if _classification(spec) else "describe().to_string()"
    return (
        f'written = pd.read_csv("{PREDICTIONS}")\n'
        f'print("{PREDICTIONS}:", written.shape, list(written.columns), "rows in test.csv:", len(test))\n'
        f'print("missing predictions:", int(written[{target}].isna().sum()))\n'
        "print(written.head().to_string())\n"
        f"print(written[{target}].{summary})\n"
    )


# -- playing them -----------------------------------------------------------------------------------------------
@dataclass
class GoldReport:
    source: str  # "<release>@<version> <split>", or "store"
    partition: str
    trajectories: list[Trajectory]
    skipped: dict[str, str] = field(default_factory=dict)  # IF task id -> why it has no gold trajectory
    ran: int = 0
    reused: int = 0
    seconds: float = 0.0

    @property
    def tasks(self) -> int:
        return len(self.trajectories) + len(self.skipped)

    @property
    def verified(self) -> list[Trajectory]:
        return [t for t in self.trajectories if t.passed]

    @property
    def failed(self) -> dict[str, str]:
        """Task id -> why its gold trajectory is not verified (each one points at a bug)."""
        return {t.task_id: f"{t.outcome}: {t.detail}" for t in self.trajectories if not t.passed}

    @property
    def per_minute(self) -> float | None:
        return 60 * self.ran / self.seconds if self.ran and self.seconds > 0 else None

    def summary(self) -> str:
        return (
            f"gold on {self.source}: {self.tasks} IF/QA/Lake tasks, {len(self.verified)} verified, {len(self.failed)} "
            f"not verified, {len(self.skipped)} skipped; {self.ran} played, {self.reused} reused in "
            f"{self.seconds:.1f}s"
        )


def gold_trajectories(
    ctx: RunContext,
    release: str | None = "dareforge",
    split: str = "train",
    version: str | None = None,
    task_ids: Iterable[str] | None = None,
    workers: int | None = None,
    sandbox_factory: SandboxFactory | None = None,
) -> GoldReport:
    """Play one gold trajectory per IF task of `release`'s `split` (store tasks when `release` is None).

    Stored in partition `gold--<release>` (`gold--store`); a re-run plays only tasks without one. `workers`
    episodes at once (default: the CPU count).
    """
    started = time.perf_counter()
    found = task_set(ctx, release, split, version, task_ids)
    playable, skipped = [], {}
    for task in (t for t in found.tasks if family_of(t).exact or family_of(t).asks_question):
        try:
            gold_replies(task)
            playable.append(task)
        except GoldError as exc:
            skipped[task.id] = str(exc)
    partition = partition_name("gold", found.name)
    report = GoldReport(found.label, partition, [], skipped)
    if playable:
        settings = AttemptSettings(
            partition,
            workers or max(1, os.cpu_count() or 1),
            sandbox_factory=sandbox_factory,
            label="gold",
        )
        attempts = attempts_for(playable, 1, found.files, kind=GOLD_KIND)
        played = run_attempts(ctx, GoldClient.for_tasks(playable), attempts, settings)
        report.trajectories, report.ran, report.reused = played.trajectories, played.ran, played.reused
    report.seconds = round(time.perf_counter() - started, 3)
    log.info(
        "gold on %s: %d tasks, %d verified, %d not verified, %d skipped; %d run, %d reused",
        report.source,
        report.tasks,
        len(report.verified),
        len(report.failed),
        len(report.skipped),
        report.ran,
        report.reused,
    )
    return report


@dataclass(frozen=True)
class Regrade:
    trajectory_id: str
    score: float | None
    same_predictions: bool  # the replayed predictions.csv has the recorded sha256
    detail: str | None

    @property
    def ok(self) -> bool:
        return self.score == 1.0 and self.same_predictions


def regrade(
    ctx: RunContext,
    trajectory: Trajectory,
    task: Task,
    files: Materializer,
    sandbox_factory: SandboxFactory | None = None,
) -> Regrade:
    """Replay `trajectory`'s replies on `task` in a fresh sandbox and grade the predictions they write.

    Trajectories record file checksums, not contents; replaying the recorded code checks both the score and
    that the code, which is what training sees, reproduces the recorded predictions byte for byte.
    """
    recorded = {f.name: f.sha256 for f in trajectory.files}
    output = output_file(task)
    if output not in recorded:
        return Regrade(trajectory.id, None, False, f"the trajectory left no {output} to regrade")
    protocol = protocol_for(trajectory.protocol)
    replies = [
        ChatResult(text=s.content, tool_calls=s.tool_calls, finish_reason="stop")
        for s in trajectory.steps
        if s.role == "assistant"
    ]
    client = GoldClient(
        {protocol.task_prompt(task): replies},
        ScriptEndpoint(trajectory.endpoint, trajectory.model, trajectory.protocol),
    )
    close = None
    if sandbox_factory is None:
        sandbox_factory, close = default_sandbox_factory(ctx, 1, episodes=1)
    try:
        with TemporaryDirectory(prefix="dareforge-regrade-", dir=temp_root()) as tmp:
            public_dir, answers = files(Path(tmp))
            replayed = asyncio.run(
                run_agent(
                    task, public_dir, client, sandbox_factory, answers=answers, sample=trajectory.sample
                )
            )
    finally:
        if close is not None:
            close()
    now = {f.name: f.sha256 for f in replayed.files}
    return Regrade(trajectory.id, replayed.score, now.get(output) == recorded[output], replayed.detail)
