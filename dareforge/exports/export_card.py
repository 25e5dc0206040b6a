"""Dataset cards of the SFT and RL exports (README.md with Hugging Face YAML front matter).

Built like the release cards (`dareforge.publish.release_card`): the `configs` block tells `datasets.load_dataset`
which Parquet files make which config and split; `license: other` because the content derives from sources
under several licenses, listed in the source release's card.
"""

from __future__ import annotations

from typing import Any

from huggingface_hub import DatasetCardData

from dareforge.families.registry import bar_rule, family_named, in_order
from dareforge.publish.release_card import cell, family_table, front_matter, size_category

TAGS = ["agents", "data-science", "tabular", "dareforge"]


def _data(meta: dict[str, Any], tags: list[str], categories: list[str], rows: int) -> DatasetCardData:
    configs = []
    for i, (config, files) in enumerate(meta["configs"].items()):
        entry: dict[str, Any] = {
            "config_name": config,
            "data_files": [{"split": split, "path": path} for split, path in files.items()],
        }
        if i == 0:
            entry["default"] = True
        configs.append(entry)
    return DatasetCardData(
        pretty_name=meta["pretty_name"],
        license="other",
        task_categories=categories,
        size_categories=[size_category(rows)],
        tags=[*tags, *TAGS],
        configs=configs,
    )


def _lineage(meta: dict[str, Any], extra: list[str]) -> list[str]:
    release = meta["release"]
    return [
        "## Lineage",
        "",
        f"- Source release: `{release['name']}@{release['version']}` (content fingerprint "
        f"`{release['content_fingerprint'][:16]}`); its card lists the sources and their licenses.",
        *extra,
        f"- Previous version: {meta['previous_version'] or 'none'}.",
        "- `manifest.json` lists every file with its size and sha256, the lineage and the counts.",
        "",
    ]


def sft_card(meta: dict[str, Any]) -> str:
    counts = meta["counts"]
    families = in_order(counts["families"])
    outcomes = sorted({o for f in families for o in counts["families"][f]})
    splits = list(meta["configs"]["default"])
    lines = [
        f"# {meta['pretty_name']}",
        "",
        f"Version **{meta['version']}**: {counts['trajectories']} agent trajectories "
        f"on {counts['tasks']} data-science tasks of the release `{meta['release']['name']}`, for supervised "
        "fine-tuning. In each, a model solves a tabular task by writing Python that runs in a sandbox; the "
        "user turns after the first carry the code's output.",
        "",
        "## Using it",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'chats = load_dataset("<this folder or Hub repo>", split="{splits[0]}")  # `messages`',
        f'sharegpt = load_dataset("<this folder or Hub repo>", "sharegpt", split="{splits[0]}")  # `conversations`',
        f'tools = load_dataset("<this folder or Hub repo>", "tools", split="{splits[0]}")  # `messages`, `tools`',
        "```",
        "",
        "Each row is one trajectory: `id`, `task_id`, `family`, `split` (the task's side in the source release: "
        "`test` rows are trajectories on benchmark test tasks), `source` (`gold:` or `sampled:` then "
        "endpoint/model), `outcome`, `score` (the task metric against held-out answers or, for IF tasks, the "
        "reference run), `passed`, and `messages` (`role`: system, user, assistant; `content`) or, in the "
        "`sharegpt` config, `conversations` (`from`: system, human, gpt; `value`). Assistant turns hold "
        "`<reasoning>`, then `<code>` or `<answer>`. The `tools` config holds the same trajectories in the "
        "tool-calling form: assistant turns with `tool_calls` (a `python` call with the code, a `submit` call to "
        "finish; `arguments` a mapping) answered by `tool` turns (`tool_call_id`), each turn a JSON object with "
        "only its own keys (`datasets` 4.7 or later loads it as a dict), and `tools`, the JSON text of the tools "
        "schema, which TRL's SFTTrainer hands to the chat template. The `llamafactory` config holds "
        "the tool-calling form in LLaMA-Factory's sharegpt layout (`conversations` with `function_call` and "
        "`observation` turns, `system`, `tools`); `dataset_info.json` registers it for LLaMA-Factory.",
        "",
        f"`passed` is the score reaching the task's bar. {bar_rule()}",
        "",
        "## Composition",
        "",
    ]
    outcome_counts = {f: [counts["families"][f].get(o, 0) for o in outcomes] for f in families}
    lines += family_table({f: [*row, sum(row)] for f, row in outcome_counts.items()}, [*outcomes, "total"])
    lines += ["", "| source | trajectories |", "|---|---:|"]
    lines += [f"| `{cell(s)}` | {n} |" for s, n in counts["sources"].items()]
    lines += [""]
    lineage = meta["lineage"]
    selection = "; ".join(f"{k}: {v}" for k, v in sorted(lineage["selection"].items())) or "not recorded"
    partitions = ", ".join(f"`{p}`" for p in lineage["trajectory_partitions"]) or "not recorded"
    lines += _lineage(meta, [f"- Trajectory partitions: {partitions}.", f"- Selection: {cell(selection)}."])
    return front_matter(
        _data(meta, ["sft", "trajectories"], ["text-generation"], counts["trajectories"]), "\n".join(lines)
    )


