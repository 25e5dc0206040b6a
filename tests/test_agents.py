"""The agent loop and evaluator: the real `openai` client over real HTTP (tests/llm_server.py) and the real
bubblewrap sandbox, on a store holding only the sklearn-iris tasks (two Class-IF, one Class-MM, all in test).

The scripted "model" knows the answers only as a test author does: the IF replies are the task's reference code,
read on the host from the private store; nothing private is ever put where the sandbox can see it.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from dareforge.agents import (
    PASS_BARS,
    EvaluationReport,
    evaluate,
    parse_reply,
    render_table,
    run_agent,
    stored_trajectories,
    trajectory_id,
)
from dareforge.agents import attempts as attempts_module
from dareforge.agents import loop as loop_module
from dareforge.agents.attempts import Attempt, AttemptSettings, Checkpoints, run_attempts, store_task_files
from dareforge.agents.protocol import truncate
from dareforge.config import Config, EndpointConfig, SandboxConfig
from dareforge.context import RunContext
from dareforge.errors import ConfigError, DareforgeError
from dareforge.llm import ChatResult, LLMClient
from dareforge.queries import partition_name
from dareforge.sandbox import Sandbox, SandboxError, probe
from dareforge.schema import Task, TaskLimits, Trajectory
from dareforge.store import Store
from dareforge.trajectories.gold import regrade
from tests.llm_server import Fault, LLMServer, Reply
from tests.stores import copy_iris_release

pytestmark = pytest.mark.skipif(not probe().available, reason=f"no sandbox here: {probe().reason}")

PRIVATE_NAMES = ("answers.csv", "reference_predictions.csv", "reference.py", "spec.json", "strong_")
HIDDEN = tuple(name[::-1] for name in PRIVATE_NAMES)


# -- fixtures -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(iris_release, tmp_path_factory) -> tuple[Config, Path]:
    """An iris-only store with a release (no validation run: every candidate task is released), a copy of the
    session's."""
    root = tmp_path_factory.mktemp("agents")
    return copy_iris_release(iris_release, root), root


@pytest.fixture
def scripted(server) -> LLMServer:
    server.reset()
    server.latency = 0.0
    return server


def make_ctx(built, server: LLMServer | None = None, **endpoint) -> RunContext:
    cfg, _ = built
    cfg = cfg.model_copy(deep=True)
    if server is not None:
        fields = {"name": "scripted", "base_url": server.url, "model": "scripted-model", "backoff_s": 0.01}
        cfg.llm.endpoints = [EndpointConfig(**{**fields, **endpoint})]
    return RunContext(config=cfg, store=Store(cfg.store.root), show_progress=False)


@pytest.fixture(scope="module")
def tasks(built) -> dict[str, Task]:
    ctx = make_ctx(built)
    from dareforge.publish.release import load_release

    return {t.id: t for t in load_release(ctx, "dareforge").tasks()}


def by_family(tasks: dict[str, Task], family: str) -> list[Task]:
    return sorted((t for t in tasks.values() if t.family == family), key=lambda t: t.id)


def public_dir(built, task: Task) -> Path:
    return Path(built[0].store.root) / "tasks" / task.id / "public"


def private_file(built, task: Task, name: str) -> Path:
    return Path(built[0].store.root) / "tasks" / task.id / "private" / name


def reply(code: str | None = None, answer: str | None = None, reasoning: str = "Next step.") -> str:
    text = f"<reasoning>{reasoning}</reasoning>\n"
    if code is not None:
        text += f"<code>\n{code}\n</code>\n"
    if answer is not None:
        text += f"<answer>{answer}</answer>"
    return text


DONE = reply(answer="predictions.csv is written.", reasoning="The predictions are complete.")


def majority_code(task: Task) -> str:
    (target,), keys = task.metric.target_columns, task.metric.key_columns
    return (
        "import pandas as pd\n"
        "train, test = pd.read_csv('train.csv'), pd.read_csv('test.csv')\n"
        f"out = test[{keys!r}].copy()\n"
        f"out[{target!r}] = train[{target!r}].mode()[0]\n"
        "out.to_csv('predictions.csv', index=False)\n"
        "print(len(out), 'rows predicted')"
    )


def look_around(store_root: str) -> str:
    """Code listing what the kernel can see: its folder, the inputs, any file under /task, /tmp or home named
    like a private file (only those, so a checkout under /tmp does not flood the output); and the host store."""
    return (
        "import json, os, sys\n"
        "found = []\n"
        "runtime = tuple(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix))\n"
        "for top in ('/task', '/tmp', os.path.expanduser('~')):\n"
        "    for folder, _, files in os.walk(top):\n"
        "        if os.path.realpath(folder).startswith(runtime):\n"
        "            continue  # the Python runtime, bound read-only (it lives under /tmp in a /tmp checkout)\n"
        # Spelled backwards: the prompts are checked for these names, and this code is part of a prompt.
        f"        found += [os.path.join(folder, f) for f in files if any(n[::-1] in f for n in {HIDDEN!r})]\n"
        "print('LOOK ' + json.dumps({'cwd': sorted(os.listdir('.')), 'input': sorted(os.listdir('/task/input')),\n"
        f"    'found': sorted(found), 'store': os.path.exists({store_root!r})}}))"
    )


