"""Source understanding on real Kaggle datasets: `../shared/dev-kaggle` (40 datasets in Kaggle's download
layout, with the task a published benchmark chose for each in `choices.json`), run as a new user would run
them: a mirror, no LLM endpoint, the whole pipeline to the validation gate.

Figures:
- framed: sources with a chosen framing;
- target agreement: a chosen framing's target is one of the listed targets, over the sources whose listed
  target is learnable (decided by the same stage with the listed target named in the config: a listed target
  that passes only because the config overrules the learnability check is not learnable);
- kind agreement: the accepted prediction tasks include the listed kind (class, reg, ts);
- time column agreement, for the listed series: the chosen series framing uses the listed time column;
- sources with an accepted task, tasks per source, and the share of generated TS-CF tasks accepted;
- listed series with an accepted series task (TS-XF or TS-CF), the issue's 75% target;
- question tiers and the one-step baseline on the accepted QA and Lake tasks (`question_shortcuts`).

`DAREFORGE_DEV_KAGGLE` names the folder (default `../shared/dev-kaggle` beside the checkout); without it the
bench says "skipped: no dev set". Never part of `make test`: the datasets are not redistributable.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter, defaultdict
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from bench.common import bench_config
from bench.question_shortcuts import tier_lines
from dareforge.config import SourceOverride
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.families.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.queries import accepted_source_ids
from dareforge.schema import Framing, Source, Task, TaskType, Verdict
from dareforge.understand.understand_stage import understand
from dareforge.validators.validate import validate

TARGETS = {
    "target agreement": 0.85,
    "sources with an accepted task": 0.90,
    "TS-CF accepted": 0.50,
}
KIND_FAMILIES = {"class": "Class-", "reg": "Reg-", "ts": "TS-"}
KIND_TYPES = {"class": TaskType.CLASSIFICATION, "reg": TaskType.REGRESSION, "ts": TaskType.TIME_SERIES}


def dev_set() -> Path | None:
    default = Path(__file__).resolve().parents[2] / "shared" / "dev-kaggle"
    folder = Path(os.environ.get("DAREFORGE_DEV_KAGGLE", default))
    return folder if (folder / "choices.json").is_file() and (folder / "mirror").is_dir() else None


def _folder_of(source: Source) -> str:
    return PurePosixPath(unquote(urlparse(source.url or "").path)).name


def _context(tmp: str, mirror: Path, overrides: dict[str, SourceOverride] | None = None) -> RunContext:
    cfg = bench_config(tmp)
    cfg.builtin.enabled = False
    cfg.mirror.paths = [str(mirror)]
    cfg.llm.local.enabled = False
    cfg.sources = overrides or {}
    return RunContext.from_config(cfg, show_progress=False)


def learnable_listed(tmp: str, mirror: Path, choices: dict) -> dict[str, bool]:
    """Folder -> whether the listed target passes the stage's checks on its own merits."""
    ctx = _context(tmp, mirror)
    crawl(ctx)
    folders = {s.id: _folder_of(s) for s in ctx.store.iter_records(Source)}
    overrides = {}
    for source_id, folder in folders.items():
        choice = choices.get(folder)
        if choice:
            overrides[source_id] = SourceOverride(
                target=choice["target"][:1],
                task_type=KIND_TYPES[choice["kind"]].value,
                time_column=choice.get("time_column"),
            )
    ctx = _context(tmp, mirror, overrides)
    filter_sources(ctx)
    ids = accepted_source_ids(ctx)
    understand(ctx, ids)
    verdicts = {}
    for source_id in ids:
        chosen = [f for f in ctx.store.read_partition(Framing, source_id) if f.status == "chosen"]
        verdicts[folders[source_id]] = (
            bool(chosen)
            and not any(f.questions_only for f in chosen)
            and not any("kept because dareforge.yaml names it" in check for f in chosen for check in f.checks)
        )
    return verdicts


