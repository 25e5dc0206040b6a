"""The agent loop: a model, a persistent sandboxed kernel, and the task's turn and time limits.

`run_agent` plays one episode and returns the full `Trajectory`: every message (system, user, assistant), every
code cell with its output, error and timing, token counts, the files left in the workspace and how it ended.

The protocol (`tags` or `tools`, the endpoint's `protocol` setting; see `dareforge.agents.protocol`) says how the
model is prompted, how a reply is read into actions (run code, answer, or an unreadable tool call) and how the
output goes back; everything else here is the same for both.

Budgets (from `Task.limits`, as the instruction states them): at most `turns` code executions, each at most
`seconds_per_execution` seconds; the model gets `turns + 1` replies, so it can still answer after its last run.
A reply with nothing usable uses a reply (the model is told the protocol again), not an execution. A reply's
actions run in order; a code action that finds the executions spent ends the episode (`turn-limit`), and an
answer ends it at once (nothing more is sent to the model, so the output of code in the same reply is recorded
but not shown).

How an episode ends, in order of precedence (see `classify`):

- `llm-error`: the client returned an error (after its own retries); nothing is graded.
- a valid `predictions.csv` (a question task's `answer.json`; the grader accepts it): `graded` with its score, or, for an IF task whose
  predictions do not all match the reference run, `instruction-non-adherence`. Predictions written before the
  turns ran out count even without an `<answer>` (the detail says so).
- `no-code`: no code ever ran and no reply even tried (no code in any form the protocol reads, no tool call that
  could not be read), whether or not the model answered: the detail says what the last reply lacked. A model
  that tried but wrote unreadable calls drifted from the protocol: `format-error`.
- otherwise the last thing that went wrong: `execution-limit` (the last execution timed out or the kernel died),
  `code-error` (the last execution raised), `format-error` (the last reply, or tool call, could not be read),
  then `turn-limit` (turns ran out without an answer), else `format-error` (answered, but predictions.csv is
  missing or ill-formed: the grader's message is the detail).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dareforge.agents.grading import PASS_BARS, grade_predictions, output_file, passed
from dareforge.agents.protocol import Action, AgentProtocol, protocol_for, truncate
from dareforge.families.registry import family_of
from dareforge.hashing import sha256_bytes, sha256_file
from dareforge.reference_solutions.graders import GradeResult
from dareforge.reference_solutions.submission_files import MAX_PREDICTIONS_BYTES, copy_regular_file
from dareforge.sandbox.environment import SandboxFactory
from dareforge.schema import SourceFile, Step, Task, Trajectory
from dareforge.scratch import temp_root

log = logging.getLogger(__name__)

MAX_LISTED_FILES = 200
"""Most workspace files a trajectory lists (the rest are counted in the detail)."""
MAX_WALKED_FILES = 100_000


class ChatClient(Protocol):
    """What the loop needs of `dareforge.llm.LLMClient`."""

    endpoint: Any

    async def chat(self, messages: list[dict[str, Any]], **params: Any) -> Any: ...


def trajectory_id(
    task_id: str,
    endpoint: str,
    model: str,
    temperature: float,
    sample: int,
    kind: str = "",
    protocol: str = "tags",
) -> str:
    key = f"{task_id}\0{endpoint}\0{model}\0{float(temperature)!r}\0{int(sample)}"
    if kind:  # plain evaluation keeps the ids it always had
        key += f"\0{kind}"
    if protocol != "tags":  # and so do tags episodes
        key += f"\0protocol={protocol}"
    return sha256_bytes(key.encode())[:16]


def endpoint_protocol(endpoint: Any) -> str:
    """The protocol an endpoint speaks (`tags` for script endpoints that say none)."""
    return getattr(endpoint, "protocol", None) or "tags"


@dataclass
class Episode:
    """What happened, before grading."""

    steps: list[Step] = field(default_factory=list)
    ended: str = "turn-limit"  # answer | turn-limit | llm-error | sandbox-failed
    last_problem: str | None = None  # execution-limit | code-error | format-error | None (last event fine)
    format_problem: str | None = None  # what the last format error was, in the protocol's words
    unreadable_calls: int = 0  # tool calls that asked for something but could not be read
    llm_error: str | None = None
    sandbox_error: str | None = None  # why the sandbox could not go on (ended: sandbox-failed)
    executions: int = 0
    answer: str | None = None


async def run_agent(
    task: Task,
    public_dir: Path,
    client: ChatClient,
    sandbox_factory: SandboxFactory,
    *,
    temperature: float = 0.0,
    sample: int = 0,
    answers: Path | None = None,
    workspace: Path | None = None,
    pass_bars: Mapping[str, float] = PASS_BARS,
    max_tokens: int | None = None,
    executor: Executor | None = None,
    kind: str = "",
    conversation: contextlib.AbstractAsyncContextManager[Any] | None = None,
) -> Trajectory:
    """Play one episode of `task` and grade it (when `answers`, a host path to the private answers, is given).

    `public_dir` holds the task's public files; they are copied into a fresh inputs folder the sandbox sees
    read-only. `workspace` (default: a temporary folder, removed afterwards) is the kernel's writable working
    directory. Blocking sandbox calls run in `executor` (default: asyncio's). `kind` tells ways of playing the same
    task apart in the trajectory id (see `dareforge.agents.attempts`). Without `answers` nothing is
    scored: valid-looking predictions give outcome `graded` with no score. `conversation` (a caller's
    concurrency slot) is held only while the model and the sandbox are in use: copying the files in, closing
    the sandbox, listing the workspace and grading run outside it, so they overlap other episodes' model calls
    instead of delaying the next episode. The trajectory's `seconds` count from when the conversation begins.
    """
    endpoint = getattr(client.endpoint, "name", str(client.endpoint))
    model = getattr(client.endpoint, "model", "")
    protocol = protocol_for(endpoint_protocol(client.endpoint))
    with tempfile.TemporaryDirectory(prefix="dareforge-agent-", dir=temp_root()) as tmp:
        root = Path(tmp)
        inputs = root / "inputs"
        inputs.mkdir()
        for f in task.public_files:
            shutil.copyfile(public_dir / f.name, inputs / f.name)
            (inputs / f.name).chmod(0o444)
        work = workspace if workspace is not None else root / "workspace"
        work.mkdir(parents=True, exist_ok=True)
        # The sandbox closes on leaving `closing`: after the conversation's slot, before anything reads the
        # workspace (no agent process is left to write into it while it is listed and graded).
        async with contextlib.AsyncExitStack() as closing, conversation or contextlib.nullcontext():
            started = time.monotonic()
            episode = await play(
                task,
                inputs,
                work,
                client,
                sandbox_factory,
                temperature,
                sample,
                max_tokens,
                executor,
                protocol,
                closing,
            )
        # Off the event loop: hashing files and grading would stall every other episode's replies meanwhile.
        loop = asyncio.get_running_loop()
        public = {f.name for f in task.public_files}
        files, unlisted = await loop.run_in_executor(executor, list_files, work, public)
        grade = None
        if episode.ended != "llm-error":
            grade = await loop.run_in_executor(executor, check_predictions, task, work, answers)
    outcome, score, ok, detail = classify(task, episode, grade, answers is not None, pass_bars)
    if unlisted:
        detail = (
            f"{detail}; {unlisted} more workspace files not listed" if detail else f"{unlisted} more files"
        )
    return Trajectory(
        id=trajectory_id(task.id, endpoint, model, temperature, sample, kind, protocol.name),
        task_id=task.id,
        family=task.family,
        endpoint=endpoint,
        model=model,
        sample=sample,
        temperature=float(temperature),
        protocol=protocol.name,
        steps=episode.steps,
        files=files,
        outcome=outcome,
        score=score,
        passed=ok,
        detail=detail,
        prompt_tokens=sum(s.prompt_tokens or 0 for s in episode.steps),
        completion_tokens=sum(s.completion_tokens or 0 for s in episode.steps),
        seconds=round(time.monotonic() - started, 3),
    )


async def play(
    task: Task,
    inputs: Path,
    workspace: Path,
    client: ChatClient,
    sandbox_factory: SandboxFactory,
    temperature: float,
    sample: int,
    max_tokens: int | None,
    executor: Executor | None,
    protocol: AgentProtocol,
    closing: contextlib.AsyncExitStack,
) -> Episode:
    """The conversation itself; the sandbox is handed out at once and started at the first code action, and
    closed when `closing` unwinds."""
    loop = asyncio.get_running_loop()
    episode = Episode()
    limits = task.limits
    messages: list[dict[str, Any]] = []
    params = protocol.chat_params(task)

    def say(message: dict[str, Any], error: str | None = None) -> None:
        messages.append(message)
        episode.steps.append(_message_step(message, error))

    say({"role": "system", "content": protocol.system_prompt(task)})
    say({"role": "user", "content": protocol.task_prompt(task)})
    # The sandbox is handed out while the first reply is awaited (a pool's hand-out may wait for a kernel to be
    # reset; that wait then overlaps the model's latency instead of following it). It is started at the first
    # code action (a no-op for a pooled kernel), so an episode without code starts no cold kernel; a pooled one
    # it has been handed is spent all the same (a pool discards every kernel it hands out): the price of not
    # waiting for kernels, paid only by models that never run code.
    handing_out = loop.run_in_executor(
        executor, _hand_out, sandbox_factory, inputs, workspace, float(limits.seconds_per_execution)
    )
    sandbox: Any = None
    try:
        for _ in range(limits.turns + 1):
            asked = time.monotonic()
            result = await client.chat(
                messages, temperature=temperature, max_tokens=max_tokens, n_sample=sample, **params
            )
            seconds = round(time.monotonic() - asked, 3)
            if result.error is not None:
                episode.steps.append(
                    Step(role="assistant", content=result.text or "", error=result.error, seconds=seconds)
                )
                episode.ended, episode.llm_error = "llm-error", result.error
                return episode
            reading = protocol.read(result)
            episode.steps.append(
                Step(
                    role="assistant",
                    content=reading.message["content"],
                    code=reading.code,
                    seconds=seconds,
                    prompt_tokens=result.prompt_tokens,
                    completion_tokens=result.completion_tokens,
                    tool_calls=list(reading.tool_calls),
                    drift=reading.drift,
                )
            )
            messages.append(reading.message)
            if not reading.usable:
                episode.last_problem, episode.format_problem = "format-error", reading.problem
                episode.unreadable_calls += len(reading.actions)
                for action in reading.actions:
                    say(protocol.answer(action, _not_run(action)), error=action.text)
                for message in protocol.nudge(task, reading, result.finish_reason):
                    say(message)
                continue
            # What the actions record, in order; messages (the answers to them) go out only if the episode
            # goes on, so an answer drops them: they are no part of a conversation that ended.
            pending: list[tuple[Step, dict[str, Any] | None]] = []
            notes = protocol.notes(reading)  # about the reply: told once, with its first code's output
            for action in reading.actions:
                if action.kind == "invalid":
                    episode.last_problem, episode.format_problem = "format-error", action.text
                    episode.unreadable_calls += 1
                    message = protocol.answer(action, _not_run(action))
                    pending.append((_message_step(message, action.text), message))
                elif action.kind == "answer":
                    episode.steps += [step for step, message in pending if message is None]
                    episode.ended, episode.answer = "answer", action.text
                    if action.submitted is not None and family_of(task).asks_question:
                        if sandbox is None:
                            # The workspace is the sandbox's once handed out (a pool mounts its own there):
                            # write after, not under it. The hand-out is awaited on the way out anyway.
                            with contextlib.suppress(Exception):  # the way out says nothing of a failed one
                                sandbox = await handing_out
                        # Off the event loop, though the write never blocks: the path is the agent's.
                        await loop.run_in_executor(
                            executor, write_submitted, workspace / output_file(task), action.submitted
                        )
                    return episode
                else:
                    if episode.executions >= limits.turns:
                        episode.steps += [step for step, message in pending if message is None]
                        episode.ended = "turn-limit"
                        return episode
                    if sandbox is None:
                        sandbox = await handing_out
                        await loop.run_in_executor(executor, sandbox.start)
                    try:
                        execution = await loop.run_in_executor(executor, sandbox.execute, action.text)
                    except Exception as exc:
                        # Execute survives whatever the code does; a sandbox that cannot go on (its fresh
                        # kernel would not start) ends this episode, never the run; logged whole, in case
                        # the host is at fault.
                        log.exception("episode of task %s: the sandbox could not go on", task.id)
                        episode.steps += [step for step, message in pending if message is None]
                        episode.steps.append(
                            Step(role="execution", content="", code=action.text, error=str(exc))
                        )
                        episode.executions += 1
                        episode.ended, episode.last_problem = "sandbox-failed", "execution-limit"
                        episode.sandbox_error = f"the sandbox could not go on: {exc}"
                        return episode
                    episode.executions += 1
                    pending.append((_execution_step(action.text, execution), None))
                    episode.last_problem = _problem(execution)
                    text = _observation(
                        execution,
                        episode.executions,
                        limits.turns,
                        limits.seconds_per_execution,
                        notes,
                        protocol.finish_now,
                    )
                    notes = []
                    message = protocol.answer(action, text)
                    pending.append((_message_step(message), message))
            for step, message in pending:
                episode.steps.append(step)
                if message is not None:
                    messages.append(message)
        episode.ended = "turn-limit"
        return episode
    finally:
        if sandbox is None:
            # Never needed: a sandbox that could not be had does not fail an episode that ran no code.
            try:
                sandbox = await handing_out
            except Exception:
                sandbox = None
        if sandbox is not None:
            closing.push_async_callback(loop.run_in_executor, executor, sandbox.close)


def _hand_out(factory: SandboxFactory, inputs: Path, workspace: Path, seconds: float) -> Any:
    """A sandbox from the factory (which may block: a pool handing over a kernel), with the inputs linked into
    its workspace; the links go in after the hand-over, since a pool needs an empty workspace."""
    sandbox = factory(inputs, workspace, seconds)
    link_inputs(sandbox, inputs, workspace)
    return sandbox


def _message_step(message: dict[str, Any], error: str | None = None) -> Step:
    return Step(
        role=message["role"],
        content=message["content"],
        tool_call_id=message.get("tool_call_id"),
        error=error,
    )


def _not_run(action: Action) -> str:
    return (
        f'Not run: {action.text}. Call `python` with a JSON object like {{"code": "print(1)"}}, or '
        '`submit` with {"message": "..."}.'
    )


def link_inputs(sandbox: Any, inputs: Path, workspace: Path) -> None:
    """Make the read-only inputs appear in the kernel's working directory as symlinks to where the sandbox
    mounts them (`Sandbox.input_path`; the host folder for a sandbox without one)."""
    target = str(getattr(sandbox, "input_path", inputs))
    for path in sorted(inputs.iterdir()):
        link = workspace / path.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(f"{target}/{path.name}")


def _problem(execution: Any) -> str | None:
    if execution.timed_out or execution.killed:
        return "execution-limit"
    if execution.error is not None:
        return "code-error"
    return None


def _output_text(execution: Any) -> str:
    parts = []
    for name in ("stdout", "stderr", "result"):
        text = getattr(execution, name, "") or ""
        if text.strip():
            parts.append(f"[{name}]\n{text.rstrip()}")
    if execution.error is not None:
        parts.append(f"[error]\n{(execution.traceback or execution.error).rstrip()}")
    written = [f for f in getattr(execution, "files_written", ()) or () if not f.startswith(".")]
    if written:
        shown = ", ".join(written[:20]) + (f" and {len(written) - 20} more" if len(written) > 20 else "")
        parts.append(f"[files written] {shown}")
    return "\n".join(parts)


def _execution_step(code: str, execution: Any) -> Step:
    error = None
    if execution.error is not None:
        error = execution.error if not execution.traceback else f"{execution.error}\n{execution.traceback}"
    return Step(
        role="execution", content=_output_text(execution), code=code, error=error, seconds=execution.seconds
    )


def _observation(
    execution: Any, done: int, turns: int, limit_seconds: int, notes: list[str], finish_now: str
) -> str:
    """What the model is told after an execution. It holds no measured seconds: this text is recorded and
    becomes training data, and a wall-clock figure is noise of the machine that ran it (the same code would
    teach other text on each run). The execution step keeps the measurement."""
    if execution.timed_out:
        head = f"Execution {done} of {turns} was stopped at the time limit ({limit_seconds} s)."
    elif execution.killed:
        head = f"Execution {done} of {turns}: the kernel died ({execution.error})."
    elif execution.error is not None:
        head = f"Execution {done} of {turns} raised an error."
    else:
        head = f"Execution {done} of {turns} finished."
    lines = [head]
    if getattr(execution, "restarted", False):
        lines.append(
            "The kernel was restarted: files in the working directory remain, but variables and imports are gone."
        )
    lines += notes
    output = _output_text(execution)
    lines.append(truncate(output) if output else "(no output)")
    left = turns - done
    if left > 0:
        lines.append(f"You have {left} code run{'s' if left != 1 else ''} left.")
    else:
        lines.append(f"You have no code runs left: {finish_now} now.")
    return "\n".join(lines)


def check_predictions(task: Task, workspace: Path, answers: Path | None) -> GradeResult | None:
    """Grade the workspace's predictions.csv (a question task's answer.json). It is first copied out with
    O_NOFOLLOW to a host-only folder, so a symlink (to the answers, say), a FIFO or an oversized file planted by
    agent code is refused, not read."""
    output = output_file(task)
    with tempfile.TemporaryDirectory(prefix="dareforge-grade-", dir=temp_root()) as tmp:
        copy = Path(tmp) / output
        try:
            copy_regular_file(workspace / output, copy, MAX_PREDICTIONS_BYTES)
        except FileNotFoundError:
            return GradeResult(score=0.0, error=f"{output} was not written in the working directory")
        except OSError as exc:
            kind = "JSON" if family_of(task).asks_question else "CSV"
            return GradeResult(
                score=0.0, error=f"{output} could not be read: {exc}; write a regular {kind} file"
            )
        if answers is None:
            return GradeResult(score=float("nan"), error=None)
        return grade_predictions(task, copy, answers)


def write_submitted(path: Path, answer_json: str) -> None:
    """Write a `submit` call's answer as `{"answer": ...}` to `path`, replacing whatever agent code left there.

    The answer goes to a fresh file renamed over the path: a symlink, FIFO or device planted there is replaced,
    never opened (a FIFO opened for writing would block until a reader came). A folder planted there stays, and
    the grader then says answer.json is no file."""
    data = f'{{"answer": {answer_json}}}'.encode()
    fd, tmp = tempfile.mkstemp(prefix=".answer-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def classify(
    task: Task,
    episode: Episode,
    grade: GradeResult | None,
    scored: bool,
    pass_bars: Mapping[str, float] = PASS_BARS,
) -> tuple[str, float | None, bool | None, str | None]:
    """(outcome, score, passed, detail) of an episode; see the module docstring for the precedence."""
    if episode.ended == "llm-error":
        return "llm-error", None, False, episode.llm_error
    unanswered = "" if episode.ended == "answer" else "; no <answer> was given"
    if grade is not None and grade.ok:
        if not scored:
            return "graded", None, None, f"predictions written, not scored (no answers given){unanswered}"
        ok = passed(task, grade.score, pass_bars)
        if family_of(task).exact and grade.score < 1.0:
            detail = f"{grade.score:.4f} of predictions match the reference run{unanswered}"
            return "instruction-non-adherence", grade.score, False, detail
        graded_on = f"({grade.method})" if family_of(task).asks_question else f"on {grade.rows} rows"
        return "graded", grade.score, ok, f"score {grade.score:.4f} {graded_on}{unanswered}"
    why = grade.error if grade is not None else None
    if episode.executions == 0 and not episode.unreadable_calls:
        parts = ["no code ran"]
        if episode.format_problem:
            parts.append(episode.format_problem)
        if episode.ended == "answer":
            parts.append("the model answered without running any code")
        if why:
            parts.append(why)
        return "no-code", None, False, "; ".join(parts)
    if episode.last_problem is not None:
        last = {
            "execution-limit": episode.sandbox_error
            or "the last execution hit the time limit or the kernel died",
            "code-error": "the last execution raised an error",
            "format-error": episode.format_problem or "the last reply could not be read",
        }[episode.last_problem]
        return episode.last_problem, None, False, f"{last}; {why}" if why else last
    if episode.ended == "turn-limit":
        detail = f"turns ran out after {episode.executions} executions without an answer"
        return "turn-limit", None, False, f"{detail}; {why}" if why else detail
    return "format-error", None, False, why or f"{output_file(task)} is missing or ill-formed"


def list_files(workspace: Path, exclude: set[str] = frozenset()) -> tuple[list[SourceFile], int]:
    """Regular files under the workspace (not following symlinks), sorted; and how many were left unlisted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(workspace, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".ipython") and d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(workspace).as_posix()
            if rel in exclude:
                continue
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode):
                continue
            found.append((rel, path, info.st_size))
            if len(found) >= MAX_WALKED_FILES:
                break
        if len(found) >= MAX_WALKED_FILES:
            break
    found.sort()
    listed = [
        SourceFile(name=rel, size=size, sha256=sha256_file(path))
        for rel, path, size in found[:MAX_LISTED_FILES]
    ]
    return listed, max(0, len(found) - MAX_LISTED_FILES)
