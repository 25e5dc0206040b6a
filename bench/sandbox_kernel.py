"""Sandbox kernel start-up, cold vs handed out by the pool, and the round trip of a trivial execution.

Baseline and measurement from the same run: a kernel started with a fresh interpreter against one forked from the
warm fork server (`sandbox.fork_kernels`), each until pandas is imported, in wall time and in the machine's CPU.
A cold start is `Sandbox(...).start()` (bwrap, the kernel forked or booted, until it answers kernel_info and
iopub is subscribed); a pooled start is `KernelPool.acquire` once the pool has a
kernel ready (hard-links the task's files in, renames the workspace). The round trip is `execute("1+1")` on a
warm kernel, from the host's call to the returned `Execution` (workspace scans included).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.common import machine_busy_seconds
from dareforge.config import SandboxConfig
from dareforge.sandbox import KernelPool, Sandbox, probe

STARTS = 5
ROUND_TRIPS = 200


def _task(root: Path) -> Path:
    public = root / "public"
    public.mkdir()
    (public / "train.csv").write_text("id,x,y\n" + "".join(f"{i},{i / 7:.4f},{i % 2}\n" for i in range(1000)))
    public.chmod(0o755)
    return public


def _starts(public: Path, root: Path, config: SandboxConfig, label: str) -> tuple[list[float], float]:
    """Wall seconds of STARTS cold starts, each until pandas is imported, and the machine's CPU per start."""
    walls, busy = [], machine_busy_seconds()
    for i in range(STARTS):
        started = time.perf_counter()
        box = Sandbox(public, root / f"{label}{i}", config, 60).start()
        assert box.execute("import numpy, pandas").error is None
        walls.append(time.perf_counter() - started)
        box.close()
    return walls, (machine_busy_seconds() - busy) / STARTS


def main() -> None:
    found = probe()
    config = SandboxConfig(allow_unsandboxed=not found.available)
    mode = "bubblewrap" if found.available else f"UNSANDBOXED ({found.reason})"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        public = _task(root)
        fresh, fresh_cpu = _starts(public, root, config.model_copy(update={"fork_kernels": False}), "fresh")
        warm_up = Sandbox(public, root / "warm-up", config, 60)
        warm_up.start().close()  # the fork server starts once per process
        forked, forked_cpu = _starts(public, root, config, "forked")
        cold = []
        for i in range(STARTS):
            started = time.perf_counter()
            box = Sandbox(public, root / f"cold{i}", config, 60).start()
            cold.append(time.perf_counter() - started)
            if i == STARTS - 1:
                box.execute("1+1")
                trips = []
                for _ in range(ROUND_TRIPS):
                    t0 = time.perf_counter()
                    box.execute("1+1")
                    trips.append(time.perf_counter() - t0)
            box.close()
        pooled = []
        with KernelPool(config, 1, seconds_per_execution=60, root=root / "pool") as pool:
            for i in range(STARTS):
                pool.wait_ready(120)  # the trajectory before this one would have run meanwhile
                started = time.perf_counter()
                box = pool.acquire(public, root / f"pooled{i}")
                pooled.append(time.perf_counter() - started)
                assert box.execute("1+1").result == "2"
                box.close()
    cold_s, pool_s = statistics.median(cold), statistics.median(pooled)
    trip = sorted(trips)
    print(f"sandbox kernel ({mode}), median of {STARTS} starts:")
    print(
        f"  start with pandas imported: fresh interpreter {statistics.median(fresh) * 1000:.0f} ms, "
        f"{fresh_cpu:.2f} CPU-s; forked from the warm server {statistics.median(forked) * 1000:.0f} ms, "
        f"{forked_cpu:.2f} CPU-s (machine CPU per start; ratio {fresh_cpu / forked_cpu:.1f}x)"
        + ("" if warm_up.forks else " [not forked here: bubblewrap as root only]")
    )
    print(
        f"  cold start       {cold_s * 1000:8.1f} ms  (min {min(cold) * 1000:.1f}, max {max(cold) * 1000:.1f})"
    )
    print(
        f"  from the pool    {pool_s * 1000:8.1f} ms  (min {min(pooled) * 1000:.1f}, max {max(pooled) * 1000:.1f})"
    )
    print(f"  pool/cold ratio  {pool_s / cold_s:8.4f}  ({cold_s / pool_s:.0f}x faster)")
    print(
        f"  execute('1+1')   {statistics.median(trip) * 1000:8.2f} ms median round trip, "
        f"p90 {trip[int(len(trip) * 0.9)] * 1000:.2f} ms ({ROUND_TRIPS} runs)"
    )


if __name__ == "__main__":
    main()
