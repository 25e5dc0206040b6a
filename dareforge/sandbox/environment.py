"""The sandbox as the agent engine sees it: a small typed interface, so a second backend (a container, a remote
kernel) can plug in beside bubblewrap's `Sandbox` and the `KernelPool` that hands those out.

Lifecycle: a factory makes one environment per episode (started or not); `start` is idempotent; `execute`
runs one cell and returns an `Execution` (output, error, status, files written); `close` ends it, and the
engine always calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from dareforge.sandbox.execution import Execution


@runtime_checkable
class SandboxEnvironment(Protocol):
    def start(self) -> SandboxEnvironment: ...

    def execute(self, code: str) -> Execution: ...

    def close(self) -> None: ...


SandboxFactory = Callable[[Path, Path, float], SandboxEnvironment]
"""`factory(inputs, workspace, seconds_per_execution)` -> an environment on those folders, started or not:
`Sandbox` itself, or `KernelPool.acquire`. Called from a worker thread (it may block)."""
