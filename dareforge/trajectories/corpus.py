"""Training corpora of a release: select verified (and judged) trajectories, then write every training export.

Reads the `gold--<release>` and `sampled--<endpoint>--<release>` trajectory partitions, keeps trajectories of
the release's tasks on the `synthesize.split` side (train by default, so no benchmark test task leaks into
training data), applies `select` with `synthesize.strategy` and the `judge:` thresholds (with the judgements
of `judge.endpoint`, when one is set) and writes `<release>-<format>` in every registered training format
(`dareforge.exports.formats`): `<release>-sft` holds the chosen trajectories as chat messages, `<release>-rl`
the same tasks as prompts with DARE-bench's reward. Each is versioned like a release: the same selection gives
the same version, and nothing new is written. Trajectories are selected only when a format reads them.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from dareforge.context import RunContext
from dareforge.exports import ExportError
from dareforge.exports.export_format import ChosenTrajectories, ExportJob, ExportResult, TrainingExport
from dareforge.exports.formats import FORMATS, export_format
from dareforge.families.registry import pass_bars
from dareforge.judge.judge import judgement_partition, trajectory_partitions
from dareforge.publish.release import Release, load_release
from dareforge.publish.targets import LocalTarget
from dareforge.queries import partition_name
from dareforge.report import StageReport
from dareforge.schema import Judgement, Task, Trajectory
from dareforge.trajectories.select import Selection, select
from dareforge.trajectories.synthesize import is_valid, own_bars

log = logging.getLogger(__name__)


@dataclass
class CorpusResult:
    release: str
    version: str
    partitions: list[str]
    tasks: int
    exports: dict[str, ExportResult] = field(default_factory=dict)  # format name -> its export
    selection: Selection | None = None
    notes: list[str] = field(default_factory=list)


def corpus_partitions(ctx: RunContext, release: str) -> tuple[list[str], list[str]]:
    """(gold partitions, sampled partitions) of `release` in the `trajectories` table."""
    suffix = partition_name("", release)  # "--<release>", made safe the way partitions are named
    names = [p for p in trajectory_partitions(ctx.store) if p.endswith(suffix)]
    gold = [p for p in names if p == partition_name("gold", release)]
    sampled = [p for p in names if p.startswith("sampled--")]
    return gold, sampled


def corpus_tasks(ctx: RunContext, rel: Release) -> list[Task]:
    side = ctx.config.synthesize.split
    splits = rel.splits
    return [t for t in rel.tasks() if side == "all" or splits.get(t.id) == side]


def training_formats(names: Sequence[str] | None = None) -> list[TrainingExport]:
    """The training formats called `names` (default: every registered one), in registry order."""
    formats = [export_format(name) for name in (FORMATS if names is None else names)]
    layouts = [f.name for f in formats if not isinstance(f, TrainingExport)]
    if layouts and names is not None:
        raise ExportError(
            f"{', '.join(layouts)}: another benchmark's folder layout, not training data; write it with "
            "`dareforge export --format NAME --dest FOLDER`"
        )
    return [f for f in formats if isinstance(f, TrainingExport)]


def build_corpus(
    ctx: RunContext,
    release: str = "dareforge",
    version: str | None = None,
    *,
    formats: Sequence[str] | None = None,
    strategy: str | None = None,
    judge_endpoint: str | None = None,
    today: date | None = None,
) -> CorpusResult:
    """Select and export in the training `formats` (default: all); see the module doc. `strategy` and
    `judge_endpoint` override the config; `today` names new export versions (default: the UTC date)."""
    chosen = training_formats(formats)
    rel = load_release(ctx, release, version)
    tasks = corpus_tasks(ctx, rel)
    result = CorpusResult(rel.name, rel.version, [], len(tasks))
    if not tasks:
        result.notes.append(f"release {rel.name}@{rel.version} has no {ctx.config.synthesize.split} tasks")
        return result
    trajectories = None
    if any(f.reads_trajectories for f in chosen):
        strategy = strategy or ctx.config.synthesize.strategy
        trajectories = _choose(ctx, rel, tasks, result, strategy, judge_endpoint)
    job = ExportJob(ctx, rel, tasks, trajectories, today=today)
    for fmt in chosen:
        if fmt.reads_trajectories and trajectories is None:
            continue  # the notes say why none were chosen
        result.exports[fmt.name] = fmt.export(job)
    return result


def export_corpus(ctx: RunContext, release: str, copy_to: Path | None = None) -> StageReport:
    """The corpus stage of `dareforge run`: `build_corpus` of the latest version of `release`, each export copied
    to `copy_to` when given. The report: written, the prefixes of new export versions; reused, the exports
    whose content was there already."""
    corpus = build_corpus(ctx, release)
    report = StageReport("corpus", lines=[f"corpus: {note}" for note in corpus.notes])
    for built in corpus.exports.values():
        if copy_to is not None:
            LocalTarget(copy_to).publish(built.export)
        if built.created:
            report.written.append(built.export.prefix)
        else:
            report.reused += 1
        state = "new version" if built.created else "unchanged"
        report.lines.append(f"{built.export.kind}: {built.name}@{built.version} ({state})")
    return report


def _choose(
    ctx: RunContext,
    rel: Release,
    tasks: list[Task],
    result: CorpusResult,
    strategy: str,
    judge_endpoint: str | None,
) -> ChosenTrajectories | None:
    gold_parts, sampled_parts = corpus_partitions(ctx, rel.name)
    result.partitions = gold_parts + sampled_parts
    wanted = {t.id for t in tasks}

    def read(partitions: list[str]) -> list[Trajectory]:
        rows = [t for p in partitions for t in ctx.store.read_partition(Trajectory, p)]
        return [t for t in rows if t.task_id in wanted]

    gold, sampled = read(gold_parts), read(sampled_parts)
    if not gold and not sampled:
        result.notes.append(
            f"no trajectories of {rel.name}'s {ctx.config.synthesize.split} tasks yet: run "
            "`dareforge synthesize` (gold trajectories need no model)"
        )
        return None
    judge = judge_endpoint or ctx.config.judge.endpoint
    judgements: list[Judgement] = []
    if judge:
        for p in result.partitions:
            judgements += ctx.store.read_partition(Judgement, judgement_partition(judge, p))
    bars = pass_bars(ctx.config.synthesize.pass_bars)
    task_bars = own_bars(tasks)
    selection = select(
        gold + sampled,
        judgements,
        strategy=strategy,
        judge_config=ctx.config.judge,
        attempts=sampled,
        valid=lambda t: is_valid(t, bars, task_bars),
    )
    result.selection = selection
    if not selection.kept:
        result.notes.append(f"no trajectory survived selection ({dict(selection.counts())} dropped by stage)")
        return None
    lineage: dict[str, Any] = {
        "strategy": strategy,
        "judge_endpoint": judge,
        "judge": ctx.config.judge.model_dump(mode="json"),
        "pass_bars": bars,
        "task_bars": task_bars,
        "considered": len(gold) + len(sampled),
        "dropped_by_stage": dict(sorted(selection.counts().items())),
        "dropped_reasons": dict(Counter(d.reason.split(" (")[0] for d in selection.dropped).most_common(10)),
    }
    log.info(
        "corpus %s@%s: %d of %d trajectories kept (%s)",
        rel.name,
        rel.version,
        len(selection.kept),
        len(gold) + len(sampled),
        strategy,
    )
    return ChosenTrajectories(selection.kept, lineage, result.partitions, {t.id: "gold" for t in gold})