def measure(ctx: RunContext, choices: dict, learnable: dict[str, bool]) -> None:
    sources = {s.id: s for s in ctx.store.iter_records(Source)}
    folders = {sid: _folder_of(s) for sid, s in sources.items()}
    accepted = {v.task_id for v in ctx.store.read_records(Verdict) if v.accepted}
    tasks = [t for t in ctx.store.read_records(Task) if t.variant_of is None]
    by_source: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        if task.id in accepted:
            by_source[task.source_id].append(task)
    chosen: dict[str, list[Framing]] = defaultdict(list)
    for framing in ctx.store.read_records(Framing):
        if framing.status == "chosen" and not framing.questions_only:
            chosen[framing.source_id].append(framing)
    n = len(sources)
    agree, with_learnable, kinds, times, series, misses = 0, 0, 0, 0, 0, []
    forecast, unforecast = 0, []
    for sid in sorted(sources):
        choice = choices.get(folders[sid])
        if choice is None:
            continue
        listed, kind = choice["target"], choice["kind"]
        picked = [f"{f.framing}" for f in chosen[sid]]
        families = {t.family for t in by_source[sid]}
        kinds += any(f.startswith(KIND_FAMILIES[kind]) for f in families)
        if kind == "ts":
            series += 1
            if any(f.startswith("TS-") for f in families):
                forecast += 1
            else:
                unforecast.append(folders[sid])
            times += any(
                f.task_type == TaskType.TIME_SERIES
                and choice["time_column"] in {f.time_column, *(f.time_axis.columns if f.time_axis else [])}
                for f in chosen[sid]
            )
        if not learnable.get(folders[sid]):
            continue
        with_learnable += 1
        if any(f.target_columns and f.target_columns[0] in listed for f in chosen[sid]):
            agree += 1
        else:
            misses.append(f"{folders[sid]}: listed {kind} {listed}, chose {picked or 'nothing'}")
    cf = [t for t in tasks if t.family == "TS-CF"]
    cf_accepted = sum(t.id in accepted for t in cf)
    yielded = sum(1 for sid in sources if by_source[sid])
    accepted_tasks = sum(len(v) for v in by_source.values())
    prediction = sum(1 for v in by_source.values() for t in v if t.family not in ("QA", "Lake"))
    figures = {
        "target agreement": agree / with_learnable if with_learnable else 0.0,
        "sources with an accepted task": yielded / n if n else 0.0,
        "TS-CF accepted": cf_accepted / len(cf) if cf else 0.0,
    }
    print(
        f"understand, dev-kaggle ({n} real Kaggle datasets, {with_learnable} with a learnable listed target):"
    )
    for name, value in figures.items():
        verdict = "OK" if value >= TARGETS[name] else "MISSED"
        print(f"  {name}: {value:.0%} (target >= {TARGETS[name]:.0%}) {verdict}")
    print(
        f"  ({agree}/{with_learnable} targets; {yielded}/{n} sources with an accepted task; "
        f"{cf_accepted}/{len(cf)} TS-CF)"
    )
    print(f"  framed: {sum(1 for sid in sources if chosen[sid])}/{n}")
    print(f"  accepted prediction tasks of the listed kind: {kinds}/{n}")
    print(f"  listed series with the listed time column: {times}/{series}")
    share = forecast / series if series else 0.0
    print(
        f"  listed series with an accepted series task: {share:.0%} ({forecast}/{series}; target >= 75%) "
        f"{'OK' if share >= 0.75 else 'MISSED'}" + (f"; none: {', '.join(unforecast)}" if unforecast else "")
    )
    print(
        f"  tasks per source: {accepted_tasks / n:.2f} accepted ({prediction / n:.2f} prediction); "
        f"per family {dict(sorted(Counter(t.family for v in by_source.values() for t in v).items()))}"
    )
    for miss in misses:
        print(f"  miss: {miss}")
    for sid in sorted(sources):
        if not by_source[sid]:
            print(f"  no task: {folders[sid]}")


def main() -> None:
    folder = dev_set()
    if folder is None:
        print("understand, dev-kaggle: skipped: no dev set (set DAREFORGE_DEV_KAGGLE to its folder)")
        return
    choices = json.loads((folder / "choices.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        learnable = learnable_listed(tmp, folder / "mirror", choices)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = run_dev_set(tmp, folder)
        measure(ctx, choices, learnable)
        for line in tier_lines(ctx, "dev-kaggle"):
            print(line)


def run_dev_set(tmp: str, folder: Path) -> RunContext:
    """The dev set's sources through the whole pipeline to the gate, in a store under `tmp`."""
    ctx = _context(tmp, folder / "mirror")
    crawl(ctx)
    filter_sources(ctx)
    understand(ctx)
    prepare(ctx)
    generate(ctx)
    validate(ctx)
    return ctx


if __name__ == "__main__":
    main()
