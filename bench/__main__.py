"""Run every benchmark; `python -m bench [name ...]`."""

from __future__ import annotations

import sys

from bench import crawl_warm_cold, generate_throughput, prepare_memory

BENCHMARKS = {
    "crawl": crawl_warm_cold.main,
    "generate": generate_throughput.main,
    "prepare-memory": prepare_memory.main,
}

if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(BENCHMARKS):
        BENCHMARKS[name]()
