"""A release's tasks as an inspect_ai task, so the harness most evaluation work runs in can run a release:

    inspect eval dareforge/release -T release=dareforge -T split=test -T protocol=tools --model openai/gpt-4o-mini

(`-T config=PATH` names the dareforge.yaml whose store holds the release; default: the usual lookup, `-T version=`
a release version, default the latest.) The package registers this module with inspect_ai (entry point group
`inspect_ai`), which is what makes `dareforge/release` a task name, and `dareforge/mockllm` a model: inspect's
`mockllm` (its default reply, or `custom_outputs` given from Python) made to run offline. inspect's own mockllm
counts the tokens of every output that carries no usage with tiktoken's o200k_base vocabulary, which tiktoken
downloads on first use: offline each sample then fails with a ConnectionError (and `inspect eval` still exits
0). `dareforge/mockllm` estimates them instead (`OFFLINE_CHARS_PER_TOKEN`), so a smoke run needs no network:

    inspect eval dareforge/release -T release=dareforge -T split=test --model dareforge/mockllm --limit 1

Task = dataset + solver + scorer + sandbox, each dareforge's own:

- **dataset**: one sample per task of the split (id = task id; input = the task prompt of the protocol;
  metadata = family, metric, limits); the answers are never in it.
- **solver**: dareforge's agent engine (`dareforge.agents.loop.run_agent`), the same for `protocol=tags` and
  `protocol=tools`, with the model inspect chose behind a client adapter: inspect's `generate` answers each
  request (tools as inspect `ToolInfo`s, replies' tool calls back as raw JSON arguments), so turn and time
  limits, observations and failure categories are exactly `dareforge evaluate`'s. The conversation the model saw
  goes into the sample's messages, the whole trajectory into its metadata.
- **scorer**: dareforge's grader, run on the host against the release's private answers (IF tasks against the
  reference run, MM/TS against held-out answers), giving `score` (the task metric; 0 when nothing valid was
  written) and `passed` (the task's bar as its instruction states it: IF needs 1.0, an MM or TS task its own bar
  where it carries one, else its family's); the answer is the outcome, the explanation its detail.
- **sandbox**: dareforge's own bubblewrap sandbox (one cold kernel per sample), not an inspect sandbox
  environment. inspect's `local` sandbox runs code as the evaluating user with the network and the whole file
  system in reach (the answers included), and its `docker` sandbox needs a Docker daemon our machines do not
  have; the bubblewrap sandbox isolates (no network, own PID namespace and uid, inputs read-only, nothing of the
  store visible) and is the stack every task's reference was certified with.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import (
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    get_model,
    messages_from_openai,
    modelapi,
)
from inspect_ai.scorer import Score, Target, accuracy, mean, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.tool import ToolInfo, ToolParams

from dareforge.agents.attempts import release_task_files
from dareforge.agents.evaluate import split_tasks
from dareforge.agents.loop import run_agent
from dareforge.agents.protocol import protocol_for
from dareforge.config_loader import load_config
from dareforge.context import RunContext
from dareforge.errors import DareforgeError
from dareforge.exports import ExportError
from dareforge.exports.chat import chat_form
from dareforge.llm import ChatResult
from dareforge.publish.release import load_release
from dareforge.sandbox import Sandbox
from dareforge.schema import Task as DareTask
from dareforge.schema import ToolCall, Trajectory
from dareforge.scratch import temp_root

TRAJECTORY = "dareforge_trajectory"
"""The sample metadata key holding the graded trajectory (JSON of `dareforge.schema.Trajectory`)."""

OFFLINE_CHARS_PER_TOKEN = 4
"""How `dareforge/mockllm` counts tokens: characters per token, the usual estimate for English text and code."""


@modelapi(name="dareforge")
def offline_mockllm() -> type[ModelAPI]:
    """`--model dareforge/mockllm`: inspect's mockllm with token counts estimated, not looked up in tiktoken's
    downloaded vocabulary (see the module doc)."""
    from inspect_ai.model._providers.mockllm import MockLLM  # inspect exports the provider by name only

    class OfflineMockLLM(MockLLM):
        async def count_text_tokens(self, text: str) -> int:
            return max(1, len(text) // OFFLINE_CHARS_PER_TOKEN)

    return OfflineMockLLM


@task
def release(
    release: str = "dareforge",
    version: str | None = None,
    split: str = "test",
    protocol: str = "tags",
    config: str | None = None,
) -> Task:
    """The `split` tasks of a dareforge release, played by dareforge's agent in `protocol` (see the module doc)."""
    ctx = RunContext.from_config(load_config(config), show_progress=False)
    return release_task(ctx, release, version=version, split=split, protocol=protocol)


