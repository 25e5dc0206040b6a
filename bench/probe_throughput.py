"""Shortcut-probe throughput against the local scripted server with a fixed latency.

Baseline from the same run: the concurrency-bound ideal, C no-data attempts at a time, each costing its model
calls' latency and nothing else. The ratio (ideal time / measured time) shows what sandboxes, grading and
bookkeeping cost on top (aim >= 0.9; bench/trajectory_throughput.py shows where it goes). A second figure
isolates the probe's own work outside the agent engine: building each task's `test_ids.csv`, computing and
storing findings, re-running the gate. Every attempt is real: a sandboxed kernel runs the model's code.
"""

from __future__ import annotations

import re
import tempfile
import time

from bench.common import bench_config, cpu_bound_note, generated, machine_busy_seconds
from dareforge.config import EndpointConfig
from dareforge.probes import shortcut
from dareforge.queries import partition_name
from dareforge.schema import ProbeResult
from tests.llm_server import LLMServer

LATENCY_S = 1.0
CONCURRENCY = 4
SAMPLES = 4
CALLS_PER_ATTEMPT = 2  # one reply with code, one with the answer
TARGET = 0.9
TARGET_NAME = re.compile(r"`([^`]+)`, one row per row of `test\.csv`")  # both prompts end their columns so


def _reply(request) -> str:
    if sum(m.get("role") == "user" for m in request.messages) > 1:
        return "<answer>predictions.csv is written</answer>"
    target = TARGET_NAME.search(request.messages[1]["content"]).group(1)
    return (
        "<reasoning>No data: predict one constant for every test id.</reasoning>\n<code>\n"
        "import pandas as pd\n"
        f"rows = pd.read_csv('test_ids.csv')\nrows[{target!r}] = 0\n"
        "rows.to_csv('predictions.csv', index=False)\nprint(len(rows))\n</code>"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, LLMServer(latency=LATENCY_S) as server:
        cfg = bench_config(tmp, ["sklearn-iris", "sklearn-wine"], questions=False)
        cfg.sandbox.pool_size = CONCURRENCY
        cfg.probe.samples, cfg.probe.temperature = SAMPLES, 0.7
        cfg.llm.endpoints = [
            EndpointConfig(name="bench", base_url=server.url, model="scripted", max_concurrency=CONCURRENCY)
        ]
        ctx = generated(cfg)
        server.script(_reply)
        engine = _timed(shortcut, "run_probe")
        started, busy = time.perf_counter(), machine_busy_seconds()
        report = shortcut.probe_shortcuts(ctx, concurrency=CONCURRENCY)
        wall = time.perf_counter() - started
        busy = machine_busy_seconds() - busy
        outcomes: dict[str, int] = {}
        for r in ctx.store.read_partition(ProbeResult, partition_name(shortcut.NO_DATA, "bench")):
            outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    attempts = report.counts["played"]
    ideal = attempts * CALLS_PER_ATTEMPT * LATENCY_S / CONCURRENCY
    ratio = ideal / wall
    print(
        f"probe: {attempts} no-data attempts on {len(report.labels('probed'))} tasks in {wall:.1f}s at concurrency "
        f"{CONCURRENCY}, {LATENCY_S:g}s per model call; ideal {ideal:.1f}s"
    )
    print(
        f"  ratio to the concurrency-bound ideal: {ratio:.3f} (target >= {TARGET}) "
        f"{'OK' if ratio >= TARGET else 'MISSED'}"
    )
    print(cpu_bound_note(busy, attempts, ideal, wall))
    print(f"  outcomes: {outcomes}; solvable without their data: {len(report.labels('flagged'))}")
    outside = wall - sum(engine)
    print(
        f"  the probe's own work outside the agent engine: {outside:.2f}s ({outside / wall:.1%} of the run)"
    )


def _timed(module, name: str) -> list[float]:
    """Wrap `module.name` to record the seconds of each call (to tell the engine's time from the probe's)."""
    inner, spent = getattr(module, name), []

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    setattr(module, name, wrapper)
    return spent


if __name__ == "__main__":
    main()
