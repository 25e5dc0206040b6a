"""Dataset cards (README.md with Hugging Face YAML front matter) for the public and the private release.

The front matter's `configs` block is what `datasets.load_dataset(<folder or repo>)` reads to find the
splits: a `default` config whose `data_files` map each split to its Parquet file. Licenses differ per source
(and builtin datasets carry both a package and an upstream license), so the card says `license: other` and
lists every source's license in a table in the body.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from huggingface_hub import DatasetCard, DatasetCardData

from dareforge.families.registry import bar_rule, family_named, in_order
from dareforge.publish import skill
from dareforge.publish.source_split import SPLITS

METRIC_TEXT = {
    "exact-match": "share of rows whose label equals the reference exactly (a faithful solution scores 1)",
    "allclose": "share of rows within {tolerance} relative tolerance of the reference (a faithful solution scores 1)",
    "macro-f1": "macro-averaged F1 over classes",
    "clipped-r2": "R², with negative values counted as 0",
    "forecast-skill": "1 - MAE / MAE of the best model-free forecast (mean, last value, last season), floored at 0",
    "answer": "graded by its answer type, as KramaBench grades",
}
ANSWER_TYPE_TEXT = {
    "string_exact": "equal after normalising case, spaces and quotes",
    "string_approximate": "an LLM judge's paraphrase verdict (normalised equality without one)",
    "numeric_exact": "equal, to the decimals the question asks",
    "numeric_approximate": "1 / (1 + relative error)",
    "list_exact": "F1 of the items, order ignored",
    "list_approximate": "F1 with texts judged and numbers within 1%",
    "boolean": "true or false, equal",
}


def answer_type_mix(tasks: Iterable[dict[str, Any]]) -> dict[str, Counter]:
    """Question family -> how many of its tasks have each answer type (from task rows' `metric`)."""
    mix: dict[str, Counter] = {}
    for t in tasks:
        kind = (t.get("metric") or {}).get("answer_type")
        if kind:
            mix.setdefault(t["family"], Counter())[kind] += 1
    return mix


SIZE_CATEGORIES = (
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
)


def size_category(n: int) -> str:
    return next((label for bound, label in SIZE_CATEGORIES if n < bound), "n>10M")


def family_table(rows: dict[str, list[Any]], columns: list[str], text_columns: int = 0) -> list[str]:
    """Markdown lines of a table with one row per family (`rows`: family -> its cells, in order): `family`,
    `what it asks`, then `columns`, whose first `text_columns` are text and the rest numbers (right-aligned)."""
    align = ["---"] * (2 + text_columns) + ["---:"] * (len(columns) - text_columns)
    lines = [f"| {' | '.join(['family', 'what it asks', *columns])} |", f"|{'|'.join(align)}|"]
    for family, cells in rows.items():
        what = family_named(family).words.asks
        lines.append(f"| {' | '.join([family, what, *map(str, cells)])} |")
    return lines


def cell(value: Any) -> str:
    """Text safe inside a Markdown table cell."""
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ").strip()


def front_matter(data: DatasetCardData, body: str) -> str:
    """A card: `data` as YAML front matter (what the Hub and `datasets` read), then the Markdown body."""
    card = DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body}")
    return str(card).rstrip("\n") + "\n"


def skill_lines(summary: dict[str, Any]) -> list[str]:
    """The card's section on how its tasks tell solvers apart, from the manifest's `skill` block."""
    lines = ["## How the tasks measure skill", ""]
    if summary["ladder"]:
        lines += [skill.LADDER_TEXT, "", *family_table(skill.ladder_rows(summary), skill.LADDER_COLUMNS), ""]
    else:
        lines += [skill.NO_LADDER, ""]
    if trivial := skill.trivial_rows(summary):
        lines += [skill.TRIVIAL_TEXT, "", *family_table(trivial, skill.TRIVIAL_COLUMNS), ""]
    if summary["tiers"]:
        lines += [skill.TIER_TEXT, "", *family_table(skill.tier_rows(summary), skill.TIER_COLUMNS), ""]
    if sensitivity := skill.sensitivity_rows(summary):
        lines += [skill.SENSITIVITY_TEXT, "", *family_table(sensitivity, skill.SENSITIVITY_COLUMNS), ""]
    return lines


