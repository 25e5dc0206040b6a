"""The agent protocols: how the model is told what it may do, how its replies are read, and how the kernel's
output goes back to it. Two protocols, one engine: everything after a reply is read (sandbox, limits, grading,
the trajectory record and its failure categories) is `dareforge.agents.loop`'s, the same for both.

**tags** (DSGym / DARE-bench style; any chat server). A reply holds `<reasoning>...</reasoning>`, then either
`<code>...</code>` (Python run in a persistent kernel) or `<answer>...</answer>` (the episode ends;
`predictions.csv`, or a question task's `answer.json`, in the working directory is graded). A reply may hold
a last `<code>` block and the `<answer>`: the code runs, then the episode ends. The kernel's output comes back as the next user message,
truncated to `OUTPUT_CHARS`. How a reply is read (`parse_reply`), as one rule:

- tags inside a closed `<reasoning>` never count;
- the code is the first `<code>` block, or a `<code>` left open at the end of the reply (a reply cut by the token
  limit), or, when the reply has no `<code>` tag at all, its first ``` fence marked python (or unmarked), wherever
  it stands: the whole reply, after prose, inside a tag left open;
- where that code text holds a ``` fence, the fence's content is the code (an unclosed fence runs to the end);
- the answer is the last `<answer>`.

A reply read by the fence or open-tag part of the rule runs like any other and records how it strayed
(`Step.drift`); the observation reminds the model of the tags. A reply with nothing to run or answer is a format
error of that turn. So an episode whose replies never held code in any form ends as `no-code`, and one that ran
code and then stopped following the protocol as `format-error` (see `dareforge.agents.loop.classify`).

**tools** (the chat API's native tool calling; the server must support `tools`). The request carries two tools:
`python` (`{"code": str}`, run in the kernel; the output comes back as a `tool` message answering the call) and
`submit`. A prediction task is graded on `predictions.csv`, so its `submit` carries only `{"message": str}`; a
question task's `submit` carries `{"answer": ...}`, typed by the question's answer type (`ANSWER_SCHEMAS`), and
the loop writes it to `answer.json`, which is graded as the tags protocol's is. A reply may hold several calls: they run in order, and `submit` ends the episode at once. A call
whose arguments are not a JSON object of the right shape, or that names no known tool, runs nothing: it is
answered with what is wrong, and recorded with its raw text (`Step.tool_calls`, and the answering `tool`
step's `error`). A reply without any usable call is a format error of that turn, as in tags.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

from dareforge.agents.grading import output_file
from dareforge.errors import ConfigError
from dareforge.families.registry import family_of
from dareforge.schema import Task, ToolCall

OUTPUT_CHARS = 4000
"""Most characters of kernel output sent back to the model (head and tail are kept)."""
MAX_LISTED_COLUMNS = 60


@dataclass(frozen=True)
class TaskKind:
    """The words a prompt uses for a kind of task: a prediction task writes `predictions.csv`, a question task
    (QA, Lake) answers in `answer.json` (tags) or in its `submit` call (tools)."""

    role: str
    files: str
    kept: str
    graded: str
    why: str
    answer_tag: str


PREDICTION = TaskKind(
    role="data scientist solving a tabular machine-learning task",
    files="the task's files (`train.csv`, `test.csv`; they are read-only)",
    kept="variables, imports and fitted models",
    graded="against answers you cannot see",
    why="Why the predictions are complete.",
    answer_tag="One short sentence saying that predictions.csv is written.",
)
QUESTION = TaskKind(
    role="data analyst answering a question about data files",
    files="the task's files (read-only)",
    kept="variables and imports",
    graded='as a JSON object {"answer": <value>} in the format the question asks for',
    why="Why the answer is right.",
    answer_tag="The answer, as written in answer.json.",
)


def task_kind(task: Task) -> TaskKind:
    return QUESTION if family_of(task).asks_question else PREDICTION


SYSTEM_PROMPT = """\
You are an expert {role} by writing and running Python code.

You work in turns. Each reply has this form:

<reasoning>
What you know so far and what you do next.
</reasoning>
<code>
# Python code to run now
</code>

The code runs in a persistent Jupyter kernel ({kept} survive between turns).
Its working directory holds {files} and is where you
write `{output}`. After each <code> block you get its output as the next message: printed text,
warnings, the value of the last expression, or the error's traceback (long output is cut in the middle, so
print summaries, not whole tables).

When `{output}` is written and you have checked it, finish with:

<reasoning>
{why}
</reasoning>
<answer>
{answer_tag}
</answer>

Rules:
- Exactly one <code> block or one <answer> per reply. A reply may end with both: the code runs, then the task ends
  without showing you its output.
- You may run code at most {turns} times; each run may take at most {seconds} seconds and is stopped after that.
- CPU only; no internet; no package installation. pandas, numpy, scipy, scikit-learn and statsmodels are available.
- Only `{output}` in the working directory is graded, {graded}.
"""


@dataclass(frozen=True)
class Parsed:
    """What a tags reply asks for; `code` and `answer` are None when absent. `drift` says how the reply strayed
    from the tags when its code was still read (see the module doc)."""

    reasoning: str | None
    code: str | None
    answer: str | None
    extra_code_blocks: int = 0
    drift: str | None = None

    @property
    def empty(self) -> bool:
        return self.code is None and self.answer is None


_TAG = {
    name: re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL | re.IGNORECASE)
    for name in ("reasoning", "code", "answer")
}
_CODE_TAG = re.compile(r"<code>", re.IGNORECASE)
_OPEN_CODE = re.compile(r"<code>(.*)\Z", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
PYTHON_FENCES = frozenset({"", "python", "py", "python3", "ipython"})
"""Fence labels whose block runs when a reply has no `<code>` tag (an unmarked fence is taken as Python)."""


def _code_in(text: str) -> str:
    """The code of a `<code>` block: its first fence's content when it holds one, else all of it."""
    match = _FENCE.search(text)
    return (match.group(2) if match else text).strip("\n")


def _python_fences(text: str) -> list[str]:
    return [m.group(2).strip("\n") for m in _FENCE.finditer(text) if m.group(1).lower() in PYTHON_FENCES]


def parse_reply(text: str) -> Parsed:
    """The tags of a reply, read by the rule in the module doc."""
    reasoning = [m.strip() for m in _TAG["reasoning"].findall(text)]
    # Tags written inside the reasoning (e.g. "I will write <code> next") must not count as tags.
    outside = _TAG["reasoning"].sub("", text)
    blocks = [_code_in(m) for m in _TAG["code"].findall(outside)]
    answers = [m.strip() for m in _TAG["answer"].findall(outside)]
    drift = None
    if not blocks and not answers and (open_code := _OPEN_CODE.search(outside)):
        blocks, drift = [_code_in(open_code.group(1))], "a <code> tag left open"
    elif not _CODE_TAG.search(outside) and (fenced := _python_fences(outside)):
        blocks, drift = fenced, "a ``` fence instead of <code> tags"
    blocks = [b for b in blocks if b.strip()]
    return Parsed(
        reasoning="\n\n".join(reasoning) or None,
        code=blocks[0] if blocks else None,
        answer=answers[-1] if answers else None,
        extra_code_blocks=max(0, len(blocks) - 1),
        drift=drift if blocks else None,
    )


def system_prompt(task: Task) -> str:
    return _fill(SYSTEM_PROMPT, task)


def _fill(template: str, task: Task, **words: str) -> str:
    kind = task_kind(task)
    return template.format(
        **asdict(kind),
        **words,
        output=output_file(task),
        turns=task.limits.turns,
        seconds=task.limits.seconds_per_execution,
    )


# -- both protocols behind one interface ------------------------------------------------------------------------
@dataclass(frozen=True)
class Action:
    """One thing a reply asks for, in reply order: run `code`, end with `answer`, or nothing (`invalid`: a tool
    call that cannot be read; `text` says why). `call_id` is the tool call it answers (tools protocol)."""

    kind: Literal["code", "answer", "invalid"]
    text: str
    call_id: str | None = None
    submitted: str | None = None
    """A `submit` call's typed answer, as JSON text (question tasks, tools protocol): the loop writes it to
    `answer.json`, which is then graded like one the agent's code wrote."""


