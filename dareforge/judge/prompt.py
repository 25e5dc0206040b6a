"""What the judge reads and how its reply is parsed: DSGym's six criteria, a 1-5 rubric, a bounded transcript.

The judge sees only public facts: the task as the agent got it (instruction, public files, metric, limits),
the agent's replies and code, the kernel's outputs, and the execution verdict (outcome, score, passed),
which is what "answer plausibility" may lean on. Never the private answers, the reference predictions or
code, nor the grader's detail line: that line is computed against the answers and may quote them.

The reply must be one JSON object with the six criteria as integers from 1 to 5 and a "rationale" string.
`parse_reply` is strict (every criterion present, whole numbers in range) and raises `MalformedReply` naming
the problem, which the caller sends back to the judge as a correction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from dareforge.agents.protocol import protocol_for, read_call, truncate
from dareforge.schema import Step, Task, ToolCall, Trajectory


class Criterion(NamedTuple):
    field: str  # the Judgement field that stores its score
    title: str
    question: str
    low: str  # what earns a 1
    high: str  # what earns a 5


CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "query_clarity",
        "Query clarity and feasibility",
        "Is the task stated clearly enough to act on, and can it be solved with the given files and limits?",
        "ambiguous or contradictory, or impossible with what the agent is given",
        "unambiguous, with every requirement (target, metric, output format) solvable as stated",
    ),
    Criterion(
        "educational_value",
        "Educational value",
        "Would a model trained on this trajectory learn sound data-science practice from it?",
        "teaches bad habits (guessing, copying outputs blindly, ignoring errors)",
        "a clear, well-reasoned worked example worth imitating",
    ),
    Criterion(
        "exploratory_competence",
        "Exploratory competence",
        "Does the agent inspect the data (shapes, types, missing values, target distribution) before "
        "modelling, and use what it finds?",
        "no look at the data, or findings ignored",
        "focused exploration whose findings visibly shape the later steps",
    ),
    Criterion(
        "execution_robustness",
        "Execution robustness",
        "Does the code run without avoidable errors, are errors diagnosed and fixed, and are outputs "
        "checked?",
        "repeated crashes, unexplained retries, or unchecked outputs",
        "code that runs cleanly, with errors (if any) understood and fixed, and the output verified",
    ),
    Criterion(
        "task_alignment",
        "Task alignment",
        "Does the work do what the instruction asks (required steps, metric, output format), without "
        "shortcuts or unrequested changes?",
        "ignores or contradicts the instruction",
        "follows every requirement of the instruction",
    ),
    Criterion(
        "answer_plausibility",
        "Answer plausibility",
        "Is the final answer plausible given the evidence in the transcript and the execution verdict?",
        "no answer, or one the transcript and verdict contradict",
        "an answer fully supported by the transcript and the verdict",
    ),
)
CRITERION_FIELDS: tuple[str, ...] = tuple(c.field for c in CRITERIA)

TRANSCRIPT_CHARS = 16_000
"""Budget of the transcript in the prompt, in characters: about 4-5k tokens, so prompt and reply fit 8k."""
BLOCK_LIMITS = (4000, 1500, 600)
"""Per-step character limits tried in turn until the transcript fits; middle steps are cut after that."""
RATIONALE_CHARS = 4000

OUTCOME_MEANING = {
    "graded": "the grader accepted predictions.csv and scored it",
    "instruction-non-adherence": "predictions differ from the instructed workflow's reference run",
    "code-error": "the last execution raised an error",
    "execution-limit": "the last execution hit the time limit or the kernel died",
    "turn-limit": "the code runs ran out without an answer",
    "format-error": "after code ran, the reply format or predictions.csv was unusable",
    "no-code": "no reply held code to run, and no predictions were written",
    "llm-error": "the agent's model endpoint failed",
}

SYSTEM_PROMPT = """\
You are a strict reviewer of data-science agent trajectories, deciding which are good enough to train other
models on. You get a task, the execution verdict of the agent's submission, and the agent's transcript
(its replies with reasoning and code, and the kernel's outputs). Score the trajectory on each criterion
from 1 (worst) to 5 (best); 3 means acceptable with clear flaws.

{criteria}

Reply with one JSON object and nothing else:
{example}
Every criterion is a whole number from 1 to 5; "rationale" is a short paragraph justifying the scores."""


class MalformedReply(ValueError):
    """A judge reply that is not a usable JSON verdict; the message says what is wrong."""


class Scores(NamedTuple):
    criteria: dict[str, int]
    rationale: str

    @property
    def overall(self) -> float:
        return sum(self.criteria.values()) / len(self.criteria)


def system_prompt() -> str:
    criteria = "\n".join(
        f"- {c.field} ({c.title}): {c.question} 1 = {c.low}; 5 = {c.high}." for c in CRITERIA
    )
    # Placeholders, not numbers: an example score would anchor a weak judge to it.
    example = "{" + ", ".join([*(f'"{f}": <1-5>' for f in CRITERION_FIELDS), '"rationale": "<why>"']) + "}"
    return SYSTEM_PROMPT.format(criteria=criteria, example=example)


def build_messages(
    trajectory: Trajectory, task: Task | None, budget: int = TRANSCRIPT_CHARS
) -> list[dict[str, str]]:
    """The judge's first request for one trajectory (see the module doc for what goes in)."""
    sections = [
        "## Task, as given to the agent",
        _task_text(trajectory, task),
        "## Execution verdict",
        _verdict_text(trajectory, task),
        "## Transcript",
        render_transcript(trajectory.steps, budget),
        "Score the trajectory now: one JSON object, nothing else.",
    ]
    return [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": "\n\n".join(sections)},
    ]


def correction(problem: str) -> str:
    """The user message that follows a malformed reply (a new message, so the cache asks the model again)."""
    fields = ", ".join(f'"{f}"' for f in CRITERION_FIELDS)
    return (
        f"Your reply could not be used: {problem}. Reply again with only a JSON object holding {fields} "
        '(each a whole number from 1 to 5) and "rationale" (a string), with no other text.'
    )


_FENCE = re.compile(r"\A```[A-Za-z]*\s*\n(.*?)\n?```\Z", re.DOTALL)


def parse_reply(text: str) -> Scores:
    """The scores in a judge reply; `MalformedReply` says what is wrong. One ```json fence is tolerated."""
    body = text.strip()
    if match := _FENCE.match(body):
        body = match.group(1).strip()
    if not body:
        raise MalformedReply("the reply is empty")
    try:
        data: Any = json.loads(body)
    except ValueError as exc:
        raise MalformedReply(f"the reply is not JSON ({exc.args[0]}): {body[:80]!r}") from None
    if not isinstance(data, dict):
        raise MalformedReply(f"the reply is JSON {type(data).__name__}, not an object")
    missing = [f for f in CRITERION_FIELDS if f not in data]
    if missing:
        raise MalformedReply(f"missing criteria {', '.join(missing)}")
    criteria: dict[str, int] = {}
    for field in CRITERION_FIELDS:
        value = data[field]
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise MalformedReply(f"{field} is {value!r}, not a whole number from 1 to 5")
        if not 1 <= value <= 5:
            raise MalformedReply(f"{field} is {value!r}, outside 1 to 5")
        criteria[field] = int(value)
    rationale = data.get("rationale")
    if not isinstance(rationale, str):
        raise MalformedReply(f'"rationale" is {type(rationale).__name__}, not a string')
    return Scores(criteria, rationale.strip()[:RATIONALE_CHARS])


def _task_text(trajectory: Trajectory, task: Task | None) -> str:
    if task is not None:
        limits = task.limits
        return (
            f"{protocol_for(trajectory.protocol).task_prompt(task)}\n\nFamily: {task.family}. Metric: {task.metric.name}. Limits: "
            f"{limits.turns} code runs of at most {limits.seconds_per_execution} s each."
        )
    # A task no longer in the store: the first user message is what the agent was told.
    first = next((s.content for s in trajectory.steps if s.role == "user"), None)
    return first or f"(task {trajectory.task_id}: its instruction is not in the store)"


def _verdict_text(trajectory: Trajectory, task: Task | None) -> str:
    outcome = trajectory.outcome
    score = "none" if trajectory.score is None else f"{trajectory.score:.4f}"
    if task is not None and trajectory.score is not None:
        score += f" ({task.metric.name})"
    passed = {True: "yes", False: "no", None: "not graded"}[trajectory.passed]
    runs = sum(1 for s in trajectory.steps if s.role == "execution")
    allowed = f" of {task.limits.turns} allowed" if task is not None else ""
    return "\n".join(
        [
            f"outcome: {outcome} ({OUTCOME_MEANING.get(outcome, 'see the transcript')})",
            f"score: {score}",
            f"passed the task's bar: {passed}",
            f"code runs: {runs}{allowed}; wall time {trajectory.seconds:.1f} s",
        ]
    )


def render_transcript(steps: Sequence[Step], budget: int = TRANSCRIPT_CHARS) -> str:
    """Replies, code and outputs as labelled blocks, within `budget` characters.

    The system prompt and the first user message (the task, shown on its own) are left out, and so are the
    observations that only repeat an execution's output to the agent. Long blocks keep their head and tail;
    when even short blocks do not fit, the first and last steps stay and the middle ones are cut.
    """
    shown = _blocks(steps)
    if not shown:
        return "(the agent made no reply)"
    blocks: list[str] = []
    for limit in BLOCK_LIMITS:
        blocks = [f"[{label}]\n{truncate(text, limit)}" for label, text in shown]
        text = "\n\n".join(blocks)
        if len(text) <= budget:
            return text
    return _cut_middle(blocks, budget)


def _blocks(steps: Sequence[Step]) -> list[tuple[str, str]]:
    blocks: list[tuple[str, str]] = []
    seen_task = False
    replies = runs = 0
    for index, step in enumerate(steps):
        if step.role == "system":
            continue
        if step.role in ("user", "tool"):
            if step.role == "user" and not seen_task:
                seen_task = True
            elif index == 0 or steps[index - 1].role != "execution":
                blocks.append(("environment", step.content))
            # else: the observation only echoes the execution block just shown
        elif step.role == "assistant":
            replies += 1
            text = step.content
            if step.tool_calls:
                text = "\n".join([text, *(_call_text(c) for c in step.tool_calls)]).strip()
            elif step.code and step.code not in text:
                text = f"{text}\n```python\n{step.code}\n```".strip()
            if step.error:
                text = f"{text}\n(error: {step.error})".strip()
            blocks.append((f"assistant reply {replies}", text or "(empty reply)"))
        elif step.role == "execution":
            runs += 1
            seconds = f", {step.seconds:.1f} s" if step.seconds is not None else ""
            failed = ", raised an error" if step.error else ""
            blocks.append((f"execution {runs}{seconds}{failed}", step.content or step.error or "(no output)"))
    return blocks


def _call_text(call: ToolCall) -> str:
    action = read_call(call)
    if action.kind == "code":
        return f"(calls `{call.name}`)\n```python\n{action.text}\n```"
    if action.kind == "answer":
        return f"(calls `{call.name}`: {action.text})"
    return f"(an unreadable call: {action.text})"


def _cut_middle(blocks: list[str], budget: int) -> str:
    half = budget // 2
    head: list[str] = []
    used = 0
    for block in blocks:
        if used + len(block) > half and head:
            break
        head.append(block[:half])
        used += len(head[-1]) + 2
    tail: list[str] = []
    used = 0
    for block in reversed(blocks[len(head) :]):
        if used + len(block) > half and tail:
            break
        tail.insert(0, block[-half:])
        used += len(tail[0]) + 2
    cut = len(blocks) - len(head) - len(tail)
    middle = [f"[... {cut} steps cut to fit the judge's budget ...]"] if cut else []
    return "\n\n".join([*head, *middle, *tail])