def _graded(family: str, metric: dict[str, Any]) -> str:
    text = METRIC_TEXT.get(metric["name"], metric["name"]).format(tolerance=metric.get("tolerance"))
    if metric.get("answer_type"):
        return f"{text}; against the certified answer"
    exact = family_named(family).exact
    against = "the reference pipeline's predictions" if exact else "the held-out answers"
    return f"{metric['name']}: {text}; against {against}"


def public_card(meta: dict[str, Any]) -> str:
    tasks = meta["tasks"]
    families = in_order(t["family"] for t in tasks)
    splits = [s for s in SPLITS if meta["splits"][s]["tasks"]]
    data = DatasetCardData(
        pretty_name=meta["pretty_name"],
        license="other",
        task_categories=sorted({family_named(f).words.hub_category for f in families}),
        size_categories=[size_category(len(tasks))],
        tags=["benchmark", "data-science", "agents", "tabular", "dareforge"],
        configs=[
            {
                "config_name": "default",
                "data_files": [{"split": s, "path": f"data/{s}.parquet"} for s in splits],
            }
        ],
    )
    counts = Counter((t["family"], t["split"]) for t in tasks)
    lines = [
        f"# {meta['pretty_name']}",
        "",
        f"Version **{meta['version']}**: {len(tasks)} data-science tasks built by "
        f"dareforge from {len(meta['sources'])} real tabular sources. Each task gives an agent an instruction "
        "and input files; the agent writes `predictions.csv` (for a QA or Lake question, `answer.json`), "
        f"which is graded against answers kept in the separate private release `{meta['private_release']}`.",
        "",
        "## Splits",
        "",
        "Tasks are split by source: no source has tasks on both sides, and the most recently updated sources "
        "form `test` (sources without a date count as older; ties are broken by a seeded hash of the source id). "
        "A source keeps its side from one version to the next.",
        "",
    ]
    sides = {family: [counts[(family, s)] for s in SPLITS] for family in families}
    lines += family_table({f: [*row, sum(row)] for f, row in sides.items()}, [*SPLITS, "total"])
    totals = [meta["splits"][s]["tasks"] for s in SPLITS]
    lines += [f"| **total** | | {totals[0]} | {totals[1]} | {sum(totals)} |", ""]
    lines += [
        "## Using it",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        'tasks = load_dataset("<this folder or Hub repo>")',
        f'task = tasks["{splits[-1] if splits else "test"}"][0]',
        'print(task["instruction"])  # input files: task["files"][i]["path"], e.g. files/<ab>/<id>/train.csv',
        "```",
        "",
        "Each row is one task: `id`, `family`, `source_id`, `source_version`, `split`, `instruction`, "
        "`metric` (name, target and key columns, tolerance), `pass_bar` (a modelling or forecasting task's own "
        "bar, where it has one; see below), `limits` (code runs and seconds per run), `files` "
        "(the input files with their release path, size, sha256, header and row count), `generator_version`, "
        "`seed` and `package_versions` (the library stack the reference ran on; IF answers are exact for that "
        "stack). Answers, reference code and predictions, the sampled IF spec and baseline scores are not here.",
        "",
        "## How tasks are graded",
        "",
        "The agent's `predictions.csv` must hold the metric's key columns and target columns, one row per row of "
        "`test.csv`; rows are joined on the key columns: a key whose answers are all integers matches by "
        "integer value (`12.0` finds `12`, `12.5` finds nothing), any other key by its exact text (`007` is "
        'not `7`). A question task\'s `answer.json` is `{"answer": <value>}` in the format its question states. '
        "A missing or malformed file scores the metric's worst value.",
        "",
        "| family | the agent | score |",
        "|---|---|---|",
    ]
    for family in families:
        metrics = {
            (t["metric"]["name"], t["metric"].get("tolerance")): t["metric"]
            for t in tasks
            if t["family"] == family
        }
        graded = "; ".join(_graded(family, m) for _, m in sorted(metrics.items(), key=lambda kv: str(kv[0])))
        lines.append(f"| {family} | {family_named(family).words.agent} | {cell(graded)} |")
    lines += ["", bar_rule()]
    mix = answer_type_mix(tasks)
    if mix:
        lines += [
            "",
            "Question tasks (QA over one table; Lake over a folder of files with distractors and untidy files, "
            "each with sub-tasks: which files, the join key or row count, a cleaning step) are generated by "
            "programs over the data, and every answer is certified by running the program twice. Their answer "
            "types, graded as KramaBench grades them:",
            "",
            "| family | answer type | tasks | scored by |",
            "|---|---|---:|---|",
        ]
        for family in in_order(mix):
            for kind, n in sorted(mix[family].items()):
                lines.append(f"| {family} | {kind} | {n} | {ANSWER_TYPE_TEXT.get(kind, '')} |")
    lines += ["", *skill_lines(meta["skill"])]
    lines += [
        "## Sources and licenses",
        "",
        "The tasks' files are derived from these sources and stay under their licenses (hence `license: other`).",
        "",
        "| source | title | split | tasks | updated | license |",
        "|---|---|---|---:|---|---|",
    ]
    for s in meta["sources"]:
        title = f"[{cell(s['title'])}]({s['url']})" if s.get("url") else cell(s.get("title"))
        lines.append(
            f"| `{s['id']}` | {title} | {s['split']} | {s['tasks']} | {(s.get('date') or 'unknown')[:10]} "
            f"| {cell(s.get('license') or 'not stated')} |"
        )
    verdicts = meta["verdicts"]
    gate = (
        f"tasks passed the validation gate (verdicts fingerprint `{verdicts['fingerprint']}`)"
        if verdicts["present"]
        else "no validation verdicts existed when this version was built, so every generated task was released"
    )
    lines += [
        "",
        "## Lineage",
        "",
        f"- Generator versions: {', '.join(meta['generator_versions'])}; {gate}.",
        f"- Reference stacks: {'; '.join(meta['package_versions']) or 'unknown'}.",
        f"- Previous version: {meta['previous_version'] or 'none'}; see `CHANGELOG.md`.",
        "- `manifest.json` lists every file with its size and sha256, the task ids, and source ids and versions.",
        "",
    ]
    return front_matter(data, "\n".join(lines))