@dataclass(frozen=True)
class Reading:
    """A reply as a protocol reads it: the message that goes back into the conversation, its actions in order,
    its tool calls as sent, how it strayed (tags), how many code blocks were ignored (tags), and, when nothing
    in it can run or answer, what the turn's format error is."""

    message: dict[str, Any]
    actions: tuple[Action, ...]
    tool_calls: tuple[ToolCall, ...] = ()
    drift: str | None = None
    ignored: int = 0
    problem: str | None = None

    @property
    def code(self) -> str | None:
        return next((a.text for a in self.actions if a.kind == "code"), None)

    @property
    def usable(self) -> bool:
        return any(a.kind != "invalid" for a in self.actions)


class AgentProtocol(Protocol):
    """What the engine asks of a protocol: the prompts, the request's extra parameters, how a reply is read, how an
    action's result goes back, the observation's notes about a reply, the nudge after a reply with nothing usable,
    and the words for "finish now"."""

    name: str
    finish_now: str

    def system_prompt(self, task: Task) -> str: ...

    def task_prompt(self, task: Task) -> str: ...

    def chat_params(self, task: Task) -> dict[str, Any]: ...

    def read(self, result: Any) -> Reading: ...

    def answer(self, action: Action, text: str) -> dict[str, Any]: ...

    def notes(self, reading: Reading) -> list[str]: ...

    def nudge(self, task: Task, reading: Reading, finish_reason: str | None) -> list[dict[str, Any]]: ...


def _cut_note(finish_reason: str | None) -> str:
    return (
        " Your reply was cut at the token limit; keep replies shorter." if finish_reason == "length" else ""
    )