def conversations(plans: dict[str, list[str]]):
    """A server script: the task is recognised by its instruction; the reply by how many turns came before."""

    def script(request):
        task_prompt = request.messages[1]["content"]
        for instruction, replies in plans.items():
            if instruction in task_prompt:
                turn = sum(m["role"] == "assistant" for m in request.messages)
                answer = replies[min(turn, len(replies) - 1)]
                return answer(request) if callable(answer) else answer
        return Fault(status=400, message="no script for this task")

    return script


def step(code: str | None = None, answer: str | None = None, reasoning: str = "Next step."):
    """One scripted reply, written in the protocol of the request it answers: tool calls when the request
    offers tools, tags otherwise. The same solution, two protocols."""

    def write(request) -> str | Reply:
        if "tools" not in request.body:
            return reply(code, answer, reasoning)
        calls = [{"name": "python", "arguments": {"code": code}}] if code is not None else []
        calls += [{"name": "submit", "arguments": {"message": answer}}] if answer is not None else []
        return Reply(text=reasoning, tool_calls=tuple(calls))

    return write


# Wall-clock limits only a hung run reaches (agent code runs at `sandbox.nice` 10: on a busy machine a healthy
# kernel may take minutes to start or to run a cell); a test of the time limit passes its own, with an endless loop.
HUNG_S = 3600


def sandboxes(inputs: Path, workspace: Path, seconds: float) -> Sandbox:
    return Sandbox(inputs, workspace, SandboxConfig(), seconds, start_timeout_s=HUNG_S)


def play(built, server, task: Task, *, turns: int = 2, seconds: int = HUNG_S, **endpoint):
    """run_agent on `task` with smaller limits, an uncached client and a cold sandbox."""
    fields = {"name": "direct", "base_url": server.url, "model": "scripted-model", "backoff_s": 0.01}
    client = LLMClient(EndpointConfig(**{**fields, **endpoint}), None)
    task = task.model_copy(update={"limits": TaskLimits(turns=turns, seconds_per_execution=seconds)})
    answers = private_file(
        built, task, "reference_predictions.csv" if task.family.endswith("IF") else "answers.csv"
    )
    return asyncio.run(run_agent(task, public_dir(built, task), client, sandboxes, answers=answers))


# -- the evaluator ----------------------------------------------------------------------------------------------
def test_evaluate_grades_stores_and_is_idempotent(built, tasks, scripted):
    ctx = make_ctx(built, scripted)
    if_tasks, (mm,) = by_family(tasks, "Class-IF"), by_family(tasks, "Class-MM")
    assert len(if_tasks) == 2
    plans = {
        t.instruction.strip(): [reply(private_file(built, t, "reference.py").read_text()), DONE]
        for t in if_tasks
    }
    plans[mm.instruction.strip()] = [reply(look_around(ctx.store.root) + "\n" + majority_code(mm)), DONE]
    scripted.script(conversations(plans))
    scripted.latency = 0.3  # so that concurrent episodes overlap at the server

    report = evaluate(ctx, "scripted", concurrency=3)

    assert (report.ran, report.reused, report.release, report.split) == (3, 0, "dareforge", "test")
    assert scripted.max_in_flight >= 2  # episodes ran concurrently
    by_task = {t.task_id: t for t in report.trajectories}
    for task in if_tasks:  # the reference workflow followed exactly: every prediction matches
        t = by_task[task.id]
        assert (t.outcome, t.score, t.passed) == ("graded", 1.0, True), t.detail
    t = by_task[mm.id]
    assert (
        t.outcome == "graded"
        and t.score is not None
        and t.score < PASS_BARS["Class-MM"]
        and t.passed is False
    )
    cells = report.cells
    assert (cells["Class-IF"].attempts, cells["Class-IF"].pass_rate, cells["Class-IF"].mean_score) == (
        2,
        1.0,
        1.0,
    )
    assert (cells["Class-MM"].attempts, cells["Class-MM"].pass_rate) == (1, 0.0)
    assert cells["total"].attempts == 3 and cells["total"].pass_rate == pytest.approx(2 / 3)
    assert cells["Reg-IF"].attempts == 0 and cells["Reg-IF"].pass_rate is None
    assert report.outcomes["graded"] == 3 and sum(report.outcomes.values()) == 3

    # every message, code cell and output is recorded, with token counts and the files left behind
    steps = t.steps
    assert [s.role for s in steps] == ["system", "user", "assistant", "execution", "user", "assistant"]
    assert "<code>" in steps[0].content and mm.instruction.strip() in steps[1].content
    assert (
        steps[2].code and "mode()" in steps[2].code and steps[2].prompt_tokens and steps[2].completion_tokens
    )
    assert "rows predicted" in steps[3].content and steps[3].seconds > 0 and steps[3].error is None
    assert "rows predicted" in steps[4].content and "4 code runs left" in steps[4].content
    # the observation holds no measured seconds: it is trained on, and timing is noise of the machine
    assert steps[4].content.splitlines()[0] == "Execution 1 of 5 finished."
    assert t.prompt_tokens == sum(s.prompt_tokens or 0 for s in steps) > 0
    assert t.completion_tokens == sum(s.completion_tokens or 0 for s in steps) > 0
    assert [f.name for f in t.files] == ["predictions.csv"] and t.files[0].size > 0
    assert re.fullmatch(r"[0-9a-f]{64}", t.files[0].sha256)
    assert t.id == trajectory_id(mm.id, "scripted", "scripted-model", 0.0, 0)

    # the private answers were never where the agent could see them, nor in any prompt
    look = json.loads(steps[3].content.split("LOOK ", 1)[1].splitlines()[0])
    assert look["cwd"] == ["train.csv", "test.csv"] or sorted(look["cwd"]) == ["test.csv", "train.csv"]
    assert look["input"] == ["test.csv", "train.csv"] and look["store"] is False
    assert not [p for p in look["found"] if any(n in p for n in PRIVATE_NAMES)]
    for task in tasks.values():
        for name in (f.name for f in task.private_files if f.name.endswith(".csv")):
            secret = private_file(built, task, name).read_text()
            assert all(secret not in r.prompt for r in scripted.requests)
    assert all("reference_predictions" not in r.prompt for r in scripted.requests)

    # stored in the trajectories table, one partition per endpoint and release
    partition = partition_name("scripted", "dareforge")
    assert {s.id for s in stored_trajectories(ctx.store, partition)} == set(by_task[k].id for k in by_task)
    rows = ctx.store.connect().sql("select outcome, count(*) from trajectories group by outcome").fetchall()
    assert rows == [("graded", 3)]

    # a second evaluation re-runs nothing and reports the same
    requests = scripted.count
    again = evaluate(ctx, "scripted", concurrency=3)
    assert (again.ran, again.reused, scripted.count) == (0, 3, requests)
    assert again.row() == report.row()

    console = Console(record=True, width=320)
    console.print(render_table([report, again]))
    text = console.export_text()
    for column in ("Class-IF", "Class-MM", "Time-XF", "total", "instruction-non-adherence", "llm-error"):
        assert column in text
    assert "100% · 1.000 (2)" in text and "scripted-model" in text


