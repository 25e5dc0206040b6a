"""The LLM judge: the real `openai` client over HTTP against the scripted server (tests/llm_server.py).

Trajectories are built as records (no sandbox needed) and stored in a `sampled--...` partition, beside a task
record and its private files; a marker value planted only in the private answers (and in the grader's detail,
which is computed against them) must never reach the judge.
"""

from __future__ import annotations

import json

import pytest

from dareforge.agents.protocol import task_prompt
from dareforge.config import Config, EndpointConfig
from dareforge.context import RunContext
from dareforge.errors import ConfigError
from dareforge.judge import (
    CRITERION_FIELDS,
    JUDGE_VERSION,
    JudgeError,
    MalformedReply,
    judge_trajectories,
    judgement_partition,
    parse_reply,
)
from dareforge.judge.prompt import render_transcript
from dareforge.schema import Judgement, MetricSpec, SourceFile, Step, Task, Trajectory
from dareforge.store import Store
from tests.llm_server import Fault, LLMServer

SECRET = "SECRET-ANSWER-7731"
PARTITION = "sampled--agent--dareforge"
INSTRUCTION = "Predict the species column of test.csv with a model of your choice; macro-F1 is the metric."
SCORES = dict(
    query_clarity=5,
    educational_value=4,
    exploratory_competence=3,
    execution_robustness=4,
    task_alignment=5,
    answer_plausibility=2,
)


def verdict(rationale: str = "Clear task, careful work.", **overrides) -> str:
    return json.dumps({**SCORES, **overrides, "rationale": rationale})


def make_task(task_id: str = "task-a") -> Task:
    def file(name: str, columns: list[str]) -> SourceFile:
        return SourceFile(name=name, size=1200, sha256="0" * 64, columns=columns, rows=30)

    return Task(
        id=task_id,
        family="Class-MM",
        source_id="builtin.test",
        source_version="v1",
        prepared_version="p1",
        generator_version="g1",
        seed=1,
        instruction=INSTRUCTION,
        public_files=[file("train.csv", ["id", "x", "species"]), file("test.csv", ["id", "x"])],
        private_files=[file("answers.csv", ["id", "species"])],
        metric=MetricSpec(name="macro-f1", target_columns=["species"], key_columns=["id"]),
        package_versions=["pandas==2.2.0"],
    )


def make_trajectory(task: Task, tag: str, outcome: str = "graded", passed: bool = True) -> Trajectory:
    """An episode whose code and output carry `tag`, so a prompt can be traced back to its trajectory."""
    code = f"import pandas as pd\nprint('{tag}', pd.read_csv('train.csv').shape)"
    output = f"[stdout]\n{tag} (30, 3)"
    return Trajectory(
        id=f"traj-{tag}",
        task_id=task.id,
        family=task.family,
        endpoint="agent",
        model="agent-model",
        steps=[
            Step(role="system", content="You are an expert data scientist."),
            Step(role="user", content=task_prompt(task)),
            Step(
                role="assistant",
                content=f"<reasoning>Look first.</reasoning>\n<code>\n{code}\n</code>",
                code=code,
            ),
            Step(role="execution", content=output, code=code, seconds=0.4),
            Step(
                role="user",
                content=f"Execution 1 of 5 finished in 0.4 s.\n{output}\nYou have 4 code runs left.",
            ),
            Step(
                role="assistant",
                content="<reasoning>Done.</reasoning>\n<answer>predictions.csv is written.</answer>",
            ),
        ],
        outcome=outcome,
        score=0.9 if passed else 0.1,
        passed=passed,
        detail=f"grader compared against answers: {SECRET}",
        seconds=3.5,
    )


@pytest.fixture
def scripted(server) -> LLMServer:
    server.reset().script(verdict())
    server.latency = 0.0
    return server


def make_ctx(tmp_path, server: LLMServer, **endpoint) -> RunContext:
    cfg = Config()
    cfg.store.root = str(tmp_path / "store")
    cfg.store.work_dir = str(tmp_path / "work")
    fields = {"name": "judge", "base_url": server.url, "model": "judge-model", "backoff_s": 0.001}
    cfg.llm.endpoints = [EndpointConfig(**{**fields, **endpoint})]
    cfg.judge.endpoint = "judge"
    return RunContext(config=cfg, store=Store(cfg.store.root), show_progress=False)


def stage(ctx: RunContext, *tags: str, partition: str = PARTITION, **kwargs) -> list[Trajectory]:
    """Store the task (public record, private files holding SECRET) and one trajectory per tag."""
    task = make_task()
    ctx.store.write_records(task.source_id, [task])
    for name in ("answers.csv", "reference_predictions.csv"):
        ctx.store.write_bytes(f"tasks/{task.id}/private/{name}", f"id,species\n1,{SECRET}\n".encode())
    trajectories = [make_trajectory(task, tag, **kwargs) for tag in tags]
    ctx.store.write_records(partition, trajectories)
    return trajectories


def stored(ctx: RunContext) -> list[Judgement]:
    return ctx.store.read_partition(Judgement, judgement_partition("judge", PARTITION))