def release_task(
    ctx: RunContext, name: str, *, version: str | None = None, split: str = "test", protocol: str = "tags"
) -> Task:
    """`release` for a run context of one's own (tests, notebooks)."""
    chosen = protocol_for(protocol)
    rel = load_release(ctx, name, version)
    tasks = {t.id: t for t in split_tasks(rel, split)}
    if not tasks:
        raise DareforgeError(f"release {rel.name}@{rel.version} has no {split} tasks to evaluate")
    samples = [
        Sample(
            id=t.id,
            input=chosen.task_prompt(t),
            metadata={"family": t.family, "metric": t.metric.name, "turns": t.limits.turns},
        )
        for t in tasks.values()
    ]

    def files(t: DareTask):
        return release_task_files(rel, t)

    return Task(
        dataset=samples,
        solver=dareforge_agent(tasks, files, ctx, protocol),
        scorer=dareforge_grade(),
        name=f"dareforge-{rel.name}-{split}",
        version=rel.version,
        metadata={"release": rel.name, "release_version": rel.version, "split": split, "protocol": protocol},
    )


@dataclass(frozen=True)
class InspectEndpoint:
    """What a trajectory records of the model inspect evaluates."""

    name: str
    model: str
    protocol: str


class InspectClient:
    """dareforge's chat client interface over the model of the running inspect eval. Sampling settings are
    inspect's (`--temperature`, `--max-tokens`...), not the engine's defaults; caching is inspect's too."""

    def __init__(self, model: Any, protocol: str):
        self.model = model
        self.endpoint = InspectEndpoint("inspect", str(model), protocol)

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        **_: Any,
    ) -> ChatResult:
        history = await messages_from_openai(messages, str(self.model))
        output = await self.model.generate(
            history,
            tools=[_tool_info(t) for t in tools or []],
            config=GenerateConfig(max_tokens=max_tokens),
        )
        if output.error:
            return ChatResult(error=output.error, error_kind="inspect")
        message = output.message
        usage = output.usage
        return ChatResult(
            text=message.text,
            tool_calls=[_tool_call(c) for c in message.tool_calls or []],
            finish_reason={"max_tokens": "length", "tool_calls": "tool_calls"}.get(
                output.stop_reason, "stop"
            ),
            prompt_tokens=usage.input_tokens if usage else None,
            completion_tokens=usage.output_tokens if usage else None,
        )


def _tool_info(tool: dict[str, Any]) -> ToolInfo:
    function = tool["function"]
    return ToolInfo(
        name=function["name"],
        description=function.get("description", ""),
        parameters=ToolParams.model_validate(
            function.get("parameters", {"type": "object", "properties": {}})
        ),
    )


def _tool_call(call: Any) -> ToolCall:
    # inspect parses arguments into a dict; when it could not, its parse error (which quotes the text) is what
    # the engine reports as the unreadable call.
    arguments = call.parse_error if call.parse_error else json.dumps(call.arguments)
    return ToolCall(id=call.id, name=call.function, arguments=arguments)


@solver
def dareforge_agent(tasks: dict[str, DareTask], files: Any, ctx: RunContext, protocol: str):
    """Play the sample's task with dareforge's engine and the eval's model; grade it on the host."""

    def sandbox(inputs: Path, workspace: Path, seconds: float) -> Sandbox:
        return Sandbox(inputs, workspace, ctx.config.sandbox, seconds)

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        dare_task = tasks[str(state.sample_id)]
        client = InspectClient(get_model(), protocol)
        with tempfile.TemporaryDirectory(prefix="dareforge-inspect-", dir=temp_root()) as tmp:
            public_dir, answers = await asyncio.to_thread(files(dare_task), Path(tmp))
            trajectory = await run_agent(dare_task, public_dir, client, sandbox, answers=answers)
        try:
            chat = chat_form(trajectory, dare_task, protocol)
        except ExportError:  # the model never replied (an LLM error at once): the prompt is all there is
            pass
        else:
            state.messages = await messages_from_openai(chat, str(client.model))
        state.output = ModelOutput.from_content(str(client.model), trajectory.outcome)
        state.metadata[TRAJECTORY] = trajectory.model_dump_json()
        return state

    return solve


@scorer(metrics={"score": [mean()], "passed": [accuracy()]})
def dareforge_grade():
    """The score and pass of the trajectory the solver graded (see the module doc)."""

    async def score(state: TaskState, target: Target) -> Score:
        trajectory = Trajectory.model_validate_json(state.metadata[TRAJECTORY])
        return Score(
            value={"score": trajectory.score or 0.0, "passed": 1.0 if trajectory.passed else 0.0},
            answer=trajectory.outcome,
            explanation=trajectory.detail,
            metadata={"trajectory_id": trajectory.id, "outcome": trajectory.outcome},
        )

    return score
