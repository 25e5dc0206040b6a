"""`dareforge browse` at catalog size: does every page render within TARGET_MS, in at most TARGET_MB?

Builds a store of about TASKS tasks by copying the partitions of a small generated, validated and gated store
under new source ids (`bench.store_scale.build`) and new task ids (each copy's task folders hard-linked under
its ids, manifests rewritten), builds a release of them, then starts the workbench as a server (a process of
its own, as `dareforge browse` runs it) and times a sample of pages over HTTP on localhost: the task list
unfiltered (first and last page) and under each filter, task pages public and with `--private` (a sample of
all tasks, and one of the tasks that have trajectories), source pages, the release and run pages.

The small store's gold trajectories are played (real sandboxed episodes, `gold_trajectories`) before it is
copied, and each copy gets its tasks' trajectory rows under its own task and trajectory ids, so the private
task page replays steps at catalog scale (about one trajectory per IF, QA and Lake task). It has no sampled
trajectories and no probe results: both need a model endpoint, and no store here holds real probe rows to copy,
so the probe section is timed empty (its query still runs, over an empty table).

Per page kind: median and max; per server: peak resident memory (VmHWM). Building the store takes a few
minutes (generate, the gold episodes, the copies, the release); `BENCH_BROWSE_STORE=<folder>` builds it there
once and reuses it after.

The baseline, measured in the same run on the same store, is the workbench as it was first built: a new DuckDB
connection with the store's views for every request (`BASELINE` below).
"""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from bench.common import bench_config, generated
from bench.store_scale import build, source_of
from dareforge.context import RunContext
from dareforge.publish.release import Release, build_release
from dareforge.schema import Task
from dareforge.store import MANIFEST, Store
from dareforge.trajectories.gold import gold_trajectories
from dareforge.validators.gate import gate
from dareforge.validators.validate import validate

TASKS = 12_000
SOURCES = ["sklearn-iris", "sklearn-wine", "statsmodels-co2"]
TARGET_MS = 300.0
TARGET_MB = 500.0
SAMPLE = 12  # pages of each sampled kind (tasks, sources)
ROUNDS = 3  # each listed page is fetched this many times (the median and max are over all fetches)
RELEASE = "bench"
WIDTH = 42  # the page kind column
KEPT = ".bench-browse.json"
"""Written last into a built store: a run given BENCH_BROWSE_STORE reuses a store that has it."""
STORE_FORMAT = 3
"""Bump when the built store changes (2: gold trajectories copied with the tasks; 3: their steps distinct per
copy), so an old one is not reused."""

SERVER = """
import sys
import uvicorn
from dareforge.store import Store
from dareforge.browse import make_app
root, mode, private, port = sys.argv[1:5]
if mode == "baseline":  # the first workbench: a new connection with every view for each request
    from dareforge.browse import data
    signature = data._signature
    data._signature = lambda store, top: None if top == "tables" else signature(store, top)
uvicorn.run(make_app(Store(root), private=private == "private"), host="127.0.0.1", port=int(port),
            log_level="warning")
"""


def copy_id(task_id: str, n: int) -> str:
    """Copy n's id of a task: the same length and alphabet (ids are alphanumeric), distinct per copy."""
    return f"{n:05x}{task_id[5:]}"


def renamed(table_name: str, table: pa.Table, n: int) -> pa.Table:
    """Copy n's rows: task ids (and the sources table's own id) under copy n's names; trajectories' steps made
    distinct per copy (`distinct_steps`)."""
    # A trajectory's id is unique in a store (the pages list a task's trajectories by it): renamed per copy too.
    columns = ["id", "variant_of", "task_id"] if table_name in ("tasks", "trajectories") else ["task_id"]
    for name in columns:
        if name in table.column_names:
            i = table.column_names.index(name)
            values = [None if v is None else copy_id(v, n) for v in table.column(i).to_pylist()]
            table = table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))
    if table_name == "sources":
        i = table.column_names.index("id")
        table = table.set_column(i, table.schema.field(i), pa.array([source_of(n)] * len(table), pa.string()))
    if table_name == "trajectories":
        i = table.column_names.index("steps")
        table = table.set_column(i, table.schema.field(i), distinct_steps(table.column(i), n))
    return table


