"""What most benchmarks start from: a store in a temporary folder with the builtin sources' tasks generated."""

from __future__ import annotations

from collections.abc import Sequence

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.generators.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.understand.stage import understand


def bench_config(tmp: str, sources: Sequence[str] = ()) -> Config:
    """Defaults with the store under `tmp`; `sources`: builtin ids (empty: the whole catalog)."""
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = f"{tmp}/store", f"{tmp}/work"
    cfg.builtin.include = list(sources)
    cfg.builtin.rdatasets = 0  # the core catalog only: figures stay comparable across releases
    return cfg


def generated(cfg: Config) -> RunContext:
    """Crawl, filter, prepare and generate into `cfg`'s store; the context to go on with."""
    ctx = RunContext.from_config(cfg, show_progress=False)
    crawl(ctx)
    filter_sources(ctx)
    understand(ctx)
    prepare(ctx)
    generate(ctx)
    return ctx