def _hacks_section(hacks: dict[str, Any] | None) -> list[str]:
    """What the reward-hacking battery found on this export's tasks (`dareforge.exports.reward_hacks`)."""
    if not hacks:
        return []
    harnesses = hacks["harnesses"]
    counts = "; ".join(
        f"{name}: {h['overpaid']} of {h['cases']} paid more than their honest equivalent"
        for name, h in harnesses.items()
    )
    lines = [
        "## Reward hacking",
        "",
        "Every cheap way around the work (links to the answers, FIFOs, devices, folders and oversized files "
        "where the output goes, a pre-written reward, malformed or coerced predictions and answers) was tried on "
        f"one task of each family ({', '.join(hacks['families'])}) through each harness that pays: {counts}.",
        "",
    ]
    lines += [f"- overpaid: {example}" for example in hacks["overpaid"]]
    return lines + ([""] if hacks["overpaid"] else [])


def rl_card(meta: dict[str, Any]) -> str:
    counts = meta["counts"]
    families = in_order(counts["families"])
    splits = list(meta["configs"]["default"])
    release = meta["release"]
    lines = [
        f"# {meta['pretty_name']}",
        "",
        f"Version **{meta['version']}**: {counts['tasks']} data-science tasks of the "
        f"release `{release['name']}@{release['version']}` as RL prompts with a verifiable reward. Answers are "
        f"not here: they stay in the private release `{release['name']}-private`.",
        "",
        "## Using it",
        "",
        "```python",
        "from datasets import load_dataset",
        "from dareforge.exports.reward import RewardSpec, reward",
        "from dareforge.publish.release import answers_folder",
        "",
        f'task = load_dataset("<this folder or Hub repo>", split="{splits[-1]}")[0]',
        'messages = task["prompt"]  # system + first user message of the agent protocol',
        "# run the model's <code> in a sandbox holding the task's files (task['files'][i]['path'] in the release),",
        "# then score the predictions.csv it wrote against the task's answers in the private release:",
        'spec = RewardSpec.model_validate_json(task["reward_spec"])',
        f"answers = answers_folder(task['task_id'], {meta['release_format']!r})  # in the private release",
        "r = reward(spec, 'workspace/predictions.csv', f'{answers}/{spec.graded_against}')",
        "```",
        "",
        "Each row is one task: `task_id`, `family`, `split` (its side in the release), `release`, `prompt` "
        "(`role`, `content`), `files` (the input files: path in the release's public folder, size, sha256, header "
        "and rows), `metric` and `reward_spec` (JSON).",
        "",
        "## Reward",
        "",
        "DARE-bench's rule: 0.1 for a well-formed `predictions.csv` (the grader accepts it: key and target "
        "columns, one row per test row), plus 1.0 for an instruction-following task when every prediction "
        "matches the reference run, or plus the metric score clipped to [0, 1] for modelling and forecasting "
        "tasks. A missing or malformed file earns 0. `RewardSpec.pass_bar` is the score that passes the task, and "
        "the reward's `passed` says whether it was reached.",
        "",
        bar_rule(),
        "",
    ]
    rewards = {
        family: [
            family_named(family).reward,
            *(counts["families"][family].get(s, 0) for s in ("train", "test")),
        ]
        for family in families
    }
    lines += family_table(rewards, ["reward beyond the format's 0.1", "train", "test"], text_columns=1)
    lines += ["", f"Metrics: {', '.join(meta['metrics'])}.", ""]
    lines += _hacks_section(meta.get("reward_hacks"))
    lines += _lineage(meta, [])
    return front_matter(
        _data(meta, ["rl", "reinforcement-learning"], ["text-generation"], counts["tasks"]), "\n".join(lines)
    )
