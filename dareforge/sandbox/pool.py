"""`KernelPool`: sandboxes started ahead of time, so a trajectory does not wait for a kernel to boot.

Bind mounts are fixed when bwrap starts, and each task has other inputs, so a pooled sandbox is started on two
folders of its own under the pool's `root`: `sN/input` (bound read-only at /task/input, empty) and `sN/work`
(bound read-write at /task/work). `acquire(inputs, workspace)` then hands it one task:

- inputs: the task's files are hard-linked into `sN/input` (copied where linking fails, e.g. across file
  systems). The kernel sees them appear in its read-only /task/input; a hard link through a read-only mount
  cannot be written either.
- workspace: `sN/work` moves to `workspace` (`Sandbox.move_workspace`): a tmpfs workspace is bound there, a
  plain one renamed (a bind mount follows the folder, not its name), so the kernel's /task/work is now the
  caller's workspace. This needs `workspace` absent or empty, and for a plain one the file system of `root`
  (pass a `root` next to the workspaces); otherwise the pool falls back to a cold start.

Each sandbox serves one trajectory and is discarded on `close()`. Background threads keep `size` of them started,
at most `sandbox.pool_starters` starts at a time, and each pooled kernel imports `sandbox.preload` (pandas,
numpy) while it waits, which otherwise falls in the trajectory's first execution (a no-op for a kernel forked
from the warm fork server, `kernel_forks`, which has them imported already; a fresh interpreter spends about
0.45 CPU-seconds on them). A caller that knows how many sandboxes it will take passes `demand`, and the
pool never holds more than are still to be taken: without it, a run of 24 episodes at 4 at once started 28
kernels, and the last 4 were started, preloaded and waited for by `close()` for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from dareforge.config import SandboxConfig
from dareforge.sandbox import isolation
from dareforge.sandbox.host_folders import bounds_workspaces
from dareforge.sandbox.kernel import Sandbox
from dareforge.scratch import temp_root

log = logging.getLogger(__name__)

FAILURE_BACKOFF_S = 5.0


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


class KernelPool:
    def __init__(
        self,
        config: SandboxConfig,
        size: int | None = None,
        *,
        seconds_per_execution: float = 60.0,
        root: Path | str | None = None,
        start_timeout_s: float = 60.0,
        demand: int | None = None,
    ):
        self.config = config
        self.size = config.pool_size if size is None else size
        self.demand = demand
        """How many times the caller will call `acquire` in all; None: unknown, `size` are kept until closed."""
        self.seconds_per_execution = seconds_per_execution
        self.start_timeout_s = start_timeout_s
        isolation.require(config)  # fail here, not in the background thread
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="dareforge-pool-", dir=temp_root())).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._ready: list[Sandbox] = []
        self._cond = threading.Condition()
        self._closed = False
        self._starting = 0
        self._error: BaseException | None = None
        self._serial = 0
        self.hits = self.misses = 0
        self.started = 0
        """Kernels the pool has begun to start, used or not."""
        self._taken = 0
        starters = max(1, min(config.pool_starters, self.size))
        self._threads = [
            threading.Thread(target=self._fill, name=f"kernel-pool-{n}", daemon=True) for n in range(starters)
        ]
        if self.size > 0:
            for thread in self._threads:
                thread.start()

    # --- public ---

    def acquire(
        self, inputs: Path | str, workspace: Path | str, *, seconds_per_execution: float | None = None
    ) -> Sandbox:
        """A started sandbox on `inputs` (read-only) and `workspace`; close it when the trajectory ends."""
        inputs, workspace = Path(inputs).resolve(), Path(workspace).resolve()
        seconds = self.seconds_per_execution if seconds_per_execution is None else seconds_per_execution
        if self._fits(workspace):
            sandbox = self._take()
        else:
            sandbox = None
            with self._cond:
                self._taken += 1
                self._cond.notify_all()
        if sandbox is not None:
            try:
                self._attach(sandbox, inputs, workspace)
            except OSError as exc:
                log.warning("could not hand a pooled kernel to %s (%s); starting one cold", workspace, exc)
                sandbox.close()
                sandbox = None
        if sandbox is None:
            self.misses += 1
            sandbox = Sandbox(inputs, workspace, self.config, seconds, start_timeout_s=self.start_timeout_s)
            return sandbox.start()
        self.hits += 1
        sandbox.seconds_per_execution = seconds
        return sandbox

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Block until `size` sandboxes are started (benchmarks, warm-up); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._ready) < self._wanted() and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self._error is not None and not self._starting):
                    return False
                self._cond.wait(remaining)
            return len(self._ready) >= self._wanted()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            ready, self._ready = self._ready, []
            self._cond.notify_all()
        # A start may take start_timeout_s to boot and as long again to preload.
        joins = self.start_timeout_s * (2 if self.config.preload else 1)
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=joins)
        for sandbox in ready:
            sandbox.close()
        if self._own_root:
            with contextlib.suppress(OSError):
                self.root.rmdir()  # stays while acquired sandboxes still use their input folders

    def __enter__(self) -> KernelPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ---

    def _fits(self, workspace: Path) -> bool:
        if self.size <= 0:
            return False
        if workspace.exists() and (not workspace.is_dir() or any(workspace.iterdir())):
            log.debug("workspace %s is not empty; starting its kernel cold", workspace)
            return False
        parent = next(p for p in [workspace, *workspace.parents] if p.exists())
        if not bounds_workspaces(self.config) and os.stat(parent).st_dev != os.stat(self.root).st_dev:
            log.info(
                "workspace %s is on another file system than the pool root %s; cold start",
                workspace,
                self.root,
            )
            return False
        return True

    def _wanted(self) -> int:
        """Sandboxes to hold ready or starting (under `_cond`): `size`, or fewer when fewer are still to be
        taken. A call waiting in `_take` is not taken yet, so its sandbox is still wanted."""
        if self.demand is None:
            return self.size
        return max(0, min(self.size, self.demand - self._taken))

    def _take(self) -> Sandbox | None:
        """A ready sandbox; if none, wait for the one being started (it is further along than a cold start).
        Either way the call counts as taken: a cold start serves it."""
        deadline = time.monotonic() + self.start_timeout_s
        with self._cond:
            while not self._ready:
                if self._closed or not self._starting or time.monotonic() > deadline:
                    self._taken += 1
                    self._cond.notify_all()  # `wait_ready` may now have enough
                    return None
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            sandbox = self._ready.pop(0)
            self._taken += 1
            self._cond.notify_all()
        if not sandbox.running:  # died while waiting (CPU limit, host OOM killer)
            sandbox.close()
            return None
        return sandbox

    def _attach(self, sandbox: Sandbox, inputs: Path, workspace: Path) -> None:
        shutil.copytree(
            inputs, sandbox.inputs, symlinks=True, copy_function=_link_or_copy, dirs_exist_ok=True
        )
        sandbox.move_workspace(workspace)

    def _fill(self) -> None:
        try:
            self._fill_until_closed()
        finally:
            # jupyter_client made an event loop for this thread: close it with the thread. Left to the garbage
            # collector, it may be finalized after its own sockets and print "Invalid file descriptor: -1".
            with contextlib.suppress(RuntimeError):
                asyncio.get_event_loop_policy().get_event_loop().close()

    def _fill_until_closed(self) -> None:
        while True:
            with self._cond:
                while not self._closed and len(self._ready) + self._starting >= self._wanted():
                    self._cond.wait()
                if self._closed:
                    return
                self._starting += 1
                self.started += 1
                self._serial += 1
                stage = self.root / f"s{self._serial}"
            try:
                sandbox = self._prestart(stage)
            except BaseException as exc:
                log.warning("pool could not start a kernel (%s); retrying in %.0f s", exc, FAILURE_BACKOFF_S)
                shutil.rmtree(stage, ignore_errors=True)
                with self._cond:
                    self._error = exc
                    self._starting -= 1
                    self._cond.notify_all()
                    self._cond.wait(FAILURE_BACKOFF_S)
                continue
            with self._cond:
                self._starting -= 1
                if self._closed:
                    sandbox.close()
                    return
                self._error = None
                self._ready.append(sandbox)
                self._cond.notify_all()

    def _prestart(self, stage: Path) -> Sandbox:
        (stage / "input").mkdir(parents=True)
        (stage / "input").chmod(0o755)
        (stage / "work").mkdir()
        sandbox = Sandbox(
            stage / "input",
            stage / "work",
            self.config,
            self.seconds_per_execution,
            start_timeout_s=self.start_timeout_s,
        )
        sandbox._cleanup.append(stage)
        sandbox.start()
        if self.config.preload:
            # Importing is start-up work: it gets the start-up time limit, not the per-execution one.
            sandbox.seconds_per_execution = self.start_timeout_s
            # Loaded, not bound: a pooled kernel must not define names a cold one lacks.
            tops = sorted({name.split(".")[0] for name in self.config.preload})
            warm = sandbox.execute(f"import {', '.join(self.config.preload)}\ndel {', '.join(tops)}")
            sandbox.seconds_per_execution = self.seconds_per_execution
            if warm.error is not None:
                log.warning("pooled kernel could not preload %s: %s", self.config.preload, warm.error)
        return sandbox
