"""The export card's section "What training on it did", and writing it into the export's README.

The section is rebuilt from the store record (`dareforge.teach.run`), between two markers, so a later run
replaces it instead of adding another; the manifest's entry for README.md (size, sha256) is rewritten after it,
so `dareforge release verify`-style checks of the export stay clean.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dareforge.exports.export_format import Export
from dareforge.publish.files import write
from dareforge.publish.versions import MANIFEST

BEGIN = "<!-- dareforge teach: begin -->"
END = "<!-- dareforge teach: end -->"
README = "README.md"


def _pct(interval: Mapping[str, float]) -> str:
    return f"{interval['value']:.0%} [{interval['low']:.0%}, {interval['high']:.0%}]"


def _num(interval: Mapping[str, float], signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{interval['value']:{sign}.3f} [{interval['low']:{sign}.3f}, {interval['high']:{sign}.3f}]"


def section(record: Mapping[str, Any]) -> str:
    """Markdown: the recipe, one table per variant (before, after, change with 95% intervals), the verdict."""
    recipe = record["recipe"]
    evaluation = record["evaluation"]
    lines = [
        "## What training on it did",
        "",
        f"A fixed proxy model (`{recipe['model']}`) was fine-tuned on this export's train split with a fixed recipe "
        f"(LoRA rank {recipe['lora_rank']} through TRL's SFTTrainer, loss on the assistant turns only, "
        f"{recipe['steps']} steps of {recipe['batch_size'] * recipe['grad_accumulation']} chats of at most "
        f"{recipe['max_length']} tokens, learning rate {recipe['learning_rate']:g}, seed {recipe['seed']}), then the "
        f"base and the tuned model played {evaluation['tasks']} test tasks of release `{record['release']}` "
        f"({evaluation['sources']} sources, none of them in the training rows) through `dareforge evaluate`: the "
        f"same sandbox and limits, the `tools` protocol, {evaluation['samples']} sample(s) per task at temperature "
        "0. Cells: value [95% bootstrap interval over tasks]; the change's interval is paired (same resample).",
        "",
    ]
    for variant in record["variants"]:
        lines += [f"### Variant `{variant['name']}`: {variant['rows']} training rows ({variant['note']})", ""]
        fitted = variant.get("training", {}).get("fit")
        if (
            fitted
        ):  # a row cut at max_length loses its later turns; one cut before its first reply trains nothing
            share = fitted["assistant_tokens_trained"] / max(fitted["assistant_tokens"], 1)
            lines += [
                f"{fitted['rows_kept']} of them keep assistant tokens within {fitted['max_length']} tokens; "
                f"{share:.0%} of their assistant tokens trained (the rest cut).",
                "",
            ]
        lines += [
            "| family | tasks | pass before | pass after | score before | score after | score change | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for c in variant["changes"]:
            lines.append(
                f"| {c['family']} | {c['tasks']} | {_pct(c['pass_before'])} | {_pct(c['pass_after'])} | "
                f"{_num(c['score_before'])} | {_num(c['score_after'])} | {_num(c['score_change'], True)} | "
                f"{c['verdict']} |"
            )
        lines.append("")
    lines += [verdict(record["variants"]), ""]
    return "\n".join(lines)


def verdict(variants: Sequence[Mapping[str, Any]]) -> str:
    """One sentence: which variant taught more, or that the proxy learned nothing measurable."""
    totals = {v["name"]: next(c for c in v["changes"] if c["family"] == "total") for v in variants}
    better = [name for name, c in totals.items() if c["verdict"] == "better"]
    if not better:
        said = "; ".join(f"`{n}` {_num(c['score_change'], True)}" for n, c in totals.items())
        return (
            "**The proxy learned nothing measurable**: the interval of the total score change includes 0 or is "
            f"below it for every variant ({said})."
        )
    best = max(better, key=lambda n: totals[n]["score_change"]["value"])
    return (
        f"**`{best}` taught most**: total score change {_num(totals[best]['score_change'], True)}, an interval "
        "above 0."
    )


def attach(export: Export, text: str) -> None:
    """Put `text` into the export's README between the markers (replacing an earlier one), then its manifest."""
    store = export.store
    key = f"{export.prefix}/{README}"
    old = store.read_bytes(key).decode()
    if BEGIN in old and END in old:
        head, _, rest = old.partition(BEGIN)
        old = head.rstrip("\n") + "\n" + rest.partition(END)[2].lstrip("\n")
    new = f"{old.rstrip()}\n\n{BEGIN}\n{text.rstrip()}\n{END}\n"
    entry = write(store, key, README, new.encode())
    manifest = dict(export.manifest)
    manifest["files"] = [entry if f["name"] == README else f for f in manifest["files"]]
    store.write_json(f"{export.prefix}/{MANIFEST}", manifest)