class TagsProtocol:
    """`<reasoning>`, `<code>` and `<answer>` in the reply text; observations come back as user messages."""

    name = "tags"
    finish_now = "reply with <answer>"

    def system_prompt(self, task: Task) -> str:
        return system_prompt(task)

    def task_prompt(self, task: Task) -> str:
        return task_prompt(task)

    def chat_params(self, task: Task) -> dict[str, Any]:
        return {}

    def read(self, result: Any) -> Reading:
        text = result.text or ""
        parsed = parse_reply(text)
        actions = []
        if parsed.code is not None:
            actions.append(Action("code", parsed.code))
        if parsed.answer is not None:
            actions.append(Action("answer", parsed.answer))
        return Reading(
            message={"role": "assistant", "content": text},
            actions=tuple(actions),
            drift=parsed.drift,
            ignored=parsed.extra_code_blocks,
            problem=None if actions else "the last reply had no <code> or <answer> tag",
        )

    def answer(self, action: Action, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def notes(self, reading: Reading) -> list[str]:
        """Lines the observation of a reply's code adds about the reply itself."""
        lines = []
        if reading.drift:
            lines.append(f"Your code was read from {reading.drift}; write code inside <code>...</code>.")
        if reading.ignored:
            lines.append(
                f"Only the first <code> block ran; {reading.ignored} more were ignored (one per reply)."
            )
        return lines

    def nudge(self, task: Task, reading: Reading, finish_reason: str | None) -> list[dict[str, Any]]:
        """The messages after a reply with nothing usable."""
        return [
            {
                "role": "user",
                "content": "Your reply had no <code>...</code> block and no <answer>...</answer>, so nothing ran."
                f"{_cut_note(finish_reason)} Reply with <reasoning>...</reasoning> followed by either "
                f"<code>...</code> (Python to run) or <answer>...</answer> once {output_file(task)} is written.",
            }
        ]


TOOLS_SYSTEM_PROMPT = """\
You are an expert {role} by writing and running Python code.

You have two tools:
- `python` runs code in a persistent Jupyter kernel ({kept} survive between calls)
  and returns its output: printed text, warnings, the value of the last expression, or the error's traceback
  (long output is cut in the middle, so print summaries, not whole tables).
- `submit` ends the task, {submit_when}.

The kernel's working directory holds {files} and is where
you {writes}. In each reply, say briefly what you know so far and what you do next, then call a tool.

Rules:
- You may run code at most {turns} times; each run may take at most {seconds} seconds and is stopped after that.
- Calls in one reply run in order; `submit` ends the task at once.
- CPU only; no internet; no package installation. pandas, numpy, scipy, scikit-learn and statsmodels are available.
- Only {graded_tools}.
"""

PYTHON_TOOL = "python"
SUBMIT_TOOL = "submit"

ANSWER_SCHEMAS: dict[str, dict[str, Any]] = {
    "string_exact": {"type": "string"},
    "string_approximate": {"type": "string"},
    "numeric_exact": {"type": "number"},
    "numeric_approximate": {"type": "number"},
    "list_exact": {"type": "array", "items": {"type": ["string", "number"]}},
    "list_approximate": {"type": "array", "items": {"type": ["string", "number"]}},
    "boolean": {"type": "boolean"},
}
"""The JSON schema of a `submit` call's answer, by the question's answer type (KramaBench's types)."""


def _tools_words(task: Task) -> dict[str, str]:
    if family_of(task).asks_question:
        return {
            "submit_when": "with your answer in the format the question asks for (it is written to `answer.json`)",
            "writes": "may write files",
            "graded_tools": "the answer given to `submit` is graded (as `answer.json`)",
        }
    return {
        "submit_when": "once `predictions.csv` is written and you have checked it",
        "writes": "write `predictions.csv`",
        "graded_tools": "`predictions.csv` in the working directory is graded, against answers you cannot see",
    }


def _submit_parameters(task: Task) -> dict[str, Any]:
    if family_of(task).asks_question:
        answer = dict(ANSWER_SCHEMAS[task.metric.answer_type or "string_exact"])
        answer["description"] = "The answer to the question, in the format it asks for."
        return {"type": "object", "properties": {"answer": answer}, "required": ["answer"]}
    return {
        "type": "object",
        "properties": {
            "message": {
                "type": "string",
                "description": "One short sentence saying that predictions.csv is written.",
            }
        },
        "required": ["message"],
    }


def tool_schemas(task: Task) -> list[dict[str, Any]]:
    """The `tools` of a request for `task`, in the chat API's shape; a question task's `submit` takes the answer,
    typed by the question's answer type."""
    done = (
        "give the answer"
        if family_of(task).asks_question
        else "predictions.csv is written in the working directory and checked"
    )
    return [
        {
            "type": "function",
            "function": {
                "name": PYTHON_TOOL,
                "description": "Run Python code in the task's persistent Jupyter kernel and return its output "
                f"(at most {task.limits.seconds_per_execution} seconds per run).",
                "parameters": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "description": "Python code to run now."}},
                    "required": ["code"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": SUBMIT_TOOL,
                "description": f"End the task: {done}.",
                "parameters": _submit_parameters(task),
            },
        },
    ]


