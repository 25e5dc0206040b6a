"""What most benchmarks start from: a store in a temporary folder with the builtin sources' tasks generated."""

from __future__ import annotations

import os
from collections.abc import Sequence

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.families.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.understand.understand_stage import understand


def bench_config(tmp: str, sources: Sequence[str] = (), questions: bool = True) -> Config:
    """Defaults with the store under `tmp`; `sources`: builtin ids (empty: the whole catalog). `questions=False`
    generates prediction tasks only, for benches whose scripted model writes predictions."""
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = f"{tmp}/store", f"{tmp}/work"
    cfg.builtin.include = list(sources)
    cfg.builtin.rdatasets = 0  # the core catalog only: figures stay comparable across releases
    if not questions:
        cfg.generate.qa_per_source = cfg.generate.lakes_per_source = 0
    return cfg


def prepared(cfg: Config) -> RunContext:
    """Crawl, filter, understand and prepare into `cfg`'s store: what generate starts from."""
    ctx = RunContext.from_config(cfg, show_progress=False)
    crawl(ctx)
    filter_sources(ctx)
    understand(ctx)
    prepare(ctx)
    return ctx


def generated(cfg: Config) -> RunContext:
    """Crawl, filter, prepare and generate into `cfg`'s store; the context to go on with."""
    ctx = prepared(cfg)
    generate(ctx)
    return ctx


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (all cores, /proc/stat): kernels started inside bubblewrap
    are not children this process can account for, so the machine's count is the one that sees them."""
    with open("/proc/stat") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def cpu_bound_note(busy: float, episodes: int, ideal: float, wall: float) -> str:
    """How far the machine's CPU alone bounds a run of agent episodes. Each episode gets a fresh kernel so that
    no episode sees another's state (a sandbox and a kernel forked from the warm fork server: about 0.1
    CPU-second; with `sandbox.fork_kernels: false` a fresh interpreter and its imports, about 0.8); on few cores
    that CPU, not the model, can bound the run."""
    cores = os.cpu_count() or 1
    floor = busy / cores
    best = max(ideal, floor)
    bound = " (CPU-bound here: more cores, not less overhead, would close the gap)" if floor > ideal else ""
    return (
        f"  machine CPU busy {busy:.1f}s ({busy / episodes:.2f}s per episode); on {cores} cores that needs "
        f"{floor:.1f}s of wall time at least, so the best this machine can do is {best:.1f}s: ratio to that "
        f"{best / wall:.2f}{bound}"
    )
