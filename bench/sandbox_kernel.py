"""Sandbox kernel start-up, cold vs handed out by the pool, and the round trip of a trivial execution.

Baseline and measurement from the same run: a cold start is `Sandbox(...).start()` (bwrap + ipykernel boot until
it answers kernel_info and iopub is subscribed); a pooled start is `KernelPool.acquire` once the pool has a
kernel ready (hard-links the task's files in, renames the workspace). The round trip is `execute("1+1")` on a
warm kernel, from the host's call to the returned `Execution` (workspace scans included).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

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


def main() -> None:
    found = probe()
    config = SandboxConfig(allow_unsandboxed=not found.available)
    mode = "bubblewrap" if found.available else f"UNSANDBOXED ({found.reason})"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        public = _task(root)
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
