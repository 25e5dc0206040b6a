"""A release run by inspect_ai (`dareforge.inspect_eval`), with inspect's scripted `mockllm` model, the real
bubblewrap sandbox and an iris-only release (two Class-IF tasks, one Class-MM, all in test).

The scores are read back from inspect's own log file and compared with `dareforge evaluate` on the same
scripted solutions (served by tests/llm_server.py in the tags protocol, while inspect plays tool calls).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import inspect_ai
import pytest
import yaml
from inspect_ai.log import read_eval_log
from inspect_ai.model import ModelOutput, ModelUsage, get_model

from dareforge.agents import evaluate
from dareforge.config import Config, EndpointConfig
from dareforge.context import RunContext
from dareforge.inspect_eval import release_task
from dareforge.publish.release import load_release
from dareforge.sandbox import probe
from dareforge.schema import Task
from dareforge.store import Store
from tests.stores import copy_iris_release
from tests.test_agents import conversations, majority_code, step

pytestmark = pytest.mark.skipif(not probe().available, reason=f"no sandbox here: {probe().reason}")

MOCK = "mockllm/model"
ROOT = Path(__file__).resolve().parents[1]
DONE = "predictions.csv is written."


@pytest.fixture(scope="module")
def built(iris_release, tmp_path_factory) -> tuple[Config, list[Task]]:
    cfg = copy_iris_release(iris_release, tmp_path_factory.mktemp("inspect"))
    ctx = RunContext.from_config(cfg, show_progress=False)
    tasks = sorted(load_release(ctx, "dareforge").tasks(), key=lambda t: (t.family, t.id))
    return cfg, tasks


def context(cfg: Config) -> RunContext:
    return RunContext(config=cfg, store=Store(cfg.store.root), show_progress=False)


def solutions(cfg: Config, tasks: list[Task]) -> dict[str, str]:
    """Per task, the code its scripted model runs: the first IF task's reference code (gold), and a majority
    vote for the others (a wrong answer to the second IF task, an MM answer below the bar)."""
    first_if = tasks[0]
    assert [t.family for t in tasks] == ["Class-IF", "Class-IF", "Class-MM"]
    reference = Path(cfg.store.root) / "tasks" / first_if.id / "private" / "reference.py"
    return {t.id: reference.read_text() if t is first_if else majority_code(t) for t in tasks}


def test_inspect_eval_of_a_release_scores_like_dareforge_evaluate(built, server, tmp_path):
    cfg, tasks = built
    code = solutions(cfg, tasks)
    outputs = []  # samples run one at a time, in task order: each runs its code, then submits
    for t in tasks:
        outputs.append(
            ModelOutput.for_tool_call(MOCK, "python", {"code": code[t.id]}, content="Fit and predict.")
        )
        outputs.append(ModelOutput.for_tool_call(MOCK, "submit", {"message": DONE}, content="Done."))
    for output in outputs:  # else mockllm counts tokens with tiktoken, which downloads its vocabulary
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    model = get_model(MOCK, custom_outputs=outputs)
    task = release_task(context(cfg), "dareforge", protocol="tools")
    (log,) = inspect_ai.eval(task, model=model, max_samples=1, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error

    read = read_eval_log(log.location)  # inspect's own log file, as `inspect view` shows it
    scored = {s.id: s.scores["dareforge_grade"] for s in read.samples}
    assert set(scored) == {t.id for t in tasks}
    gold, wrong, mm = (scored[t.id] for t in tasks)
    assert gold.value == {"score": 1.0, "passed": 1.0} and gold.answer == "graded"
    assert wrong.value["passed"] == 0.0 and wrong.answer == "instruction-non-adherence"
    assert mm.value["passed"] == 0.0 and 0 < mm.value["score"] < 1 and mm.answer == "graded"
    sample = next(s for s in read.samples if s.id == tasks[0].id)
    assert [m.role for m in sample.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert sample.messages[2].tool_calls[0].function == "python" and "`submit`" in sample.messages[0].text
    metrics = {name: m.value for score in read.results.scores for name, m in score.metrics.items()}
    assert metrics["accuracy"] == pytest.approx(1 / 3)

    # the same solutions through `dareforge evaluate`, tags protocol, scripted server: the same scores
    server.reset()
    server.script(
        conversations({t.instruction.strip(): [step(code[t.id]), step(answer=DONE)] for t in tasks})
    )
    ctx = context(cfg)
    ctx.config.llm.endpoints = [EndpointConfig(name="scripted", base_url=server.url, model="scripted-model")]
    report = evaluate(ctx, "scripted", concurrency=1)
    ours = {
        t.task_id: {"score": t.score or 0.0, "passed": 1.0 if t.passed else 0.0} for t in report.trajectories
    }
    assert ours == {task_id: score.value for task_id, score in scored.items()}


def test_inspect_cli_runs_the_release_task_by_name(built, server, tmp_path):
    """`inspect eval dareforge/release` through the entry point, against the scripted server as an
    OpenAI-compatible model (mockllm's default reply would need tiktoken's vocabulary, a download)."""
    cfg, tasks = built
    config = tmp_path / "dareforge.yaml"
    config.write_text(
        yaml.safe_dump({"store": cfg.model_dump(mode="json")["store"], "builtin": {"include": []}})
    )
    server.reset()
    server.script("I would fit a random forest.")  # no code: the episode ends as no-code, scored 0
    logs = tmp_path / "logs"
    command = [
        str(Path(sys.executable).parent / "inspect"),
        "eval",
        "dareforge/release",
        "-T",
        f"config={config}",
        "--model",
        "openai-api/scripted/scripted-model",
        "--limit",
        "1",
        "--log-dir",
        str(logs),
        "--display",
        "none",
    ]
    environ = {**os.environ, "SCRIPTED_BASE_URL": server.url, "SCRIPTED_API_KEY": "not-needed"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=environ)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = logs.glob("*.eval")
    log = read_eval_log(str(path))
    assert log.status == "success", log.error
    (sample,) = log.samples
    score = sample.scores["dareforge_grade"]
    assert (
        sample.id == tasks[0].id
        and score.answer == "no-code"
        and score.value == {"score": 0.0, "passed": 0.0}
    )
    assert server.count == tasks[0].limits.turns + 1 and "<code>" in server.requests[0].messages[0]["content"]


def test_the_readmes_offline_inspect_command_runs_offline(built, tmp_path):
    """The README's `--model dareforge/mockllm` command exactly as written, run where the usual lookup finds the
    test store's dareforge.yaml and tiktoken has no vocabulary cached (a download fails here): the eval succeeds
    and grades its sample (mockllm's default reply holds no code: no-code, 0). inspect loads dareforge through
    the installed entry point (the checkout's editable install); putting the checkout on PYTHONPATH as well
    would let a stale `dareforge.egg-info` left in it by a build shadow that entry point."""
    cfg, tasks = built
    (line,) = [x for x in (ROOT / "README.md").read_text().splitlines() if "--model dareforge/mockllm" in x]
    command = shlex.split(line, comments=True)
    assert command[:3] == ["inspect", "eval", "dareforge/release"]
    command[0] = str(Path(sys.executable).parent / "inspect")
    (tmp_path / "dareforge.yaml").write_text(
        yaml.safe_dump({"store": cfg.model_dump(mode="json")["store"], "builtin": {"include": []}})
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DAREFORGE_", "INSPECT_"))}
    environ.update(TIKTOKEN_CACHE_DIR=str(tmp_path / "no-vocabulary"))
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=environ)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("logs/*.eval")
    log = read_eval_log(str(path))
    assert log.status == "success", log.error
    assert log.eval.model == "dareforge/mockllm"
    (sample,) = log.samples
    assert sample.id == tasks[0].id and sample.scores["dareforge_grade"].answer == "no-code"
    assert sample.scores["dareforge_grade"].value == {"score": 0.0, "passed": 0.0}