HOSTILE = {
    # S1: a frame with a bad signature on the kernel's own iopub socket
    "S1": "k = get_ipython().kernel\n"
    "k.iopub_socket.send_multipart([b'x', b'<IDS|MSG>', b'bad', b'{}', b'{}', b'{}', b'{}'])",
    # S2: a FIFO where the predictions go (a blocking open on the host would hang every episode)
    "S2": "import os\nos.mkfifo('predictions.csv')",
    # S4: messages of 20 MB, straight through the kernel's session
    "S4": "k = get_ipython().kernel\n"
    "for _ in range(50):\n"
    "    k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x' * 20_000_000},\n"
    "                   parent=k.get_parent())",
}


def test_one_hostile_episode_in_three_leaves_the_others_as_in_a_clean_run(built, tasks, scripted):
    """Three samples of each task, the third conversation to begin on each task hostile (S1, S2, S4 by task):
    every benign episode is stored and scored as in a clean run, each hostile one is recorded with its
    reason, and the host's memory does not grow with the flood."""
    if_tasks, (mm,) = by_family(tasks, "Class-IF"), by_family(tasks, "Class-MM")
    solutions = {t.instruction.strip(): private_file(built, t, "reference.py").read_text() for t in if_tasks}
    solutions[mm.instruction.strip()] = majority_code(mm)
    patterns = dict(zip(solutions, HOSTILE, strict=True))
    scripted.script(conversations({k: [reply(code), DONE] for k, code in solutions.items()}))
    clean = evaluate(make_ctx(built, scripted, name="clean"), "clean", concurrency=3)
    clean_scores = {t.task_id: t.score for t in clean.trajectories}

    begun: dict[str, int] = {}
    lock = threading.Lock()

    def first_reply(instruction: str):
        def write(request) -> str:
            with lock:
                begun[instruction] = begun.get(instruction, 0) + 1
                hostile = begun[instruction] == 3
            return reply(HOSTILE[patterns[instruction]] if hostile else solutions[instruction])

        return write

    scripted.script(conversations({k: [first_reply(k), DONE] for k in solutions}))
    before = rss_mb()
    reset_peak_rss()
    report = evaluate(make_ctx(built, scripted, name="hostile"), "hostile", samples=3, concurrency=3)
    grown = peak_rss_mb() - before

    assert report.ran == 9 and grown <= 100, f"the host grew {grown:.0f} MB"
    by_task: dict[str, list[Trajectory]] = {}
    for t in report.trajectories:
        by_task.setdefault(t.task_id, []).append(t)
    task_of = {t.instruction.strip(): t.id for t in tasks.values()}
    for instruction, pattern in patterns.items():
        played = by_task[task_of[instruction]]
        benign = [t for t in played if t.outcome == "graded"]
        (hostile,) = [t for t in played if t.outcome != "graded"]
        assert len(benign) == 2 and all(t.score == clean_scores[t.task_id] for t in benign)
        if pattern == "S2":
            # a FIFO is no file: dropped with the tmpfs workspace, refused unopened on a plain one
            assert hostile.outcome == "format-error" and "predictions.csv" in hostile.detail, hostile
            assert any(why in hostile.detail for why in ("was not written", "not a regular file")), hostile
        else:
            execution = next(s for s in hostile.steps if s.role == "execution")
            assert hostile.outcome == "execution-limit" and "KernelProtocolError" in execution.error, hostile
    stored = stored_trajectories(make_ctx(built).store, partition_name("hostile", "dareforge"))
    assert len(stored) == 9


