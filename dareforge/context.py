"""What every stage receives: the config, the store, and where to report progress."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dareforge.config import Config, load_config
from dareforge.store import Store

log = logging.getLogger("dareforge")


@dataclass
class RunContext:
    config: Config
    store: Store
    console: Console = field(default_factory=lambda: Console(stderr=True))
    show_progress: bool = True

    @classmethod
    def from_config(cls, config: Config | None = None, **kwargs) -> RunContext:
        config = config or load_config()
        return cls(config=config, store=Store(config.store.root), **kwargs)

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
