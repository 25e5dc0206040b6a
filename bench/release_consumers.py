"""Everything a release feeds, at catalog size: time, peak memory and bytes written of each consumer.

Builds a store of about TASKS released tasks by copying the tasks of a small generated store under new task and
source ids (the copying idea of `bench/store_scale.py`: the same files under new names, hard-linked), cuts a
release of it, then runs each consumer in a process of its own (so its peak RSS is its own, read from
`wait4`): every registered export format (`dareforge/exports/formats.py`; the Harbor layout without sampled
control runs, which `harbor` below times), the inspect dataset (`dareforge/inspect_eval.py`), `evaluate`'s
set-up for the whole test split (the tasks read, each attempt's files materialized), the release report and
the card. Budget per consumer: LIMIT_S and LIMIT_RSS_MB.

`python -m bench release-consumers [TASKS]`; TASKS below the catalog's runs a fraction and prints each figure
scaled linearly to the catalog (what the time box allows on a busy machine; say so with the figures).

Then the Harbor export of a release the size of `make run`'s with every task's control run in the sandbox
(`--controls all`), first export against a re-export, which reuses every stored result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import bench_config, generated
from dareforge.context import RunContext
from dareforge.exports.formats import FORMATS
from dareforge.hashing import sha256_bytes
from dareforge.store import MANIFEST, link_or_copy_file

CATALOG_TASKS = 11_892
"""Accepted tasks of the whole catalog's release (issue 46)."""
LIMIT_S = 15 * 60
LIMIT_RSS_MB = 4096
SMALL = ["sklearn-iris", "sklearn-wine", "statsmodels-co2", "sklearn-diabetes"]
RELEASE = "bench"


def _rename(table: pa.Table, column: str, mapping: dict[str, str]) -> pa.Table:
    if column not in table.column_names:
        return table
    values = [mapping.get(v, v) if v is not None else None for v in table.column(column).to_pylist()]
    field = table.schema.field(column)
    return table.set_column(table.column_names.index(column), field, pa.array(values, field.type))


