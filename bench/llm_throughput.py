"""LLM client throughput against the scripted local server: achieved requests/s over the concurrency bound.

The server (tests/llm_server.py, in its own process so it does not share the client's GIL) answers every
request after a fixed latency L. With concurrency C the ideal is C / L requests per second; the headline is the
achieved rate over that ideal. Two more figures explain a shortfall:

- the same load through a bare `AsyncOpenAI` + semaphore: the wrapper's own cost is the difference;
- one request at a time (C = 1) gives the real per-request time t1 = L + the openai client's and the HTTP
  round trip's fixed cost; C / t1 is the best any client on this stack can do, so achieved / (C / t1) is how
  well the concurrency itself scales.

Connection pools are warmed with C requests first. A last pass replays the M requests from the store's request
cache, which makes no HTTP request at all.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai

from dareforge.config import EndpointConfig
from dareforge.llm import LLMClient, gather_chats
from dareforge.store import Store

LATENCY_S = 0.05
CONCURRENCY = 16
REQUESTS = 800
SEQUENTIAL = 20
TARGET_RATIO = 0.9
ROOT = Path(__file__).resolve().parent.parent


def _prompts(tag: str, count: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"{tag} request {i}"}] for i in range(count)]


async def _through_client(client: LLMClient, tag: str, count: int) -> float:
    start = time.perf_counter()
    results = await gather_chats(client, _prompts(tag, count), max_tokens=16)
    seconds = time.perf_counter() - start
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {count} benchmark requests failed, e.g. {failed[0]}")
    return seconds


async def _bare(url: str) -> float:
    """The same load through a bare AsyncOpenAI and a semaphore: what the openai client + httpx cost alone."""
    api = openai.AsyncOpenAI(base_url=url, api_key="not-needed", max_retries=0)
    semaphore = asyncio.Semaphore(CONCURRENCY)

    async def one(messages: list[dict]) -> None:
        async with semaphore:
            await api.chat.completions.with_raw_response.create(
                model="bench-model", messages=messages, max_tokens=16
            )

    await asyncio.gather(*(one(m) for m in _prompts("bare-warm", CONCURRENCY)))
    start = time.perf_counter()
    await asyncio.gather(*(one(m) for m in _prompts("bare", REQUESTS)))
    seconds = time.perf_counter() - start
    await api.close()
    return seconds


async def _run(url: str, store: Store) -> dict[str, float]:
    def endpoint(concurrency: int) -> EndpointConfig:
        return EndpointConfig(name="bench", base_url=url, model="bench-model", max_concurrency=concurrency)

    figures = {}
    serial = LLMClient(endpoint(1), None)
    await _through_client(serial, "warm-1", 2)
    figures["t1"] = await _through_client(serial, "serial", SEQUENTIAL) / SEQUENTIAL
    await serial.aclose()

    figures["bare"] = await _bare(url)

    fresh = LLMClient(endpoint(CONCURRENCY), None)
    await _through_client(fresh, "warm", CONCURRENCY)
    figures["client"] = await _through_client(fresh, "timed", REQUESTS)
    await fresh.aclose()

    cached = LLMClient(endpoint(CONCURRENCY), store)
    await _through_client(cached, "timed", REQUESTS)  # fill the cache
    figures["replay"] = await _through_client(cached, "timed", REQUESTS)
    await cached.aclose()
    return figures


def main() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.llm_server", "--latency", str(LATENCY_S)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = server.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the LLM test server did not start (printed {url!r})")
        with tempfile.TemporaryDirectory() as tmp:
            figures = asyncio.run(_run(url, Store(f"{tmp}/store")))
    finally:
        server.terminate()
        server.wait(timeout=10)
    ideal = CONCURRENCY / LATENCY_S
    achieved = REQUESTS / figures["client"]
    bare = REQUESTS / figures["bare"]
    stack_best = CONCURRENCY / figures["t1"]
    ratio = achieved / ideal
    print(
        f"llm throughput: {REQUESTS} requests, concurrency {CONCURRENCY}, server latency {LATENCY_S * 1000:.0f} ms: "
        f"{achieved:.0f} req/s in {figures['client']:.2f}s vs ideal C/L = {ideal:.0f} req/s"
    )
    print(
        f"  ratio to ideal: {ratio:.2f} (target >= {TARGET_RATIO}) {'OK' if ratio >= TARGET_RATIO else 'MISSED'}"
    )
    print(
        f"  bare AsyncOpenAI + semaphore: {bare:.0f} req/s (ratio {bare / ideal:.2f}); "
        f"the dareforge client reaches {achieved / bare:.0%} of it"
    )
    print(
        f"  one at a time: {figures['t1'] * 1000:.1f} ms per request (L + {(figures['t1'] - LATENCY_S) * 1000:.1f} ms "
        f"fixed cost); C/t1 = {stack_best:.0f} req/s, achieved {achieved / stack_best:.0%} of it"
    )
    print(f"  cache replay: {REQUESTS / figures['replay']:.0f} req/s ({figures['replay']:.2f}s, no HTTP)")


if __name__ == "__main__":
    main()
