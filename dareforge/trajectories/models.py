"""Which models a run uses: the configured endpoints, else the embedded local model, else none.

`run_models(ctx, log_dir)` is a context manager yielding a `RunModels`. With endpoints under `llm.endpoints` it
uses them for everything. Without, and with the local model installed (`make local-llm`), it starts the local
server for the block, registers it as the one endpoint, caps reply length at `llm.local.max_tokens` and gives
it only `llm.local.tasks_per_run` tasks per stage: a 135M-parameter model writing ~80 tokens/s on 2 cores
exercises the whole path (probe, sampling, grading, selection) in minutes. A task it solves without the data
is shortcut-solvable like any other. Otherwise the block runs without a model and `why` says how to get one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dareforge.context import RunContext
from dareforge.llm.local import LocalModelError, find_local_model, local_endpoint


@dataclass
class RunModels:
    endpoints: list[str]
    local: bool
    why: str
    tasks_per_stage: int | None = None  # None: every task

    def limit(self, task_ids: Sequence[str]) -> list[str] | None:
        """The task ids a stage gives the models (sorted, so runs agree), or None for all."""
        if self.tasks_per_stage is None:
            return None
        return sorted(task_ids)[: self.tasks_per_stage]


@contextlib.contextmanager
def run_models(ctx: RunContext, log_dir: Path) -> Iterator[RunModels]:
    llm = ctx.config.llm
    if llm.endpoints:
        yield RunModels([e.name for e in llm.endpoints], False, "configured endpoints")
        return
    model, why = find_local_model(llm.local)
    if model is None:
        yield RunModels([], False, why)
        return
    with contextlib.ExitStack() as stack:
        try:
            endpoint = stack.enter_context(local_endpoint(llm.local, log_dir))
        except LocalModelError as exc:
            yield RunModels([], False, f"the local model could not start: {exc}")
            return
        saved = (llm.endpoints, ctx.config.probe.max_tokens, ctx.config.synthesize.max_tokens)
        llm.endpoints = [endpoint]
        ctx.config.probe.max_tokens = ctx.config.synthesize.max_tokens = llm.local.max_tokens
        try:
            yield RunModels([endpoint.name], True, f"local model {endpoint.model}", llm.local.tasks_per_run)
        finally:
            llm.endpoints, ctx.config.probe.max_tokens, ctx.config.synthesize.max_tokens = saved
