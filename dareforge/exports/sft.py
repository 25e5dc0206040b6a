"""SFT export: chosen agent trajectories as chat records, loadable with `datasets`.

`SftExport` (registered as `sft`) writes a versioned export (see `base`) of a job's chosen trajectories, one
row per trajectory in four configs:

- `default` (`data/<split>.parquet`): `messages`, a list of `{role, content}` with roles system, user and
  assistant, the format chat templates and TRL's SFT trainer read;
- `sharegpt` (`sharegpt/<split>.parquet`): the same turns as `conversations`, `{from, value}` with
  system, human and gpt;
- `tools` (`tools/<split>.parquet`): the tool-calling form, `messages` of `{role, content}` (roles system, user,
  assistant, tool) with `tool_calls` (`{id, type: "function", function: {name, arguments}}`, arguments a
  mapping) on a reply that makes calls and `tool_call_id` on a tool turn, each turn a JSON object that `datasets`
  (4.7 or later) loads as a dict with only its own keys, and `tools`, the JSON text of the tools schema: the
  layout TRL's SFTTrainer reads (it passes `tools` to the chat template, and the templates write `arguments`
  with `tojson` and take any turn holding `tool_calls` for a call);
- `llamafactory` (`llamafactory/<split>.parquet`): the tool-calling form in LLaMA-Factory's sharegpt layout,
  registered by the export's `dataset_info.json` (copy its entries into LLaMA-Factory's `data/dataset_info.json`
  with `file_name` pointing at the export): `conversations` of `{from, value}` with human, gpt, `function_call`
  (the reply's calls as a JSON list of `{name, arguments}`) and `observation` (the calls' outputs, several joined
  by a blank line) alternating as LLaMA-Factory requires, `system`, and `tools` (the JSON list of function
  definitions). A reply that calls tools keeps only its calls there: LLaMA-Factory's function turn has no text.

`default` and `sharegpt` hold the tags form, `tools` and `llamafactory` the tool-calling form, of every trajectory whichever protocol
played it (`dareforge.exports.chat` converts); a tools trajectory that a tags chat cannot express (several code
calls in one reply) is in `tools` only, and the manifest counts it (`counts.tools_only`).

Both carry `id` (the trajectory id), `task_id`, `family`, `split` (the task's side in the source release),
`source` (`<kind>:<endpoint>/<model>`, kind `gold` or `sampled`), `outcome`, `score` and `passed`.

In the form of the protocol that played it, a trajectory's messages are its steps in order: its `execution`
steps are left out because the message after each one already tells the model what ran (as the model saw it).
Assistant steps that carry an LLM error hold no model output and are dropped, and so are messages after the last
assistant reply, which nothing learns from. The caller chooses the trajectories (selection is a query over
stored scores, `dareforge.trajectories.corpus`); the manifest records that choice (`lineage`) so the export can
be traced and rebuilt.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from dareforge.agents.protocol import tool_schemas
from dareforge.exports import ExportError, export_card
from dareforge.exports.chat import NoPlainForm, chat_form
from dareforge.exports.export_format import (
    ExportContent,
    ExportJob,
    TrainingExport,
    family_counts,
    release_ref,
    split_tables,
    turns,
)
from dareforge.hashing import content_fingerprint
from dareforge.publish.source_split import SPLITS
from dareforge.schema import Task, Trajectory

FORMAT = "dareforge-sft/1"
SHAREGPT_ROLES = {"system": "system", "user": "human", "assistant": "gpt"}
KINDS = ("gold", "sampled")

_COMMON = [
    pa.field("id", pa.string(), False),
    pa.field("task_id", pa.string(), False),
    pa.field("family", pa.string(), False),
    pa.field("split", pa.string(), False),
    pa.field("source", pa.string(), False),
    pa.field("outcome", pa.string(), False),
    pa.field("score", pa.float64()),
    pa.field("passed", pa.bool_()),
]


MESSAGES_SCHEMA = pa.schema([*_COMMON, turns("messages", "role", "content")])
SHAREGPT_SCHEMA = pa.schema([*_COMMON, turns("conversations", "from", "value")])
TOOLS_SCHEMA = pa.schema(
    [*_COMMON, pa.field("messages", pa.list_(pa.json_()), False), pa.field("tools", pa.string(), False)]
)
"""`messages` holds one JSON object per turn (`datasets` loads the column as a list of its `Json` feature), so
each turn keeps exactly its own keys: a struct column would give every turn all four, a user turn an empty or
null `tool_calls` that templates take for a call (Llama 3.2's renders any turn holding the key as one), and
every call's `arguments` would have to be one type for all rows."""
LLAMAFACTORY_SCHEMA = pa.schema(
    [
        *_COMMON,
        turns("conversations", "from", "value"),
        pa.field("system", pa.string(), False),
        pa.field("tools", pa.string(), False),
    ]
)
LLAMAFACTORY_TAGS = {
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "observation_tag": "observation",
    "function_tag": "function_call",
    "system_tag": "system",
}
"""How LLaMA-Factory's `dataset_info.json` names the roles of the `llamafactory` config."""
LAYOUTS = ("default", "sharegpt", "tools", "llamafactory")


def chat_messages(trajectory: Trajectory, task: Task | None = None) -> list[dict[str, str]]:
    """The plain (tags) chat a model is trained on: see the module doc for what is left out."""
    return chat_form(trajectory, task, "tags")


def tool_chat(trajectory: Trajectory, task: Task) -> list[dict[str, Any]]:
    """The tool-calling chat as the `tools` config holds it: a turn has `tool_calls` only when it makes calls
    and `tool_call_id` only when it answers one, and a call's `arguments` is the mapping chat templates expect
    (they write it out with `tojson`); arguments that are not a JSON object (an unreadable call) stay the text
    the model wrote."""
    chat = []
    for m in chat_form(trajectory, task, "tools"):
        turn = {"role": m["role"], "content": m["content"]}
        if m.get("tool_calls"):
            turn["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _mapping(c["function"]["arguments"])}}
                for c in m["tool_calls"]
            ]
        if m.get("tool_call_id") is not None:
            turn["tool_call_id"] = m["tool_call_id"]
        chat.append(turn)
    return chat


def _mapping(arguments: str) -> dict[str, Any] | str:
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def sharegpt(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{"from": SHAREGPT_ROLES[m["role"]], "value": m["content"]} for m in messages]


def llamafactory(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool-calling chat (`tool_chat`) in LLaMA-Factory's sharegpt layout: see the module doc."""
    system = "".join(m["content"] for m in messages if m["role"] == "system")
    conversations: list[dict[str, str]] = []
    for m in messages:
        if m["role"] == "user":
            conversations.append({"from": "human", "value": m["content"]})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            calls = [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in m["tool_calls"]
            ]
            conversations.append({"from": "function_call", "value": json.dumps(calls, ensure_ascii=False)})
        elif m["role"] == "assistant":
            conversations.append({"from": "gpt", "value": m["content"]})
        elif m["role"] == "tool" and conversations[-1]["from"] == "observation":
            conversations[-1]["value"] += "\n\n" + m["content"]
        elif m["role"] == "tool":
            conversations.append({"from": "observation", "value": m["content"]})
    return {
        "conversations": conversations,
        "system": system,
        "tools": json.dumps([t["function"] for t in tools], ensure_ascii=False, sort_keys=True),
    }


def dataset_info(name: str, splits: Iterable[str]) -> dict[str, Any]:
    """LLaMA-Factory's registry entries for the `llamafactory` config, one dataset per split."""
    return {
        f"{name}-{split}": {
            "file_name": f"llamafactory/{split}.parquet",
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
            "tags": LLAMAFACTORY_TAGS,
        }
        for split in splits
    }


def _source(trajectory: Trajectory, kinds: Mapping[str, str]) -> str:
    kind = kinds.get(trajectory.id, "sampled")
    if kind not in KINDS:
        raise ExportError(f"kind {kind!r} of trajectory {trajectory.id} must be one of {', '.join(KINDS)}")
    return f"{kind}:{trajectory.endpoint}/{trajectory.model}"


def _unique(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    by_id: dict[str, Trajectory] = {}
    for t in trajectories:
        if t.id in by_id and by_id[t.id] != t:
            raise ExportError(f"two different trajectories share id {t.id}; the trajectory table is damaged")
        by_id[t.id] = t
    return list(by_id.values())


class SftExport(TrainingExport):
    format = FORMAT
    reads_trajectories = True

    def content(self, job: ExportJob, name: str) -> ExportContent:
        """The job's chosen trajectories of its release's tasks, with the choice as the manifest's lineage."""
        chosen = _unique(job.trajectories.trajectories if job.trajectories else ())
        if not chosen:
            raise ExportError(f"no trajectories to export as {name!r}; synthesize and select some first")
        release, choice = job.release, job.trajectories
        by_task = {t.id: t for t in job.tasks}
        splits = release.splits
        rows, tool_rows, factory_rows = [], [], []
        for t in chosen:
            task = by_task.get(t.task_id)
            if task is None:
                raise ExportError(
                    f"trajectory {t.id} is of task {t.task_id}, which is not among the tasks given"
                )
            if task.id not in splits:
                raise ExportError(
                    f"task {task.id} (trajectory {t.id}) is not in release {release.name}@{release.version}; "
                    "export trajectories of that release's tasks only"
                )
            common = {
                "id": t.id,
                "task_id": t.task_id,
                "family": task.family,
                "split": splits[task.id],
                "source": _source(t, choice.kinds),
                "outcome": t.outcome,
                "score": t.score,
                "passed": t.passed,
            }
            schemas = tool_schemas(task)
            tool_rows.append(
                {**common, "messages": tool_chat(t, task), "tools": json.dumps(schemas, sort_keys=True)}
            )
            factory_rows.append({**common, **llamafactory(tool_rows[-1]["messages"], schemas)})
            try:
                rows.append({**common, "messages": chat_messages(t, task)})
            except NoPlainForm:
                continue
        order = lambda r: (SPLITS.index(r["split"]), r["task_id"], r["source"], r["id"])  # noqa: E731
        rows.sort(key=order)
        tool_rows.sort(key=order)
        factory_rows.sort(key=order)
        if not rows:
            raise ExportError(
                f"none of the {len(tool_rows)} trajectories for {name!r} has a plain (tags) form; export them "
                "from a tags endpoint, or with one code call per reply"
            )
        ref = release_ref(release)
        lineage = {
            "trajectory_partitions": sorted(set(choice.partitions)),
            "selection": dict(choice.selection),
        }
        content_fp = content_fingerprint(
            {
                "format": FORMAT,
                "layouts": LAYOUTS,
                "rows": rows,
                "tool_rows": tool_rows,
                "release": ref,
                "lineage": lineage,
            }
        )

        sharegpt_rows = [
            {**{k: v for k, v in r.items() if k != "messages"}, "conversations": sharegpt(r["messages"])}
            for r in rows
        ]
        tables = {
            "default": split_tables(rows, MESSAGES_SCHEMA),
            "sharegpt": split_tables(sharegpt_rows, SHAREGPT_SCHEMA),
            "tools": split_tables(
                [
                    {**r, "messages": [json.dumps(m, ensure_ascii=False) for m in r["messages"]]}
                    for r in tool_rows
                ],
                TOOLS_SCHEMA,
            ),
            "llamafactory": split_tables(factory_rows, LLAMAFACTORY_SCHEMA),
        }
        meta = {
            "content_fingerprint": content_fp,
            "release": ref,
            "lineage": lineage,
            "trajectory_ids": [r["id"] for r in tool_rows],
            "counts": {
                "trajectories": len(tool_rows),
                "tasks": len({r["task_id"] for r in tool_rows}),
                "passed": sum(bool(r["passed"]) for r in tool_rows),
                "messages": sum(len(r["messages"]) for r in rows),
                "tools_only": len(tool_rows) - len(rows),
                "splits": dict(Counter(r["split"] for r in tool_rows)),
                "families": family_counts(tool_rows, "outcome"),
                "sources": dict(sorted(Counter(r["source"] for r in tool_rows).items())),
            },
        }
        registry = dataset_info(name, tables["llamafactory"])
        return ExportContent(
            tables,
            meta,
            {"dataset_info.json": (json.dumps(registry, indent=2, sort_keys=True) + "\n").encode()},
        )

    def card(self, meta: dict[str, Any]) -> str:
        return export_card.sft_card(meta)