def rss_mb() -> float:
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    return _status_mb("VmHWM")


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def test_checkpoints_write_a_growing_partition_in_linear_rows_and_at_least_every_minute():
    n, rows, saves = 10_000, 0, 0
    plan = Checkpoints(saved_at=0.0)
    for done in range(1, n + 1):
        plan.unsaved += 1
        now = done * 0.001  # ten seconds in all: the share decides, not the clock
        if plan.due(done, now):
            rows, saves = rows + done, saves + 1
            plan.saved(now, now)
    rows += n if plan.unsaved else 0  # the final save
    # A save after every attempt would write n(n+1)/2 = 50 million rows.
    assert rows <= n / plan.share + n and saves < 250
    slow = Checkpoints(saved_at=0.0, unsaved=1)
    assert not slow.due(10_000, 59.0) and slow.due(10_000, 60.0)
    slow.saved(60.0, 64.0)  # that save took 4 s: the next one by time waits 20 times as long
    slow.unsaved = 1
    assert not slow.due(10_000, 64.0 + 79.0) and slow.due(10_000, 64.0 + 80.0)


def test_a_failed_attempt_leaves_the_finished_ones_stored(built, tasks, scripted, monkeypatch):
    ctx = make_ctx(built, scripted)
    if_tasks = by_family(tasks, "Class-IF")
    scripted.script(
        conversations(
            {
                t.instruction.strip(): [reply(private_file(built, t, "reference.py").read_text()), DONE]
                for t in if_tasks
            }
        )
    )
    monkeypatch.setattr(Checkpoints, "due", lambda self, size, now: False)  # the final save only
    writes, write = [], Store.write_records
    monkeypatch.setattr(
        Store, "write_records", lambda self, part, records: writes.append(part) or write(self, part, records)
    )

    finished, play_one = [], attempts_module.run_agent

    async def recorded(*args, **kwargs):
        trajectory = await play_one(*args, **kwargs)
        finished.append(trajectory.id)  # stored in the same step of the event loop, before anything else runs
        return trajectory

    monkeypatch.setattr(attempts_module, "run_agent", recorded)

    def files_gone(tmp: Path):
        # Files are copied in ahead of the conversation: this one waits (not past a far deadline) until the
        # two before it finished, then fails.
        deadline = time.monotonic() + HUNG_S
        while len(finished) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        raise DareforgeError("the task's files are gone")

    # One conversation at a time: both tasks finish before the third attempt fails.
    attempts = [Attempt(t, 0, store_task_files(ctx.store, t)) for t in if_tasks]
    attempts.append(Attempt(if_tasks[0], 1, files_gone))
    client = LLMClient(ctx.config.llm.endpoints[0], None)
    settings = AttemptSettings("checkpoint-test", workers=1, sandbox_factory=sandboxes)
    with pytest.raises(DareforgeError, match="files are gone"):
        run_attempts(ctx, client, attempts, settings)
    assert writes == ["checkpoint-test"]
    stored = ctx.store.read_partition(Trajectory, "checkpoint-test")
    assert sorted(t.task_id for t in stored) == sorted(t.id for t in if_tasks)
    assert {t.outcome for t in stored} == {"graded"}


def test_grading_runs_outside_the_conversation_slot(built, tasks, scripted, monkeypatch):
    """With one conversation at a time, the second attempt's first model call comes while the first attempt is
    still being graded: grading holds no slot. (Held, the second call could not come and the wait would end
    at its far deadline.)"""
    ctx = make_ctx(built, scripted)
    if_tasks = by_family(tasks, "Class-IF")[:2]
    scripted.script(
        conversations(
            {
                t.instruction.strip(): [reply(private_file(built, t, "reference.py").read_text()), DONE]
                for t in if_tasks
            }
        )
    )
    grade, seen, boxes = loop_module.check_predictions, [], []

    def kept(inputs: Path, workspace: Path, seconds: float) -> Sandbox:
        boxes.append(sandboxes(inputs, workspace, seconds))
        return boxes[-1]

    def grade_once_the_next_conversation_began(task, workspace, answers):
        # The episode's own sandbox is closed before its workspace is graded: no agent process can still write.
        mine = [box for box in boxes if box.workspace == Path(workspace).resolve()]
        assert len(mine) == 1 and not mine[0].running
        if not seen:
            deadline = time.monotonic() + HUNG_S
            while len(scripted.requests) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.append(len(scripted.requests))
        return grade(task, workspace, answers)

    monkeypatch.setattr(loop_module, "check_predictions", grade_once_the_next_conversation_began)
    attempts = [Attempt(t, 0, store_task_files(ctx.store, t)) for t in if_tasks]
    client = LLMClient(ctx.config.llm.endpoints[0], None)
    played = run_attempts(
        ctx, client, attempts, AttemptSettings("slot-test", workers=1, sandbox_factory=kept)
    )
    assert seen == [3]
    assert [t.outcome for t in played.trajectories] == ["graded", "graded"]
    assert all(t.passed for t in played.trajectories)


