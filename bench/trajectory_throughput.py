"""Agent trajectories per minute against the local scripted server with a fixed latency: evaluation, then
synthesis (K samples per task for training data), the two users of the episode engine.

Baseline from the same run: the concurrency-bound ideal, C episodes at a time, each costing its model calls'
latency and nothing else. The ratio (ideal time / measured time) shows what sandboxes, the kernel pool,
grading and bookkeeping cost on top (aim >= 0.9). Every episode is real: a sandboxed kernel runs the code.

Where the rest goes, per episode, from the trajectories' own timings: the model calls (their latency, plus
waiting for the client's concurrency slot and the event loop), the executions in the kernel, and the rest of the
episode (kernel hand-out and start not hidden behind the first call, grading, listing the workspace); what is
left of the wall time beyond the episodes is the runner's (materializing files, writing each trajectory).
"""

from __future__ import annotations

import tempfile
import time

from bench.common import bench_config, generated
from dareforge.agents import evaluate
from dareforge.config import EndpointConfig
from dareforge.publish.release import build_release
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
        cfg = bench_config(tmp, ["sklearn-iris", "sklearn-wine"])
        cfg.sandbox.pool_size = CONCURRENCY
        cfg.llm.endpoints = [
            EndpointConfig(name="bench", base_url=server.url, model="scripted", max_concurrency=CONCURRENCY)
        ]
        ctx = generated(cfg)
        build_release(ctx, "bench")
        server.script(_reply)
        started = time.perf_counter()
        report = evaluate(
            ctx,
            "bench",
            release="bench",
            split="all",
            samples=SAMPLES,
            temperature=0.7,
            concurrency=CONCURRENCY,
        )
        _print("evaluate", report.ran, time.perf_counter() - started)
        print(f"  outcomes: {dict(report.outcomes)}")
        _breakdown(report.trajectories)
        started = time.perf_counter()
        sampled = synthesize(ctx, "bench", samples=SAMPLES, temperature=0.7, split="all")
        _print("synthesize", sampled.ran, time.perf_counter() - started)
        print(f"  {sampled.summary()}")


def _breakdown(trajectories) -> None:
    n = len(trajectories)
    model = sum(s.seconds or 0 for t in trajectories for s in t.steps if s.role == "assistant") / n
    runs = sum(s.seconds or 0 for t in trajectories for s in t.steps if s.role == "execution") / n
    episode = sum(t.seconds for t in trajectories) / n
    ideal = CALLS_PER_EPISODE * LATENCY_S
    print(
        f"  per episode: {episode:.2f}s = model calls {model:.2f}s (ideal {ideal:.2f}s) + executions {runs:.2f}s "
        f"+ hand-out, grading, files {episode - model - runs:.2f}s"
    )


def _print(what: str, episodes: int, wall: float) -> None:
    ideal = episodes * CALLS_PER_EPISODE * LATENCY_S / CONCURRENCY
    ratio = ideal / wall
    print(
        f"{what}: {episodes} episodes in {wall:.1f}s = {60 * episodes / wall:.1f}/min at concurrency "
        f"{CONCURRENCY}, {LATENCY_S:g}s per model call; ideal {ideal:.1f}s"
    )
    print(
        f"  ratio to the concurrency-bound ideal: {ratio:.2f} (target >= {TARGET}) {'OK' if ratio >= TARGET else 'MISSED'}"
    )
