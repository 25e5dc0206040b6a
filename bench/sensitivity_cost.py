"""IF mutation testing (`reference_solutions.sensitivity`, reported by the `sensitivity` check) on the builtin
catalog with the default config: its cost against generate's, and what it finds.

Cost, in CPU seconds (on a shared machine wall time measures the neighbours too): the mutation tests run inside
generate (one worker script per IF task with every mutant, plus the run of the settled instruction as followed,
and their grading), summed in generate's report (`seconds_in["sensitivity"]`). The ratio is that sum over
the rest of generate's CPU seconds for the whole run (this process and the reference workers it starts, on a
fresh store): the share of generate's CPU time the mutation tests add (target: at most 0.5).

Findings, per IF family: the stated requirements and the share that change the predictions (over every
mutation-tested task and over the accepted ones), the tasks the gate rejects for too few
(`validate.min_sensitive_requirements`) or flags for leaving out one that matters; then, over all families,
the share per kind of requirement.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path

from bench.common import bench_config, prepared
from bench.ladder_cost import children_cpu, own_cpu
from dareforge.context import RunContext
from dareforge.families.generate import generate
from dareforge.report import process_cpu_seconds
from dareforge.schema import Task, Validation, Verdict
from dareforge.validators.sensitivity import TASK_CHECKS
from dareforge.validators.validate import validate

TARGET_RATIO = 0.5
TARGET_SHARE = 0.95


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench_config(tmp)
        cfg.validate_.data_docs = False
        ctx = prepared(cfg)
        cpu_started = own_cpu() + children_cpu() + live_children_cpu()
        generated = generate(ctx)
        generate_cpu = own_cpu() + children_cpu() + live_children_cpu() - cpu_started
        validate(ctx)
        rows = _findings(ctx)
    spent = generated.seconds_in.get("sensitivity", 0.0)
    rest = generate_cpu - spent
    ratio = spent / rest if rest > 0 else float("inf")
    print(
        f"sensitivity (builtin): {len(rows)} IF tasks mutation-tested, {spent:.1f} CPU s "
        f"({spent / max(len(rows), 1):.2f} per task); the rest of generate: {rest:.1f} CPU s "
        f"({generated.seconds:.1f}s wall for all of generate)"
    )
    print(
        f"  sensitivity/generate, CPU: {ratio:.2f} (target <= {TARGET_RATIO}) "
        f"{'OK' if ratio <= TARGET_RATIO else 'MISSED'}"
    )
    _print_findings(rows)


def live_children_cpu() -> float:
    """CPU seconds of this process's live children: generate keeps its reference workers for the next call, so
    they are not reaped (and not in `children_cpu`) when it returns."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == os.getpid():
                total += process_cpu_seconds(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue  # ended while being read
    return total


def _findings(ctx: RunContext) -> list[tuple[str, dict, bool, list[str]]]:
    """Each mutation-tested task's family, finding details, whether it was accepted, and its gate reasons."""
    name = TASK_CHECKS[0].name
    tasks = {t.id: t for t in ctx.store.iter_records(Task)}
    verdicts = {v.task_id: v for v in ctx.store.iter_records(Verdict)}
    return [
        (
            tasks[f.task_id].family,
            json.loads(f.details),
            verdicts[f.task_id].accepted,
            [r for r in verdicts[f.task_id].reasons if r.startswith(f"{name}:")],
        )
        for f in ctx.store.iter_records(Validation)
        if f.check == name and f.score is not None
    ]


def _share(details: list[dict]) -> str:
    stated = sum(d["stated"] for d in details)
    matter = sum(d["matter"] for d in details)
    return f"{matter}/{stated} = {matter / stated:.1%}" if stated else "-"


def _print_findings(rows: list[tuple[str, dict, bool, list[str]]]) -> None:
    by_family: dict[str, list[tuple[dict, bool, list[str]]]] = defaultdict(list)
    for family, details, accepted, reasons in rows:
        by_family[family].append((details, accepted, reasons))
    for family, found in sorted(by_family.items()):
        accepted = [d for d, ok, _ in found if ok]
        flagged = sum(any("leaves out" in r for r in reasons) for _, _, reasons in found)
        print(
            f"  {family}: {len(found)} tasks; stated requirements that matter {_share([d for d, _, _ in found])}, "
            f"on the {len(accepted)} accepted {_share(accepted)}; rejected by sensitivity "
            f"{sum(bool(reasons) for _, _, reasons in found)} (of them flagged for leaving one out: {flagged})"
        )
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for _, details, _, _ in rows:
        for requirement in details["requirements"]:
            if requirement["stated"]:
                kind = requirement["name"].rstrip("0123456789 ")
                kinds[kind][0] += 1
                kinds[kind][1] += requirement["matters"]
    total = _share([d for _, d, _, _ in rows])
    print(f"  all IF families: {total} (target >= {TARGET_SHARE:.0%}); per kind of requirement:")
    print("    " + ", ".join(f"{kind} {m}/{n}" for kind, (n, m) in sorted(kinds.items())))
