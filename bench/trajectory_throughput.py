"""Agent trajectories per minute against the local scripted server with a fixed latency: evaluation, then
synthesis (K samples per task for training data), the two users of the episode engine.

Baseline from the same run: the concurrency-bound ideal, C episodes at a time, each costing its model calls'
latency and nothing else. The ratio (ideal time / measured time) shows what sandboxes, the kernel pool,
grading and bookkeeping cost on top (aim >= 0.9). Every episode is real: a sandboxed kernel runs the code.

Each episode gets a fresh kernel; on a 2-core machine their CPU can bound the run before the model does (a
kernel started with a fresh interpreter and pandas cost about 0.8 CPU-seconds, so this run was CPU-bound; one
forked from the warm fork server costs about 0.1), so the output also gives the machine's CPU floor and the
ratio to it.

Where the rest goes, per conversation (what the concurrency counts): the model calls (their latency, plus the
HTTP client, the server and the event loop) and the executions in the kernel, from the trajectories' own
timings; the kernel hand-out (how long the pool took to hand a ready kernel over: it overlaps the first model
call, so only what exceeds that call delays the episode). Closing the sandbox, grading and listing the
workspace, timed around the engine's calls, come after the conversation and outside its slot: they overlap
the next conversations.
"""

from __future__ import annotations

import math
import tempfile
import time

from bench.common import bench_config, cpu_bound_note, generated, machine_busy_seconds
from bench.probe_throughput import _timed
from dareforge.agents import evaluate, loop
from dareforge.config import EndpointConfig
from dareforge.publish.release import build_release
from dareforge.sandbox import Sandbox
from dareforge.trajectories import synthesize
from tests.llm_server import LLMServer

LATENCY_S = 1.0
CONCURRENCY = 4
SAMPLES = 4
CALLS_PER_EPISODE = 2  # one reply with code, one with the answer
TARGET = 0.9
MAJORITY_CODE = """<reasoning>Predict the most frequent training label.</reasoning>
<code>
import pandas as pd
train, test = pd.read_csv("train.csv"), pd.read_csv("test.csv")
target = [c for c in train.columns if c not in test.columns][0]
key = test.columns[0]
pd.DataFrame({key: test[key], target: train[target].mode()[0]}).to_csv("predictions.csv", index=False)
print(len(test))
</code>"""


def _reply(request) -> str:
    # After the first execution the transcript holds the kernel's output; then the model answers.
    seen_output = sum(m.get("role") == "user" for m in request.messages) > 1
    return "<answer>predictions.csv is written</answer>" if seen_output else MAJORITY_CODE


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, LLMServer(latency=LATENCY_S) as server:
        cfg = bench_config(tmp, ["sklearn-iris", "sklearn-wine"], questions=False)
        cfg.sandbox.pool_size = CONCURRENCY
        cfg.llm.endpoints = [
            EndpointConfig(name="bench", base_url=server.url, model="scripted", max_concurrency=CONCURRENCY)
        ]
        ctx = generated(cfg)
        build_release(ctx, "bench")
        server.script(_reply)
        timers = {name: _timed(loop, name) for name in ("_hand_out", "check_predictions", "list_files")}
        timers["close"] = _timed(Sandbox, "close")
        started, busy = time.perf_counter(), machine_busy_seconds()
        report = evaluate(
            ctx,
            "bench",
            release="bench",
            split="all",
            samples=SAMPLES,
            temperature=0.7,
            concurrency=CONCURRENCY,
        )
        wall = time.perf_counter() - started
        _print("evaluate", report.ran, wall, machine_busy_seconds() - busy)
        print(f"  outcomes: {dict(report.outcomes)}")
        _breakdown(report.trajectories, timers, wall)
        started, busy = time.perf_counter(), machine_busy_seconds()
        sampled = synthesize(ctx, "bench", samples=SAMPLES, temperature=0.7, split="all")
        _print("synthesize", sampled.ran, time.perf_counter() - started, machine_busy_seconds() - busy)
        print(f"  {sampled.summary()}")


def _breakdown(trajectories, timers: dict[str, list[float]], wall: float) -> None:
    n = len(trajectories)
    model = sum(s.seconds or 0 for t in trajectories for s in t.steps if s.role == "assistant") / n
    runs = sum(s.seconds or 0 for t in trajectories for s in t.steps if s.role == "execution") / n
    handout, grading = timers["_hand_out"], sum(timers["check_predictions"]) / n
    listing, closing = sum(timers["list_files"]) / n, sum(timers["close"]) / n
    # A trajectory's seconds run from its conversation's start to the end of its grading.
    conversation = sum(t.seconds for t in trajectories) / n - closing - grading - listing
    late = sum(max(0.0, h - LATENCY_S) for h in handout) / n  # beyond the first call it overlaps
    print(
        f"  per conversation: {conversation:.2f}s = model calls {model:.2f}s (ideal "
        f"{CALLS_PER_EPISODE * LATENCY_S:.2f}s) + executions {runs:.2f}s + the rest {conversation - model - runs:.2f}s"
        f": kernel hand-out beyond the first call {late:.2f}s (hand-out mean {sum(handout) / n:.2f}s, max "
        f"{max(handout):.2f}s); then, outside the conversation's slot, closing the sandbox {closing:.2f}s, "
        f"grading {grading:.2f}s and listing files {listing:.2f}s"
    )
    # The conversations run in waves of CONCURRENCY: what the waves do not explain is the run's fixed part (the
    # pool starting its first kernels while the first calls wait, the last wave's grading and stragglers).
    waves = math.ceil(n / CONCURRENCY)
    ideal_episode = CALLS_PER_EPISODE * LATENCY_S
    print(
        f"  per-conversation ratio {ideal_episode / conversation:.2f} (ideal {ideal_episode:.2f}s / "
        f"{conversation:.2f}s); {waves} waves of {CONCURRENCY} explain {waves * conversation:.1f}s of the "
        f"{wall:.1f}s, the run's fixed part (first kernels, the last grading, stragglers) is "
        f"{wall - waves * conversation:.1f}s"
    )


def _print(what: str, episodes: int, wall: float, busy: float) -> None:
    ideal = episodes * CALLS_PER_EPISODE * LATENCY_S / CONCURRENCY
    ratio = ideal / wall

    print(
        f"{what}: {episodes} episodes in {wall:.1f}s = {60 * episodes / wall:.1f}/min at concurrency "
        f"{CONCURRENCY}, {LATENCY_S:g}s per model call; ideal {ideal:.1f}s"
    )
    print(
        f"  ratio to the concurrency-bound ideal: {ratio:.3f} (target >= {TARGET}) {'OK' if ratio >= TARGET else 'MISSED'}"
    )
    print(cpu_bound_note(busy, episodes, ideal, wall))
