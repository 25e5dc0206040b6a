"""A trajectory as a training chat, in either protocol's form, whichever protocol played it.

`chat_form(trajectory, task, "tags")` is the plain form: `{role, content}` messages whose assistant turns hold
`<reasoning>`, then `<code>` or `<answer>`, and whose user turns after the first carry the code's output.
`chat_form(trajectory, task, "tools")` is the tool-calling form of chat APIs and trainers (TRL's SFTTrainer
renders it with the model's chat template and the `tools` schema): assistant turns with `tool_calls`
(`{id, type: "function", function: {name, arguments}}`, arguments as JSON text, as the chat API sends them)
and `tool` turns (`tool_call_id`) carrying the output. Chat templates want the arguments as a mapping: the SFT
export's `tools` config (`dareforge.exports.sft.tool_chat`) decodes them.

A trajectory in the form of the protocol that played it is the conversation the model saw, as recorded.
In the other form it is converted, turn by turn:

- the system and task prompts are the target protocol's (as `dareforge.agents.protocol` writes them for the task);
- tags -> tools: a reply's `<reasoning>` becomes the assistant content and its code and answer a `python` and a
  `submit` call (ids `call_<reply>_<n>`); the observation of its code becomes the `tool` turn answering the
  python call, without the lines that only concern tags (drift, ignored blocks) and with the tools wording of
  "no code runs left"; a reply with nothing to run stays a plain reply followed by the tools protocol's nudge;
- tools -> tags: the reverse, for trajectories whose replies each hold at most one `python` call, before any
  `submit`, and no unreadable call; any other has no plain form (`NoPlainForm`), since a tags reply runs one
  block only.

Either way the trajectory's `execution` steps are left out (the turn after each already tells what ran),
replies that carry an LLM error end the chat, and turns after the last assistant reply are dropped: nothing
learns from them. `check_chat` refuses a chat whose turns are out of order.
"""

from __future__ import annotations

import json
from typing import Any

from dareforge.agents.protocol import (
    PYTHON_TOOL,
    SUBMIT_TOOL,
    Action,
    AgentProtocol,
    Reading,
    TagsProtocol,
    ToolsProtocol,
    parse_reply,
    protocol_for,
    read_call,
)
from dareforge.exports import ExportError
from dareforge.schema import Step, Task, Trajectory

CUT_NOTE = "Your reply was cut at the token limit"


class NoPlainForm(ExportError):
    """A tools trajectory that a tags chat cannot express (several code calls in one reply, unreadable calls)."""


def chat_form(trajectory: Trajectory, task: Task | None, form: str) -> list[dict[str, Any]]:
    """The training chat of `trajectory` in `form` (`tags` or `tools`); see the module doc. `task` is needed
    only to convert (for the target protocol's prompts)."""
    target = protocol_for(form)
    if form == trajectory.protocol:
        messages = _recorded(trajectory)
    else:
        if task is None:
            raise ExportError(f"trajectory {trajectory.id}: converting it to the {form} form needs its task")
        messages = _converted(trajectory, task, protocol_for(trajectory.protocol), target)
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()
    if not any(m["role"] == "assistant" for m in messages):
        raise ExportError(
            f"trajectory {trajectory.id} has no assistant reply (outcome {trajectory.outcome}); leave it out of "
            "the SFT export"
        )
    check_chat(messages, trajectory.id)
    return messages


def _recorded(trajectory: Trajectory) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for step in trajectory.steps:
        if step.role == "assistant" and step.error is not None:
            break  # an LLM error: no model output, and nothing after it was said
        if step.role == "execution":
            continue
        message: dict[str, Any] = {"role": step.role, "content": step.content}
        if step.tool_calls:
            message["tool_calls"] = [_call(c.id, c.name, c.arguments) for c in step.tool_calls]
        if step.tool_call_id is not None:
            message["tool_call_id"] = step.tool_call_id
        messages.append(message)
    return messages


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _converted(
    trajectory: Trajectory,
    task: Task,
    source: AgentProtocol,
    target: AgentProtocol,
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": target.system_prompt(task)},
        {"role": "user", "content": target.task_prompt(task)},
    ]
    replies = 0
    reading: Reading | None = None
    calls: dict[str | None, str] = {}  # source call id (None: the tags code) -> target call id
    for step in trajectory.steps[2:]:
        if step.role == "assistant":
            if step.error is not None:
                break
            replies += 1
            reading = _reading(source, step)
            message, calls = _reply(trajectory, reading, target, replies)
            messages.append(message)
        elif step.role in ("user", "tool") and reading is not None:
            answered = step.tool_call_id if step.role == "tool" else None
            if not reading.usable:  # a nudge after a reply with nothing to run
                cut = "length" if CUT_NOTE in step.content else None
                messages += target.nudge(Reading(message={}, actions=()), cut)[:1]
                reading = None  # one nudge per reply, in the target's words
                continue
            text = _adapted(step.content, source, target, reading)
            action = Action("code", "", calls.get(answered))
            messages.append(target.answer(action, text))
    return messages


