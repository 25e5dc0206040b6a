"""Run every benchmark; `python -m bench [name ...]`."""

from __future__ import annotations

import sys

from bench import (
    browse,
    cost_model,
    crawl_warm_cold,
    generate_throughput,
    gold_trajectories,
    ladder_cost,
    llm_throughput,
    prepare_memory,
    probe_throughput,
    question_shortcuts,
    release_consumers,
    sandbox_kernel,
    sensitivity_cost,
    store_scale,
    trajectory_throughput,
    understand,
    validate_per_task,
)

BENCHMARKS = {
    "browse": browse.main,
    "cost": cost_model.main,
    "crawl": crawl_warm_cold.main,
    "generate": generate_throughput.main,
    "gold": gold_trajectories.main,
    "ladder": ladder_cost.main,
    "llm": llm_throughput.main,
    "prepare-memory": prepare_memory.main,
    "probe": probe_throughput.main,
    "question-shortcuts": question_shortcuts.main,
    "release-consumers": release_consumers.main,
    "sandbox": sandbox_kernel.main,
    "sensitivity": sensitivity_cost.main,
    "store-scale": store_scale.main,
    "trajectories": trajectory_throughput.main,
    "understand": understand.main,
    "validate": validate_per_task.main,
}

if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(BENCHMARKS):
        BENCHMARKS[name]()