def test_unknown_or_missing_endpoint_names_the_config_key(built, scripted):
    with pytest.raises(ConfigError, match=r"llm\.endpoints"):
        evaluate(make_ctx(built), "anything")
    with pytest.raises(ConfigError, match=r"no endpoint named 'other' under `llm\.endpoints`.*'scripted'"):
        evaluate(make_ctx(built, scripted), "other")


# -- how episodes end -------------------------------------------------------------------------------------------
def test_never_answering_hits_the_turn_limit_and_records_every_message(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    replies = [reply("print('step', 1)"), reply("print('step', 2)"), reply("print('step', 3)")]
    scripted.queue(*replies)
    t = play(built, scripted, mm, turns=2)
    assert t.outcome == "turn-limit" and t.passed is False and t.score is None
    assert "without an answer" in t.detail
    assert [s.role for s in t.steps] == [
        "system", "user",
        "assistant", "execution", "user",
        "assistant", "execution", "user",
        "assistant",
    ]  # fmt: skip
    assistant = [s for s in t.steps if s.role == "assistant"]
    assert [s.content for s in assistant] == replies
    assert [s.content for s in t.steps if s.role == "execution"] == ["[stdout]\nstep 1", "[stdout]\nstep 2"]
    assert "no code runs left" in t.steps[7].content
    # token counts are the server's (whitespace words of the whole prompt, and of the reply)
    assert len(scripted.requests) == 3
    for step, request, text in zip(assistant, scripted.requests, replies, strict=True):
        assert step.prompt_tokens == len(request.prompt.split())
        assert step.completion_tokens == len(text.split())
    assert t.prompt_tokens == sum(len(r.prompt.split()) for r in scripted.requests)
    # the model saw the whole conversation so far on each request
    assert [m["role"] for m in scripted.requests[2].messages] == ["system", "user"] + [
        "assistant",
        "user",
    ] * 2
    assert t.files == []


def test_code_that_raises_is_a_code_error(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    scripted.queue(reply("raise ValueError('boom')"), reply("raise ValueError('boom again')"), DONE)
    t = play(built, scripted, mm, turns=2)
    assert t.outcome == "code-error" and t.passed is False
    executions = [s for s in t.steps if s.role == "execution"]
    assert len(executions) == 2 and executions[-1].error.startswith("ValueError: boom again")
    assert "ValueError" in t.steps[4].content
    assert t.steps[4].content.splitlines()[0] == "Execution 1 of 2 raised an error."


def test_an_endless_loop_hits_the_execution_limit(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    scripted.queue(reply("while True:\n    pass"), DONE)
    t = play(built, scripted, mm, turns=1, seconds=1)
    assert t.outcome == "execution-limit", t.detail
    (execution,) = [s for s in t.steps if s.role == "execution"]
    assert execution.error.startswith("ExecutionLimit") and execution.seconds >= 1
    assert t.steps[4].content.splitlines()[0] == "Execution 1 of 1 was stopped at the time limit (1 s)."


def test_replies_without_code_in_any_form_are_no_code(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    scripted.script("I would train a random forest on the features, then predict.")
    t = play(built, scripted, mm, turns=1)
    assert t.outcome == "no-code" and "no <code> or <answer>" in t.detail, t.detail
    assert [s.role for s in t.steps] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "no <code>...</code> block" in t.steps[3].content
    assert scripted.count == 2  # turns + 1 replies, no sandbox ever started
    assert not any(s.role == "execution" for s in t.steps)


def test_replies_that_drift_after_code_ran_are_a_format_error(built, tasks, scripted):
    """Format drift (code ran, then the replies stopped following the tags) is not "no code at all"."""
    (mm,) = by_family(tasks, "Class-MM")
    scripted.queue(reply("print(len(open('train.csv').readlines()))"), "I will now write the predictions.")
    t = play(built, scripted, mm, turns=1)
    assert t.outcome == "format-error" and "no <code> or <answer>" in t.detail, t.detail


def test_fenced_code_runs_as_code_and_records_its_drift(built, tasks, scripted):
    """SmolLM2-style replies: a ``` fence as the whole reply, then inside a <reasoning> tag left open."""
    (mm,) = by_family(tasks, "Class-MM")
    fenced = f"```python\n{majority_code(mm)}\n```"
    unclosed = "<reasoning>Check the file.\n```python\nprint(open('predictions.csv').readline())\n```"
    scripted.queue(fenced, unclosed, DONE)
    t = play(built, scripted, mm, turns=2)
    assert t.outcome == "graded" and t.score is not None, t.detail
    replies = [s for s in t.steps if s.role == "assistant"]
    assert replies[0].code == majority_code(mm) and replies[1].code.startswith("print(open(")
    assert [s.drift for s in replies] == ["a ``` fence instead of <code> tags"] * 2 + [None]
    executions = [s for s in t.steps if s.role == "execution"]
    assert [s.code for s in executions] == [replies[0].code, replies[1].code]
    assert "rows predicted" in executions[0].content and executions[1].content.startswith("[stdout]")
    observation = t.steps[t.steps.index(executions[0]) + 1]
    assert observation.role == "user" and "write code inside <code>...</code>" in observation.content


def test_answering_at_once_without_code_is_no_code(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    scripted.queue(DONE)
    t = play(built, scripted, mm, turns=2)
    assert t.outcome == "no-code" and "answered without running any code" in t.detail, t.detail
    assert "predictions.csv was not written" in t.detail


def test_answering_without_predictions_is_a_format_error(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    scripted.queue(reply("x = 1"), DONE)
    t = play(built, scripted, mm, turns=2)
    assert t.outcome == "format-error" and "predictions.csv was not written" in t.detail


def test_server_errors_beyond_retries_are_an_llm_error(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    scripted.fail_next(status=500, times=2)
    t = play(built, scripted, mm, max_retries=1)
    assert t.outcome == "llm-error" and t.passed is False and "HTTP 500" in t.detail
    assert [s.role for s in t.steps] == ["system", "user", "assistant"] and t.steps[2].error
    assert scripted.count == 2


def test_if_predictions_off_the_reference_are_instruction_non_adherence(built, tasks, scripted):
    task = by_family(tasks, "Class-IF")[0]
    (target,) = task.metric.target_columns
    code = private_file(built, task, "reference.py").read_text()
    code += (
        "\nout = pd.read_csv('predictions.csv')\n"
        f"out.loc[0, {target!r}] = 'not-a-species'\n"
        "out.to_csv('predictions.csv', index=False)\n"
    )
    scripted.queue(reply(code, answer="predictions.csv is written."))  # code and answer in one reply
    t = play(built, scripted, task, turns=1)
    assert t.outcome == "instruction-non-adherence", t.detail
    assert t.score is not None and 0.5 < t.score < 1.0 and t.passed is False
    assert [s.role for s in t.steps] == ["system", "user", "assistant", "execution"]


def test_a_symlinked_predictions_file_is_not_followed(built, tasks, scripted):
    """Agent code pointing predictions.csv at the answers' host path must not get them graded as its own."""
    (mm,) = by_family(tasks, "Class-MM")
    answers = private_file(built, mm, "answers.csv")
    scripted.queue(reply(f"import os\nos.symlink({str(answers)!r}, 'predictions.csv')"), DONE)
    t = play(built, scripted, mm, turns=1)
    assert t.outcome == "format-error" and "symbolic link" in t.detail
    assert t.files == []


class FakeBox:
    """A sandbox that runs nothing: it records what the engine asked of it."""

    input_path = "/task/input"

    def __init__(self, calls: list[str]):
        self.calls = calls

    def start(self):
        self.calls.append("start")
        return self

    def execute(self, code: str):
        self.calls.append("execute")
        return SimpleNamespace(
            stdout="ok",
            stderr="",
            result="",
            error=None,
            traceback=None,
            timed_out=False,
            killed=False,
            seconds=0.0,
        )

    def close(self) -> None:
        self.calls.append("close")


class OverlapClient:
    """Scripted replies; the first one is held back until the sandbox hand-out has begun (or 60 s passed)."""

    endpoint = SimpleNamespace(name="fake", model="m")

    def __init__(self, handed: threading.Event, *replies: str):
        self.handed, self.replies, self.overlapped = handed, list(replies), None

    async def chat(self, messages, **params):
        if self.overlapped is None:
            self.overlapped = await asyncio.to_thread(self.handed.wait, 60)
        return ChatResult(text=self.replies.pop(0), finish_reason="stop")


def test_the_sandbox_is_handed_out_while_the_first_reply_is_awaited(built, tasks):
    """A pool's hand-out (which may wait for a kernel reset) overlaps the model's latency, not follows it; an
    episode without code gives its sandbox back unstarted."""
    (mm,) = by_family(tasks, "Class-MM")
    for replies, expected in (
        ((reply("print(1)"), DONE), ["start", "execute", "close"]),
        (("No code from me.", DONE), ["close"]),
    ):
        handed, calls = threading.Event(), []

        def factory(inputs, workspace, seconds, handed=handed, calls=calls):
            handed.set()
            return FakeBox(calls)

        client = OverlapClient(handed, *replies)
        t = asyncio.run(run_agent(mm, public_dir(built, mm), client, factory))
        assert client.overlapped is True and calls == expected, (t.outcome, calls)


class BrokenBox(FakeBox):
    """A sandbox whose kernel cannot be brought back: its execute raises, as a failed restart does."""

    def execute(self, code: str):
        self.calls.append("execute")
        raise SandboxError("the kernel died while starting: exited with status 1")


def test_a_sandbox_that_cannot_go_on_ends_its_episode_with_the_reason(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    scripted.script(reply("print(1)"))
    calls: list[str] = []
    client = LLMClient(EndpointConfig(name="direct", base_url=scripted.url, model="m", backoff_s=0.01), None)
    t = asyncio.run(run_agent(mm, public_dir(built, mm), client, lambda *args: BrokenBox(calls)))
    assert calls == ["start", "execute", "close"]
    assert t.outcome == "execution-limit" and t.detail.startswith(
        "the sandbox could not go on: the kernel died"
    )
    assert t.steps[-1].role == "execution" and "exited with status 1" in t.steps[-1].error


# -- the tools protocol ----------------------------------------------------------------------------------------
def test_tags_and_tools_give_the_same_scores_for_the_same_solutions(built, tasks, scripted):
    if_tasks, (mm,) = by_family(tasks, "Class-IF"), by_family(tasks, "Class-MM")
    done = step(answer="predictions.csv is written.", reasoning="The predictions are complete.")
    plans = {
        t.instruction.strip(): [step(private_file(built, t, "reference.py").read_text()), done]
        for t in if_tasks
    }
    plans[mm.instruction.strip()] = [step(majority_code(mm)), done]
    scripted.script(conversations(plans))

    played = {}
    for protocol in ("tags", "tools"):
        ctx = make_ctx(built, scripted, name="two-protocols", protocol=protocol)
        report = evaluate(ctx, "two-protocols", concurrency=2)
        assert report.ran == 3 and {t.protocol for t in report.trajectories} == {protocol}
        played[protocol] = {t.task_id: t for t in report.trajectories}
    scores = {p: {k: (t.outcome, t.score, t.passed) for k, t in ts.items()} for p, ts in played.items()}
    assert scores["tags"] == scores["tools"]
    assert [scores["tools"][t.id] for t in if_tasks] == [("graded", 1.0, True)] * 2
    assert scores["tools"][mm.id][0] == "graded" and scores["tools"][mm.id][1] > 0
    assert not {t.id for t in played["tags"].values()} & {t.id for t in played["tools"].values()}

    # the tools episode: the reply's call, its execution, the `tool` message answering the call by its id
    t = played["tools"][mm.id]
    assert [s.role for s in t.steps] == ["system", "user", "assistant", "execution", "tool", "assistant"]
    call = t.steps[2].tool_calls[0]
    assert (call.name, t.steps[2].code, t.steps[4].tool_call_id) == ("python", majority_code(mm), call.id)
    assert "rows predicted" in t.steps[4].content and "`python`" in t.steps[0].content
    assert "<code>" not in t.steps[0].content and "call `submit`" in t.steps[1].content
    asked = [r for r in scripted.requests if "tools" in r.body]
    assert len(asked) == 6 and all(len(r.body) and "tools" not in r.body for r in scripted.requests[:6])
    assert [tool["function"]["name"] for tool in asked[0].body["tools"]] == ["python", "submit"]
    second = next(r for r in asked if mm.instruction.strip() in r.prompt and len(r.messages) > 2)
    assert [m["role"] for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[2]["tool_calls"][0]["id"] == second.messages[3]["tool_call_id"]


def test_tool_calls_run_in_order_and_an_unreadable_one_is_answered_with_what_is_wrong(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    malformed = '{"code": "print(\'a\')'
    scripted.queue(
        Reply(
            text="Look, then predict.",
            tool_calls=(
                {"name": "python", "arguments": malformed},
                {"name": "python", "arguments": {"code": "print('b')"}},
                {"name": "python", "arguments": {"code": majority_code(mm)}},
            ),
        ),
        Reply(tool_calls=({"name": "submit", "arguments": {"message": "predictions.csv is written."}},)),
    )
    t = play(built, scripted, mm, turns=3, protocol="tools")
    assert t.outcome == "graded" and t.protocol == "tools", t.detail
    roles = [s.role for s in t.steps]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "execution",
        "tool",
        "execution",
        "tool",
        "assistant",
    ]
    calls = t.steps[2].tool_calls
    assert calls[0].arguments == malformed and [s.tool_call_id for s in t.steps if s.role == "tool"] == [
        c.id for c in calls
    ]
    assert "not valid JSON" in t.steps[3].error and malformed in t.steps[3].error
    assert t.steps[3].content.startswith("Not run: ")
    assert t.steps[4].content == "[stdout]\nb"
    assert (
        t.steps[5].content.startswith("Execution 1 of 3 finished.")
        and "2 code runs left" in t.steps[5].content
    )
    second = scripted.requests[1]
    assert [m["role"] for m in second.messages] == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert (
        second.messages[2]["content"] == "Look, then predict." and len(second.messages[2]["tool_calls"]) == 3
    )

    # a tools trajectory replays from its record: the same predictions, graded again
    ctx = make_ctx(built)
    checked = regrade(ctx, t, mm, store_task_files(ctx.store, mm), sandboxes)
    assert checked.same_predictions and checked.score == t.score


def test_only_unreadable_tool_calls_are_a_format_error_with_their_raw_text(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    malformed = '{"code": "import pandas as pd\nprint(pd.read_csv(\'train.csv\').shape)'
    scripted.script(Reply(tool_calls=({"name": "python", "arguments": malformed},)))
    t = play(built, scripted, mm, turns=1, protocol="tools")
    assert t.outcome == "format-error" and "not valid JSON" in t.detail and malformed in t.detail
    assert [s.role for s in t.steps] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert t.steps[2].tool_calls[0].arguments == malformed and malformed in t.steps[3].error
    assert scripted.count == 2 and not any(s.role == "execution" for s in t.steps)


def test_tools_replies_without_a_call_or_with_an_unknown_tool(built, tasks, scripted):
    (mm,) = by_family(tasks, "Class-MM")
    scripted.script("I would fit a random forest.")
    t = play(built, scripted, mm, turns=1, protocol="tools")
    assert t.outcome == "no-code" and "called no tool" in t.detail, t.detail
    assert [s.role for s in t.steps] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "called no tool" in t.steps[3].content
    scripted.reset().script(Reply(tool_calls=({"name": "bash", "arguments": {"cmd": "ls"}},)))
    t = play(built, scripted, mm, turns=1, protocol="tools")
    assert t.outcome == "format-error" and "no tool named 'bash'" in t.detail, t.detail


# -- the tags protocol ------------------------------------------------------------------------------------------
def test_parse_reply():
    p = parse_reply(
        "<reasoning>I will write <code> next</reasoning>\n<code>\n```python\nprint(1)\n```\n</code>"
    )
    assert (p.reasoning, p.code, p.answer, p.drift) == ("I will write <code> next", "print(1)", None, None)
    p = parse_reply("<code>a = 1</code><code>b = 2</code><answer> done </answer>")
    assert (p.code, p.answer, p.extra_code_blocks) == ("a = 1", "done", 1)
    p = parse_reply("<reasoning>cut off</reasoning><code>import pandas as pd\npd.rea")
    assert (p.code, p.drift) == ("import pandas as pd\npd.rea", "a <code> tag left open")
    assert parse_reply("just prose").empty and parse_reply("<code>   </code>").empty


FENCE_DRIFT = "a ``` fence instead of <code> tags"


@pytest.mark.parametrize(
    ("text", "code", "drift"),
    [
        # one rule: without a <code> tag, the first python (or unmarked) fence outside a closed reasoning runs
        ("```python\nprint(1)\n```", "print(1)", FENCE_DRIFT),
        ("I will look first.\n```\nprint(1)\n```\nThen I model.", "print(1)", FENCE_DRIFT),
        ("<reasoning>Look first.\n```py\nprint(1)\n```", "print(1)", FENCE_DRIFT),  # reasoning left open
        ("<answer>\n```python\nprint(1)\n```", "print(1)", FENCE_DRIFT),  # answer left open
        ("```python\nprint(1)", "print(1)", FENCE_DRIFT),  # a fence cut by the token limit
        ("```python\na = 1\n```\n```python\nb = 2\n```", "a = 1", FENCE_DRIFT),
        # inside a <code> tag (closed or open) the fence's content is the code, whatever its label
        ("<code>\nHere it is:\n```py\nprint(1)\n```\n</code>", "print(1)", None),
        ("<code>\n```python\nprint(1)\n```\nThat prints one.", "print(1)", "a <code> tag left open"),
        # not code: a fence that is not Python, one inside a closed reasoning, a reply with a <code> tag
        ("```bash\nls\n```", None, None),
        ("<reasoning>I could run ```python\nprint(1)\n``` later</reasoning>", None, None),
        ("<code>   </code>\n```python\nprint(1)\n```", None, None),
    ],
)
def test_fence_rule(text, code, drift):
    p = parse_reply(text)
    assert (p.code, p.drift) == (code, drift)


def test_a_fence_beside_an_answer_runs_then_answers():
    p = parse_reply("```python\nprint(1)\n```\n<answer>predictions.csv is written.</answer>")
    assert (p.code, p.answer, p.drift) == ("print(1)", "predictions.csv is written.", FENCE_DRIFT)
    assert parse_reply("```python\na = 1\n```\n```python\nb = 2\n```").extra_code_blocks == 1


def test_truncate_keeps_head_and_tail():
    text = "".join(f"line {i}\n" for i in range(5000))
    cut = truncate(text, 1000)
    assert (
        len(cut) < 1100
        and cut.startswith("line 0\n")
        and cut.endswith("line 4999\n")
        and "characters cut" in cut
    )
    assert truncate("short", 1000) == "short"


def test_report_counts_missing_scores_as_zero():
    report = EvaluationReport("e", "m", "r", "v", "test", 1, 0.0, "p", [])
    assert report.cells["total"].attempts == 0 and report.cells["total"].mean_score is None
    assert set(report.outcomes) >= {"graded", "llm-error"} and sum(report.outcomes.values()) == 0
