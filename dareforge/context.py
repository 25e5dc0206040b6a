"""What every stage receives: the config, the store, and where to report progress."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dareforge import scratch
from dareforge.config import Config
from dareforge.config_loader import load_config
from dareforge.store import Store

log = logging.getLogger("dareforge")
PROCESS_FOLDERS = "proc"


@dataclass
class RunContext:
    config: Config
    store: Store
    console: Console = field(default_factory=lambda: Console(stderr=True))
    show_progress: bool = True

    @classmethod
    def from_config(cls, config: Config | None = None, **kwargs) -> RunContext:
        config = config or load_config()
        store = Store(config.store.root, lock_dir=config.store.work_path / "locks")
        return cls(config=config, store=store, **kwargs)

    def source_lock(self, source_id: str) -> AbstractContextManager[None]:
        """The store lock of one source, held by every stage while it writes or deletes that source's files
        (raw and prepared versions, tasks, obscured variants) or reads files another stage may delete.

        Stages on different sources never wait for each other; two processes on the same source take turns, and
        the second finds the first one's outputs finished and reuses them.
        """
        return self.store.lock(f"source/{source_id}")

    @property
    def work_dir(self) -> Path:
        """`store.work_dir`, or its default derived from the store root."""
        return self.config.store.work_path

    def scratch_dir(self, name: str) -> Path:
        """A fresh, empty folder `<name>-<random>` in this process's own folder under the work dir (removed
        at exit, or by the next process when this one is killed: see `dareforge.scratch`); the caller removes it
        when done. Two processes never share one, even when they build the same thing."""
        return scratch.new_folder(self.work_dir / PROCESS_FOLDERS, name)

    def remove_dead_scratch(self) -> list[Path]:
        """Remove the scratch folders of processes that died without cleaning up (kill -9), here and in the
        system temp folder; a live process's folder is never touched (see `dareforge.scratch`)."""
        return scratch.remove_dead(self.work_dir / PROCESS_FOLDERS)

    def each_source(self, stage: str, source_ids: list[str]) -> Iterator[str]:
        """Each of `source_ids` in turn, under its lock (`source_lock`), with a progress bar named `stage`."""
        for source_id in self.each(stage, source_ids):
            with self.source_lock(source_id):
                yield source_id

    def each(self, description: str, items: list[str]) -> Iterator[str]:
        """Each of `items` in turn, with a progress bar named `description` that shows the item."""
        with self.progress() as progress:
            bar = progress.add_task(description, total=len(items), item="")
            for item in items:
                progress.update(bar, item=item)
                yield item
                progress.advance(bar)

    def progress(self) -> Progress:
        return Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[item]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.show_progress,
            transient=True,
        )