def private_card(meta: dict[str, Any]) -> str:
    data = DatasetCardData(
        pretty_name=f"{meta['pretty_name']} (answers)",
        license="other",
        tags=["benchmark", "dareforge", "private"],
        configs=[
            {"config_name": "default", "data_files": [{"split": "private", "path": "data/private.parquet"}]}
        ],
    )
    body = "\n".join(
        [
            f"# {meta['pretty_name']}: answers (private)",
            "",
            f"The private half of `{meta['public_release']}` version **{meta['version']}**: for each of its "
            f"{len(meta['tasks'])} tasks, `answers/<ab>/<task_id>/` (`<ab>`: the id's first two characters) holds the held-out answers, the reference "
            "predictions and code (IF: `reference.py`, `reference_predictions.csv`, `spec.json`; MM and time "
            "series: `strong_reference.py`, `strong_predictions.csv`; QA and Lake: `reference.py`, `answer.json`, "
            "`subtask-<id>.json`, and a Lake's `cleaning.py`). `data/private.parquet` has one row per task "
            "with its metric, scores, spec and reference package versions.",
            "",
            "Keep this out of agent sandboxes and LLM prompts: it is what tasks are graded against.",
            "",
            "Licenses follow the sources listed in the public card.",
            "",
        ]
    )
    return front_matter(data, body)