def build(small: Path, big: Path, tasks: int) -> int:
    """Copy the small store's candidate tasks (and their sources) into `big` until it holds about `tasks`;
    returns how many. Only `sources` and `tasks` tables are copied: without filter, framing or verdict records
    every candidate task is released, which is what a consumer reads."""
    task_tables = sorted((small / "tables" / "tasks").glob("*.parquet"))
    source_tables = {p.stem: p for p in (small / "tables" / "sources").glob("*.parquet")}
    per_copy = sum(pq.read_metadata(p).num_rows for p in task_tables)
    copies = max(1, -(-tasks // per_copy))
    (big / "tables" / "tasks").mkdir(parents=True)
    (big / "tables" / "sources").mkdir(parents=True)
    made = 0
    for n in range(copies):
        for path in task_tables:
            table = pq.read_table(path)
            ids = {i: sha256_bytes(f"{i}:{n}".encode())[:16] for i in table.column("id").to_pylist()}
            source = f"{path.stem}-c{n}"
            sources = {path.stem: source}
            table = _rename(_rename(_rename(table, "id", ids), "variant_of", ids), "source_id", sources)
            pq.write_table(table, big / "tables" / "tasks" / f"{source}.parquet", compression="zstd")
            if path.stem in source_tables:
                found = _rename(pq.read_table(source_tables[path.stem]), "id", sources)
                pq.write_table(found, big / "tables" / "sources" / f"{source}.parquet", compression="zstd")
            for old, new in ids.items():
                _copy_task(small / "tasks" / old, big / "tasks" / new, new, source)
            made += len(ids)
    return made


def _copy_task(src: Path, dst: Path, task_id: str, source: str) -> None:
    for path in sorted(src.rglob("*")):
        if path.is_dir():
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.name == MANIFEST:
            manifest = json.loads(path.read_text())
            manifest["task"] = {**manifest["task"], "id": task_id, "source_id": source}
            if manifest["task"].get("variant_of"):
                manifest["task"]["variant_of"] = sha256_bytes(f"{manifest['task']['variant_of']}:x".encode())[
                    :16
                ]
            target.write_text(json.dumps(manifest))
        else:
            link_or_copy_file(path, target)


CHILD = """
import json, os, sys, time
from pathlib import Path
from bench.release_consumers import consume
name, root, out, release = sys.argv[1:5]
started = time.perf_counter()
detail = consume(name, root, Path(out), release)
seconds = time.perf_counter() - started
io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
peak_mb = int(status["VmHWM"].split()[0]) / 1024  # this process's own peak (wait4's counts the fork's pre-exec copy)
print(json.dumps({"seconds": seconds, "wchar": int(io["wchar"]), "rss_mb": peak_mb, "detail": detail}))
"""


def consume(name: str, root: str, out: Path, release_name: str = RELEASE) -> str:
    """Run one consumer of the store's latest `release_name` at `root`, writing under `out`; a line of what it
    did."""
    from dareforge.config import Config
    from dareforge.exports.export_format import ExportJob, FolderLayout
    from dareforge.publish.release import load_release

    cfg = Config()
    cfg.store.root, cfg.store.work_dir = root, str(out / "work")
    ctx = RunContext.from_config(cfg, show_progress=False)
    release = load_release(ctx, release_name)
    if name.startswith("export "):
        fmt = name.split(" ", 1)[1]
        if fmt == "harbor":
            from dareforge.exports.harbor import HarborLayout

            report = HarborLayout(fmt, controls_per_family=0).export(ExportJob(ctx, release, dest=out / fmt))
            return report.summary()[0][:160] + " / " + report.summary()[1][:160]
        from dareforge.exports.formats import export_format

        chosen = export_format(fmt)
        if isinstance(chosen, FolderLayout):
            report = chosen.export(ExportJob(ctx, release, dest=out / fmt))
            return report.summary()[0][:200]
        from dareforge.trajectories.corpus import build_corpus

        result = build_corpus(ctx, release_name, None, formats=[fmt])
        built = result.exports.get(fmt)
        return f"{fmt}: {built.name}@{built.version}" if built else f"{fmt}: nothing built ({result.notes})"
    if name == "inspect dataset":
        from dareforge.inspect_eval import release_task

        task = release_task(ctx, release_name, split="test")
        return f"{len(task.dataset)} samples"
    if name == "evaluate set-up":
        from dareforge.agents.attempts import attempts_for, release_task_files
        from dareforge.agents.evaluate import split_tasks

        tasks = split_tasks(release, "test")
        attempts = attempts_for(tasks, 1, lambda t: release_task_files(release, t))
        for n, attempt in enumerate(attempts):  # what each episode does first: its files, where it reads them
            folder = out / "attempt" / str(n)
            folder.mkdir(parents=True)
            attempt.materialize(folder)
            shutil.rmtree(folder)
        return f"{len(attempts)} attempts of {len(tasks)} test tasks"
    if name == "release report":
        from dareforge.publish.release_report import write_release_report

        return write_release_report(ctx, release_name)
    if name == "card":
        from dareforge.publish import release_card

        text = release_card.public_card(release.manifest)
        return f"{len(text)} characters"
    raise ValueError(f"no consumer {name!r}")


def consumers() -> list[str]:
    return [*(f"export {f}" for f in FORMATS), "inspect dataset", "evaluate set-up", "release report", "card"]


def measured(name: str, root: Path, out: Path, release: str = RELEASE) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    before = _size(root)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, name, str(root), str(out), release],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    _, status, usage = os.wait4(child.pid, 0)
    stdout, stderr = child.stdout.read(), child.stderr.read()
    child.returncode = os.waitstatus_to_exitcode(status)
    row = {"name": name, "cpu_s": usage.ru_utime + usage.ru_stime}
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        return {**row, "error": (stderr.strip().splitlines() or ["no output"])[-1][:200]}
    row.update(json.loads(lines[-1]))
    row["bytes"] = _size(out) + max(0, _size(root) - before)
    return row


def _size(folder: Path) -> int:
    seen, total = set(), 0
    for path in folder.rglob("*"):
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if path.is_file() and (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            total += info.st_size
    return total


def harbor_reuse(tmp: Path) -> None:
    """The Harbor export of a `make run`-sized release with every control run, first export then re-export."""
    from dareforge.exports.export_format import ExportJob
    from dareforge.exports.harbor import HarborLayout
    from dareforge.publish.release import build_release

    chosen = os.environ.get("BENCH_HARBOR_SOURCES")
    ctx = generated(bench_config(str(tmp / "run"), chosen.split(",") if chosen else SMALL))
    release = build_release(ctx, RELEASE).release
    for label in ("first export", "re-export"):
        started = time.perf_counter()
        report = HarborLayout("harbor", controls_per_family=None).export(
            ExportJob(ctx, release, dest=tmp / "harbor" / label.replace(" ", "-"))
        )
        seconds = time.perf_counter() - started
        print(f"  harbor --controls all, {label}: {seconds:.1f}s, {report.controlled.total()} control runs")
        for line in report.summary()[:2]:
            print(f"    {line}")


def _sized_release(small: Path, tmp: Path, tasks: int) -> tuple[Path, int]:
    """A store of about `tasks` copied tasks and its release; its root and the released count."""
    from dareforge.config import Config
    from dareforge.publish.release import build_release

    root = tmp / f"big-{tasks}"
    started = time.perf_counter()
    made = build(small, root, tasks)
    copied = time.perf_counter() - started
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root), str(tmp / f"big-{tasks}-work")
    started = time.perf_counter()
    release = build_release(RunContext.from_config(cfg, show_progress=False), RELEASE).release
    print(
        f"  {made} tasks copied in {copied:.0f}s; release {release.name}@{release.version}: "
        f"{len(release.task_ids)} tasks in {time.perf_counter() - started:.0f}s"
    )
    return root, len(release.task_ids)


def _at_catalog(points: list[tuple[int, float]]) -> float:
    """A figure at the catalog's size, linear through the two largest measured sizes (one size: proportional)."""
    if len(points) == 1:
        n, value = points[0]
        return value * CATALOG_TASKS / n
    (n1, v1), (n2, v2) = sorted(points)[-2:]
    return v2 + (v2 - v1) / (n2 - n1) * (CATALOG_TASKS - n2)


def main(sizes: list[int] | None = None) -> None:
    """`BENCH_TASKS`: the released task counts to measure at, comma-separated (default: the catalog's);
    `BENCH_HARBOR_SOURCES`: the builtin sources of the release the Harbor reuse figure exports (default SMALL);
    `BENCH_RELEASE_STORE`: a store whose latest release `BENCH_RELEASE` (default `dareforge`) every consumer reads
    as it is, instead of copies (the whole catalog's, after `make catalog`: `data/catalog`)."""
    with tempfile.TemporaryDirectory(prefix="bench-consumers-") as scratch:
        tmp = Path(scratch)
        real = os.environ.get("BENCH_RELEASE_STORE")
        if real:
            stores = [_existing_release(Path(real).resolve(), os.environ.get("BENCH_RELEASE", "dareforge"))]
        else:
            sizes = sizes or [int(n) for n in os.environ.get("BENCH_TASKS", str(CATALOG_TASKS)).split(",")]
            small = Path(generated(bench_config(str(tmp / "small"), SMALL)).store.root)
            print(f"release consumers: tasks of {len(SMALL)} sources copied to {sizes} tasks")
            stores = [(*_sized_release(small, tmp, n), RELEASE) for n in sizes]
        _table(stores, tmp, scaled=not real)
        if not real:
            harbor_reuse(tmp)


def _existing_release(root: Path, name: str) -> tuple[Path, int, str]:
    from dareforge.config import Config
    from dareforge.publish.release import load_release

    cfg = Config()
    cfg.store.root = str(root)
    release = load_release(RunContext.from_config(cfg, show_progress=False), name)
    print(
        f"release consumers: {name}@{release.version} in {root}, {len(release.task_ids)} tasks, read as it is"
    )
    return root, len(release.task_ids), name


def _table(stores: list[tuple[Path, int, str]], tmp: Path, scaled: bool) -> None:
    """Each consumer's figures on each store; `scaled`: also at the catalog's size (copied stores)."""
    print(
        f"  {'consumer':<18} {'tasks':>6} {'seconds':>8} {'cpu-s':>7} {'peak MB':>8} {'MB out':>7} {'MB wchar':>8}"
    )
    for name in consumers():
        rows = []
        for root, released, release in stores:
            out = tmp / "out" / name.replace(" ", "-")
            row = measured(name, root, out, release)
            shutil.rmtree(out, ignore_errors=True)
            if "error" in row:
                print(f"  {name:<18} {released:>6} FAILED: {row['error']}")
                continue
            rows.append((released, row))
            print(
                f"  {name:<18} {released:>6} {row['seconds']:8.1f} {row['cpu_s']:7.1f} {row['rss_mb']:8.0f} "
                f"{row['bytes'] / 1e6:7.1f} {row['wchar'] / 1e6:8.1f}  {row['detail'][:150]}"
            )
        if not rows or not scaled:
            continue
        wall = _at_catalog([(n, r["seconds"]) for n, r in rows])
        cpu = _at_catalog([(n, r["cpu_s"]) for n, r in rows])
        rss = _at_catalog([(n, r["rss_mb"]) for n, r in rows]) if len(rows) > 1 else rows[-1][1]["rss_mb"]
        ok = "OK" if wall <= LIMIT_S and rss <= LIMIT_RSS_MB else "OVER"
        measured_at = "measured" if rows[-1][0] >= CATALOG_TASKS else "extrapolated"
        print(
            f"  {name:<18} at {CATALOG_TASKS} tasks ({measured_at}): {wall:.0f}s wall, {cpu:.0f} CPU-s, "
            f"{rss:.0f} MB peak: {ok} (<= {LIMIT_S}s, <= {LIMIT_RSS_MB} MB)"
        )


if __name__ == "__main__":
    main([int(n) for n in sys.argv[1].split(",")] if len(sys.argv) > 1 else None)