def _reading(source: AgentProtocol, step: Step) -> Reading:
    if isinstance(source, TagsProtocol):
        return source.read(_Text(step.content))
    actions = tuple(read_call(c) for c in step.tool_calls)
    return Reading(message={"role": "assistant", "content": step.content}, actions=actions)


class _Text:
    """A recorded reply as the protocols read one."""

    def __init__(self, text: str):
        self.text = text
        self.tool_calls = []


def _reply(
    trajectory: Trajectory, reading: Reading, target: AgentProtocol, number: int
) -> tuple[dict[str, Any], dict[str | None, str]]:
    """The assistant message of one reply in the target form, and how its source call ids map to the target's."""
    content = reading.message["content"]
    if isinstance(target, ToolsProtocol):
        # A reply with nothing to run is kept whole: it is what the nudge after it answers.
        said = (parse_reply(content).reasoning or "") if reading.usable else content
        message: dict[str, Any] = {"role": "assistant", "content": said}
        calls = {}
        tool_calls = []
        for index, action in enumerate(a for a in reading.actions if a.kind != "invalid"):
            call_id = f"call_{number}_{index}"
            if action.kind == "code":
                tool_calls.append(_call(call_id, PYTHON_TOOL, json.dumps({"code": action.text})))
                calls[None] = call_id
            else:
                tool_calls.append(_call(call_id, SUBMIT_TOOL, json.dumps({"message": action.text})))
        if tool_calls:
            message["tool_calls"] = tool_calls
        return message, calls
    kinds = [a.kind for a in reading.actions]
    if "invalid" in kinds or kinds.count("code") > 1 or (kinds[-1:] == ["code"] and "answer" in kinds):
        raise NoPlainForm(
            f"trajectory {trajectory.id}: reply {number} holds {', '.join(kinds)}; a tags reply runs one "
            "code block, then may answer"
        )
    text = f"<reasoning>\n{content.strip()}\n</reasoning>"
    code = next((a for a in reading.actions if a.kind == "code"), None)
    answer = next((a for a in reading.actions if a.kind == "answer"), None)
    if code is not None:
        text += f"\n<code>\n{code.text.rstrip()}\n</code>"
    if answer is not None:
        text += f"\n<answer>\n{answer.text.strip()}\n</answer>"
    return {"role": "assistant", "content": text}, {}  # tags answers name no call


def _adapted(text: str, source: AgentProtocol, target: AgentProtocol, reading: Reading) -> str:
    """An observation in the target's words: the source's notes about the reply dropped, the last line's
    protocol wording swapped."""
    notes = set(source.notes(reading))
    lines = [line for line in text.split("\n") if line not in notes]
    last = f"You have no code runs left: {source.finish_now} now."
    if lines and lines[-1] == last:
        lines[-1] = f"You have no code runs left: {target.finish_now} now."
    return "\n".join(lines)


def check_chat(messages: list[dict[str, Any]], label: str = "chat") -> None:
    """Refuse a chat whose turns are out of order: system first (optional), then user; an assistant reply after
    every user turn and after the answers to its calls; `tool` turns only right after the reply whose calls
    they answer, by id, each once; a reply's calls all answered before the next turn (the last reply's may go
    unanswered: the episode ended there); and the chat ends with an assistant reply."""

    def fail(index: int, why: str) -> None:
        raise ExportError(
            f"{label}: turn {index} ({messages[index]['role']}) {why}; the chat is out of order"
        )

    if not messages:
        raise ExportError(f"{label}: the chat is empty")
    expect_user = True
    pending: list[str] = []  # call ids of the last reply still unanswered
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "system":
            if index != 0:
                fail(index, "is not the first turn")
            continue
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                fail(
                    index, f"answers call {call_id!r}, which the reply before it did not make or was answered"
                )
            pending.remove(call_id)
            continue
        if pending:
            fail(index, f"comes before calls {', '.join(pending)} were answered")
        if role == "user":
            if not expect_user:
                fail(index, "follows a user turn: the assistant reply is missing")
            expect_user = False
        elif role == "assistant":
            if expect_user:
                fail(index, "has no user turn before it")
            pending = [c["id"] for c in message.get("tool_calls") or ()]
            expect_user = not pending
        else:
            fail(index, "has an unknown role")
    if messages[-1]["role"] != "assistant":
        fail(len(messages) - 1, "ends the chat: a training chat ends with an assistant reply")