def distinct_steps(steps: pa.ChunkedArray, n: int) -> pa.Array:
    """The steps with a line naming copy n after each message. Real trajectories all differ; identical copies
    would be dictionary-encoded to about a hundredth of their size (measured: 1.1 MB against 99 MB for 8,848
    trajectories), and reading a task's rows out of the table would cost next to nothing."""
    steps = steps.combine_chunks()
    flat = steps.flatten()
    i = flat.type.get_field_index("content")
    content = pc.binary_join_element_wise(flat.field(i), pa.scalar(f"\n(bench copy {n})"), "")
    fields = [content if j == i else flat.field(j) for j in range(flat.type.num_fields)]
    return pa.ListArray.from_arrays(
        steps.offsets, pa.StructArray.from_arrays(fields, fields=list(flat.type)), type=steps.type
    )


def copy_task_folders(small: Path, big: Path, tasks: list[Task], copies: int) -> None:
    """Each copy's task folders: files hard-linked (they are never rewritten in place), manifest rewritten."""
    by_source = defaultdict(list)
    for t in tasks:
        by_source[t.source_id].append(t)
    order = sorted(by_source)  # the order `build` copies partitions in (sorted partition files)
    for n in range(copies):
        for t in by_source[order[n % len(order)]]:
            folder = big / "tasks" / copy_id(t.id, n)
            folder.mkdir(parents=True)
            for half in ("public", "private"):
                if not (small / "tasks" / t.id / half).is_dir():
                    continue  # a task generate rejected before writing its files (a guess answers it)
                (folder / half).mkdir(parents=True, exist_ok=True)
                for f in (small / "tasks" / t.id / half).iterdir():
                    os.link(f, folder / half / f.name)
            update = {"id": copy_id(t.id, n), "source_id": source_of(n)}
            if t.variant_of:
                update["variant_of"] = copy_id(t.variant_of, n)
            record = t.model_copy(update=update).model_dump(mode="json")
            (folder / MANIFEST).write_text(json.dumps({"task": record}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch_ms(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        response.read()
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status}")
    return (time.perf_counter() - started) * 1000


def serve_and_time(
    root: Path, mode: str, private: bool, pages: dict[str, list[str]]
) -> tuple[dict, float, float]:
    """Start a server, fetch every page ROUNDS times: (kind -> timings in ms, first request ms, peak RSS MB)."""
    port = free_port()
    args = [sys.executable, "-c", SERVER, str(root), mode, "private" if private else "public", str(port)]
    server = subprocess.Popen(args)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120  # a readiness wait
        while True:
            try:
                first = fetch_ms(f"{base}/tasks")  # the first request also makes the compacted copies
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the browse server did not start") from None
                time.sleep(0.2)
        timings: dict[str, list[float]] = defaultdict(list)
        for _ in range(ROUNDS):
            for kind, urls in pages.items():
                for url in urls:
                    timings[kind].append(fetch_ms(base + url))
        with open(f"/proc/{server.pid}/status") as fh:
            peak = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024
    finally:
        server.terminate()
        server.wait()
    return timings, first, peak


def sample_pages(
    tasks: list[str], replayed: list[str], copies: int, release: Release
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(public pages, private pages) by kind; `replayed`: the tasks that have trajectories."""
    rng = random.Random(45)
    picked = rng.sample(tasks, SAMPLE)
    with_steps = rng.sample(replayed, SAMPLE)
    sources = [source_of(rng.randrange(copies)) for _ in range(SAMPLE)]
    label = f"{release.name}@{release.version}"
    last = (len(tasks) + 49) // 50
    lists = {
        "list page 1": ["/tasks"],
        "list last page": [f"/tasks?page={last}"],
        "list filtered": [
            "/tasks?family=IF",
            "/tasks?verdict=rejected",
            "/tasks?check=discrimination",
            f"/tasks?source={sources[0]}",
            "/tasks?q=predict",
            f"/tasks?release={label}&split=test",
            "/tasks?difficulty=hard",
            "/tasks?family=MM&verdict=accepted&page=3",
        ],
        "source page": [f"/source/{s}" for s in sources],
        "releases, runs": ["/releases", f"/release/{release.name}/{release.version}", "/runs"],
    }
    public = {**lists, "task page (public)": [f"/task/{t}" for t in picked]}
    private = {
        "task page (--private)": [f"/task/{t}" for t in picked],
        "task page (--private, with trajectories)": [f"/task/{t}" for t in with_steps],
    }
    return public, private


def trajectory_tasks(big: Path) -> list[str]:
    """The ids of the tasks that have a trajectory in the store at `big`, sorted."""
    files = str(big / "tables" / "trajectories" / "*.parquet")
    rows = duckdb.sql(
        f"select distinct task_id from read_parquet('{files}', union_by_name = true) order by 1"
    )
    return [r[0] for r in rows.fetchall()]


def built_store(folder: Path) -> tuple[Path, int, Release]:
    """The catalog-size store in `folder` (built there unless a previous run left it complete): its root,
    the number of source copies, its release."""
    big_cfg = bench_config(str(folder))
    big = Path(big_cfg.store.root)
    done = big / KEPT
    if done.exists():
        kept = json.loads(done.read_text())
        if kept.get("format") != STORE_FORMAT:
            raise SystemExit(f"{big} holds a store an older bench built; delete {folder} to build it again")
        copies = kept["copies"]
        print(f"browse: reusing the store built in {big}")
        return big, copies, Release.load(Store(str(big)), RELEASE)
    ctx = generated(bench_config(str(folder / "small"), SOURCES))
    validate(ctx)
    gate(ctx)
    gold = gold_trajectories(ctx, release=None, split="all")
    print(f"browse: {gold.summary()}")
    tasks = sorted(ctx.store.read_records(Task), key=lambda t: t.id)
    copies = round(TASKS / (len(tasks) / len({t.source_id for t in tasks})))
    started = time.perf_counter()
    build(Path(ctx.store.root), big, copies, rename=renamed)
    copy_task_folders(Path(ctx.store.root), big, tasks, copies)
    built = time.perf_counter() - started
    started = time.perf_counter()
    release = build_release(RunContext.from_config(big_cfg, show_progress=False), RELEASE).release
    print(
        f"browse: store of {copies} source copies built in {built:.0f}s, release {release.name} "
        f"{release.version} in {time.perf_counter() - started:.0f}s"
    )
    done.write_text(json.dumps({"copies": copies, "format": STORE_FORMAT}))
    return big, copies, release


def main() -> None:
    kept = os.environ.get("BENCH_BROWSE_STORE")  # a folder to build the store in once and reuse after
    with tempfile.TemporaryDirectory() as tmp:
        big, copies, release = built_store(Path(kept or tmp))
        ids = sorted(p.name for p in (big / "tasks").iterdir())
        replayed = trajectory_tasks(big)
        print(
            f"browse: {len(ids)} tasks ({len(replayed)} with trajectories), {copies} sources, release of "
            f"{len(release.task_ids)} tasks"
        )
        public, private = sample_pages(ids, replayed, copies, release)
        figures = {}
        load = os.getloadavg()[0]
        for mode in ("baseline", "current"):
            pub, first, peak_pub = serve_and_time(big, mode, False, public)
            priv, _, peak_priv = serve_and_time(big, mode, True, private)
            figures[mode] = ({**pub, **priv}, first, max(peak_pub, peak_priv))
        load = max(load, os.getloadavg()[0])

    base, now = figures["baseline"][0], figures["current"][0]
    print(
        f"  {'page kind':<{WIDTH}}{'pages':>6}{'median ms':>11}{'max ms':>9}{'baseline median':>17}{'ratio':>7}"
    )
    worst = 0.0
    for kind, times in now.items():
        med, top, base_med = statistics.median(times), max(times), statistics.median(base[kind])
        worst = max(worst, top)
        print(
            f"  {kind:<{WIDTH}}{len(times) // ROUNDS:>6}{med:>11.1f}{top:>9.1f}{base_med:>17.1f}"
            f"{base_med / med:>6.1f}x"
        )
    _, first, peak = figures["current"]
    _, base_first, base_peak = figures["baseline"]
    print(
        f"  first request (views and compacted copies made): {first:.0f} ms (baseline {base_first:.0f} ms); "
        f"server peak RSS {peak:.0f} MB (baseline {base_peak:.0f} MB)"
    )
    # Wall times on a shared machine: a load far above the core count stretches every figure (the ratios hold).
    print(
        f"  machine load (1-minute average, the higher of start and end): {load:.1f} on {os.cpu_count()} cores"
    )
    ok = worst <= TARGET_MS and peak <= TARGET_MB
    print(
        f"  slowest page {worst:.0f} ms, peak {peak:.0f} MB: {'OK' if ok else 'MISSED'} "
        f"(targets <= {TARGET_MS:g} ms a page, <= {TARGET_MB:g} MB)"
    )


if __name__ == "__main__":
    main()