# -- judging ----------------------------------------------------------------------------------------------------
def test_valid_replies_are_scored_per_trajectory_and_stored(tmp_path, scripted):
    ctx = make_ctx(tmp_path, scripted)
    stage(ctx, "alpha", "beta")
    scripted.on("alpha", verdict("alpha is fine")).on("beta", verdict("beta is weak", answer_plausibility=1))
    report = judge_trajectories(ctx)

    assert report.judged == 2 and report.reused == 0 and report.statuses == {"scored": 2}
    assert report.partitions == {PARTITION: "judge--sampled--agent--dareforge"}
    by_id = {j.trajectory_id: j for j in stored(ctx)}
    assert by_id == {j.trajectory_id: j for j in report.judgements}
    alpha, beta = by_id["traj-alpha"], by_id["traj-beta"]
    assert {f: getattr(alpha, f) for f in CRITERION_FIELDS} == SCORES
    assert alpha.overall == pytest.approx(sum(SCORES.values()) / 6)
    assert (alpha.rationale, alpha.status, alpha.attempts, alpha.detail) == (
        "alpha is fine",
        "scored",
        1,
        None,
    )
    assert (alpha.judge_endpoint, alpha.judge_model, alpha.judge_version) == (
        "judge",
        "judge-model",
        JUDGE_VERSION,
    )
    assert alpha.task_id == "task-a"
    assert beta.answer_plausibility == 1 and beta.rationale == "beta is weak"
    assert beta.overall == pytest.approx((sum(SCORES.values()) - 1) / 6)
    request = scripted.requests[0]
    assert request.params["response_format"] == {"type": "json_object"}
    assert request.params["temperature"] == 0.0 and request.params["max_tokens"] == 1024


def test_prompt_holds_instruction_transcript_and_verdict_but_nothing_private(tmp_path, scripted):
    ctx = make_ctx(tmp_path, scripted)
    stage(ctx, "gamma")
    scripted.script(verdict())
    judge_trajectories(ctx)
    (request,) = scripted.requests
    system, user = request.messages
    for field in CRITERION_FIELDS:
        assert field in system["content"]
    prompt = user["content"]
    assert INSTRUCTION in prompt and "macro-f1" in prompt
    assert "print('gamma', pd.read_csv('train.csv').shape)" in prompt  # the code
    assert "gamma (30, 3)" in prompt  # its output
    assert prompt.count("gamma (30, 3)") == 1  # the observation echoing it is not repeated
    assert "predictions.csv is written" in prompt  # the final reply
    assert (
        "outcome: graded" in prompt and "score: 0.9000" in prompt and "passed the task's bar: yes" in prompt
    )
    assert SECRET not in json.dumps(request.body)


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("I think it is a 4 overall.", "not JSON"),
        (
            json.dumps({k: v for k, v in SCORES.items() if k != "task_alignment"} | {"rationale": "x"}),
            "missing",
        ),
        (verdict(exploratory_competence=6), "outside 1 to 5"),
        (verdict(execution_robustness=3.5), "not a whole number"),
        (json.dumps({**SCORES, "rationale": 7}), "rationale"),
    ],
)
def test_malformed_reply_is_retried_with_a_correction(tmp_path, scripted, bad, problem):
    ctx = make_ctx(tmp_path, scripted)
    stage(ctx, "delta")
    # The first request (system + task) gets the bad reply; a retry carries it back with a correction.
    scripted.script(lambda request: bad if len(request.messages) == 2 else verdict())
    (judgement,) = judge_trajectories(ctx).judgements
    assert judgement.status == "scored" and judgement.attempts == 2
    assert judgement.query_clarity == 5
    first, second = scripted.requests
    assert second.messages[:2] == first.messages
    assert second.messages[2] == {"role": "assistant", "content": bad}
    assert second.messages[3]["role"] == "user" and problem in second.messages[3]["content"]


def test_always_malformed_is_recorded_not_raised_and_final(tmp_path, scripted):
    ctx = make_ctx(tmp_path, scripted)
    ctx.config.judge.max_attempts = 3
    stage(ctx, "epsilon")
    scripted.script("no JSON here")
    report = judge_trajectories(ctx)
    (judgement,) = report.judgements
    assert judgement.status == "malformed" and judgement.attempts == 3 and scripted.count == 3
    assert judgement.overall is None and judgement.query_clarity is None
    assert "reply 1: the reply is not JSON" in judgement.detail and "reply 3:" in judgement.detail
    assert stored(ctx) == [judgement]
    again = judge_trajectories(ctx)  # malformed is a final verdict: no new request
    assert scripted.count == 3 and again.judged == 0 and again.reused == 1


def test_server_errors_give_llm_error_and_are_retried_next_run(tmp_path, scripted):
    ctx = make_ctx(tmp_path, scripted, max_retries=1)
    stage(ctx, "zeta")
    scripted.script(Fault(status=500))
    (judgement,) = judge_trajectories(ctx).judgements
    assert judgement.status == "llm-error" and "HTTP 500" in judgement.detail
    assert judgement.attempts == 1 and scripted.count == 2  # the client's own retry of a transient error
    assert stored(ctx) == [judgement]
    scripted.script(verdict())
    report = judge_trajectories(ctx)
    assert report.judged == 1 and report.statuses == {"scored": 1}
    assert stored(ctx)[0].status == "scored"