class ToolsProtocol:
    """The chat API's tool calls (`python`, `submit`); observations come back as `tool` messages."""

    name = "tools"
    finish_now = "call `submit`"

    def system_prompt(self, task: Task) -> str:
        return _fill(TOOLS_SYSTEM_PROMPT, task, **_tools_words(task))

    def task_prompt(self, task: Task) -> str:
        if family_of(task).asks_question:
            return _task_prompt(
                task, "Call `submit` with the answer; it is written to `answer.json` and graded."
            )
        return _task_prompt(
            task, f"Write `{output_file(task)}` in the working directory, then call `submit`."
        )

    def chat_params(self, task: Task) -> dict[str, Any]:
        return {"tools": tool_schemas(task)}

    def read(self, result: Any) -> Reading:
        text = result.text or ""
        calls = tuple(getattr(result, "tool_calls", None) or ())
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [call_message(c) for c in calls]
        actions = tuple(read_call(c) for c in calls)
        problem = None
        if not calls:
            problem = "the last reply called no tool"
        elif not any(a.kind != "invalid" for a in actions):
            problem = f"the last reply's calls could not be read: {actions[-1].text}"
        return Reading(message=message, actions=actions, tool_calls=calls, problem=problem)

    def answer(self, action: Action, text: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": action.call_id, "content": text}

    def notes(self, reading: Reading) -> list[str]:
        return []

    def nudge(self, task: Task, reading: Reading, finish_reason: str | None) -> list[dict[str, Any]]:
        if reading.actions:  # unreadable calls: each is answered with what is wrong, which is the nudge
            return []
        return [
            {
                "role": "user",
                "content": f"Your reply called no tool, so nothing ran.{_cut_note(finish_reason)} Call `python` "
                f"to run code, or `submit` {_tools_words(task)['submit_when']}.",
            }
        ]


MAX_SHOWN_ARGUMENTS = 300
"""Most characters of a malformed call's raw arguments quoted in its error (the step keeps all of them)."""


def call_message(call: ToolCall) -> dict[str, Any]:
    """A tool call in the chat API's shape (as it goes back in the assistant message)."""
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def read_call(call: ToolCall) -> Action:
    """What one tool call asks for; a call that cannot be read is `invalid`, saying why and quoting its text."""
    raw = call.arguments
    shown = raw if len(raw) <= MAX_SHOWN_ARGUMENTS else raw[:MAX_SHOWN_ARGUMENTS] + "..."
    where = f"call {call.id} to `{call.name}`"

    def invalid(why: str) -> Action:
        return Action("invalid", f"{where}: {why}; its arguments were: {shown}", call.id)

    if call.name not in (PYTHON_TOOL, SUBMIT_TOOL):
        return Action(
            "invalid",
            f"call {call.id}: there is no tool named {call.name!r} (the tools are `python` and `submit`); "
            f"its arguments were: {shown}",
            call.id,
        )
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        return invalid(f"the arguments are not valid JSON ({exc.args[0]})")
    if not isinstance(args, dict):
        return invalid(f"the arguments are a JSON {type(args).__name__}, not an object")
    if call.name == PYTHON_TOOL:
        code = args.get("code")
        if not isinstance(code, str) or not code.strip():
            return invalid('the arguments have no "code" string')
        return Action("code", code, call.id)
    if "answer" in args:
        submitted = json.dumps(args["answer"], ensure_ascii=False)
        return Action("answer", submitted, call.id, submitted=submitted)
    message = args.get("message", "")
    return Action("answer", message if isinstance(message, str) else json.dumps(message), call.id)


PROTOCOLS: dict[str, AgentProtocol] = {"tags": TagsProtocol(), "tools": ToolsProtocol()}


def protocol_for(name: str) -> AgentProtocol:
    """The protocol named by an endpoint's `protocol` setting."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ConfigError(
            f"agent protocol {name!r} is unknown; set `protocol` of the endpoint under `llm.endpoints` to one "
            f"of {', '.join(PROTOCOLS)}"
        ) from None


def task_prompt(task: Task) -> str:
    """The tags protocol's first user message."""
    return _task_prompt(
        task, f"Write `{output_file(task)}` in the working directory, then finish with <answer>."
    )


def _task_prompt(task: Task, finish: str) -> str:
    """The first user message: the instruction, what the working directory holds (no private facts), and how
    to finish."""
    lines = [task.instruction.strip(), "", "Files in the working directory:"]
    for f in sorted(task.public_files, key=lambda f: f.name):
        line = f"- `{f.name}` ({_size(f.size)}"
        if f.rows is not None:
            line += f", {f.rows} data lines"
        line += ")"
        if f.columns:
            shown = ", ".join(f.columns[:MAX_LISTED_COLUMNS])
            more = len(f.columns) - MAX_LISTED_COLUMNS
            line += f"; columns: {shown}" + (f" and {more} more" if more > 0 else "")
        lines.append(line)
    lines += ["", finish]
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def truncate(text: str, limit: int = OUTPUT_CHARS) -> str:
    """Keep the head and the tail of long output, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[-tail:]}"
