"""Building the small stores task-level tests start from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.schema import FilterDecision
from dareforge.store import Store

TEST_IF_VARIANTS = 2


def store_config(root: Path, sources: list[str]) -> Config:
    """Defaults with the store under `root` and only these builtin sources, and two IF seeds per framing (the
    default three would cost each test a third IF generation that proves nothing the second does not)."""
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    cfg.generate.if_variants = TEST_IF_VARIANTS
    cfg.builtin.include = sources
    return cfg


def prediction_only(cfg: Config) -> Config:
    """No question tasks (QA, Lake) and exactly `if_variants` IF seeds (no redraw in place of a workflow that
    asks nothing): for tests about the prediction families that count their tasks."""
    cfg.generate.if_redraws = 0
    cfg.generate.qa_per_source = 0
    cfg.generate.lakes_per_source = 0
    return cfg


def write_decisions(
    store: Store, source: str, *, kept: bool = True, reason: str | None = None, rules: int = 2
) -> None:
    """`rules` filter decisions about `source`, all kept or all dropped: a filter_decisions partition of the
    shape the filter writes, for tests of how tables are read."""
    store.write_records(
        source,
        [
            FilterDecision(
                source_id=source,
                source_version="v1",
                rule=f"rule-{r}",
                kept=kept,
                reason=reason or ("ok" if kept else "too small"),
                rules_fingerprint="f",
            )
            for r in range(rules)
        ],
    )


def prepared_store(ctx: RunContext) -> RunContext:
    """Crawl, filter, understand and prepare: the store a builder-level test starts from (no task yet)."""
    from dareforge.crawlers.crawl import crawl
    from dareforge.crawlers.filter import filter_sources
    from dareforge.generators.prepare import prepare
    from dareforge.understand.understand_stage import understand

    crawl(ctx)
    filter_sources(ctx)
    understand(ctx)
    prepare(ctx)
    return ctx


def generate_tasks(ctx: RunContext) -> RunContext:
    """Crawl, filter, understand, prepare and generate: the store a task-level test starts from."""
    from dareforge.families.generate import generate

    generate(prepared_store(ctx))
    return ctx


IRIS_RELEASE_SOURCES = ["sklearn-iris"]


def build_iris_release(root: Path) -> Path:
    """An iris-only store of prediction tasks with release `dareforge` (no validation run: every candidate task
    is released), under `root`; built once per session (conftest's `iris_release`) for the modules that start
    from it, each of which works on a copy (`copy_iris_release`)."""
    from dareforge.publish.release import build_release

    cfg = prediction_only(store_config(root, IRIS_RELEASE_SOURCES))
    build_release(generate_tasks(RunContext.from_config(cfg, show_progress=False)), "dareforge")
    return root


def copy_iris_release(shared: Path, root: Path) -> Config:
    """A copy of the shared iris release's store under `root` (a module's own: what it writes stays there), and
    the config that reads it."""
    shutil.copytree(shared / "store", root / "store")
    return prediction_only(store_config(root, IRIS_RELEASE_SOURCES))


def mirror_dataset(root: Path, name: str, files: dict[str, bytes], **meta: str) -> str:
    """A mirror folder laid out like a Kaggle dataset download (`someone/<name>`, CC0); returns its source id."""
    folder = root / name
    folder.mkdir(parents=True)
    record = {
        "id": f"someone/{name}",
        "title": name,
        "licenses": [{"name": "CC0-1.0"}],
        "lastUpdated": "2024-02-02",
        **meta,
    }
    (folder / "dataset-metadata.json").write_text(json.dumps(record))
    for fname, data in files.items():
        (folder / fname).write_bytes(data)
    return f"mirror.someone--{name}"