def test_a_server_rejecting_json_mode_is_asked_without_it(tmp_path, scripted):
    ctx = make_ctx(tmp_path, scripted)
    stage(ctx, "eta")
    scripted.fail_next(status=400, message="response_format is not supported")
    scripted.script(verdict())
    (judgement,) = judge_trajectories(ctx).judgements
    assert judgement.status == "scored" and judgement.attempts == 2
    first, second = scripted.requests
    assert first.params.get("response_format") == {"type": "json_object"}
    assert second.params.get("response_format") is None


def test_rerun_makes_no_requests_and_failed_agents_are_skipped(tmp_path, scripted):
    ctx = make_ctx(tmp_path, scripted)
    stage(ctx, "theta", "iota")
    failed = make_trajectory(make_task(), "kappa", outcome="llm-error", passed=False)
    ctx.store.write_records(PARTITION, [*ctx.store.read_partition(Trajectory, PARTITION), failed])
    scripted.script(verdict())
    first = judge_trajectories(ctx)
    assert (first.judged, first.reused, first.skipped) == (2, 0, 1)
    assert "kappa" not in " ".join(r.prompt for r in scripted.requests)
    requests = scripted.count
    second = judge_trajectories(ctx)
    assert scripted.count == requests
    assert (second.judged, second.reused, second.skipped) == (0, 2, 1)
    assert second.judgements == first.judgements
    kept = [t for t in ctx.store.read_partition(Trajectory, PARTITION) if t.id != "traj-iota"]
    ctx.store.write_records(PARTITION, kept)  # a trajectory deleted: its judgement goes with it
    third = judge_trajectories(ctx)
    assert scripted.count == requests and [j.trajectory_id for j in stored(ctx)] == ["traj-theta"]
    assert [j.trajectory_id for j in third.judgements] == ["traj-theta"]


def test_judge_calls_are_bounded_by_the_concurrency(tmp_path, scripted):
    ctx = make_ctx(tmp_path, scripted)
    stage(ctx, *(f"n{i}" for i in range(6)))
    scripted.latency = 0.05
    report = judge_trajectories(ctx, concurrency=2)
    assert report.statuses == {"scored": 6} and scripted.count == 6
    assert scripted.max_in_flight == 2


def test_default_partitions_are_gold_and_sampled_only(tmp_path, scripted):
    ctx = make_ctx(tmp_path, scripted)
    stage(ctx, "lambda", partition="gold--dareforge")
    stage(ctx, "mu", partition="agent--dareforge")  # an evaluation run: not training data
    scripted.script(verdict())
    report = judge_trajectories(ctx)
    assert report.partitions == {"gold--dareforge": "judge--gold--dareforge"}
    assert [j.trajectory_id for j in report.judgements] == ["traj-lambda"]
    explicit = judge_trajectories(ctx, partitions=["agent--dareforge"])
    assert [j.trajectory_id for j in explicit.judgements] == ["traj-mu"]


def test_configuration_errors_name_the_fix(tmp_path, scripted):
    ctx = make_ctx(tmp_path, scripted)
    ctx.config.judge.endpoint = None
    with pytest.raises(ConfigError, match=r"judge\.endpoint"):
        judge_trajectories(ctx)
    ctx.config.judge.endpoint = "judge"
    with pytest.raises(JudgeError, match="no trajectories partition 'sampled--nope'"):
        judge_trajectories(ctx, partitions=["sampled--nope"])
    with pytest.raises(ConfigError, match="no endpoint named 'other'"):
        judge_trajectories(ctx, endpoint="other")
    assert scripted.count == 0


# -- prompt pieces --------------------------------------------------------------------------------------------
def test_parse_reply_is_strict_but_accepts_a_json_fence():
    scores = parse_reply(f"```json\n{verdict()}\n```")
    assert scores.criteria == SCORES and scores.rationale == "Clear task, careful work."
    for bad in (
        "",
        "[1, 2]",
        verdict(query_clarity=True),
        verdict(task_alignment="4"),
        verdict(answer_plausibility=0),
    ):
        with pytest.raises(MalformedReply):
            parse_reply(bad)


def test_long_transcripts_fit_the_budget_keeping_both_ends():
    steps = [Step(role="system", content="sys"), Step(role="user", content="the task")]
    for i in range(40):
        steps.append(Step(role="assistant", content=f"<code>step {i}</code>", code=f"step {i}"))
        steps.append(Step(role="execution", content=f"OUT{i} " + "x" * 5000, code=f"step {i}", seconds=1.0))
    text = render_transcript(steps, budget=6000)
    assert len(text) <= 6000
    assert "OUT0" in text and "OUT39" in text and "steps cut to fit" in text
    assert "the task" not in text and "sys" not in text  # the task is shown on its own, the system prompt not
    short = render_transcript(steps[:4], budget=6000)
    assert "[assistant reply 1]" in short and "[execution 1, 1.0 s]" in short and "characters cut" in short
