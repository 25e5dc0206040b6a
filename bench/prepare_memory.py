"""Prepare a CSV larger than 2 GB and measure the peak memory of the process: it should stay far below the file.

Baseline and measurement come from the same run: the baseline is a process that only imports the prepare stage
(dareforge, DuckDB, pyarrow), the measurement is a process that runs `prepare` on the big source with the
default `prepare.*` settings (the target applies to these), then again with a 2GB memory limit, to show what
raising the limit buys and that it changes no output byte.

Every heavy step runs in its own child process and each child's peak RSS is its own (`os.wait4`), so this
process stays small and no child inherits another's high-water mark. Temp files are removed at the end.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_ID = "mirror.bench--big-csv"
VERSION = "bench-v1"
FRAMING = "regression-target"
MIN_BYTES = int(os.environ.get("BENCH_PREPARE_BYTES", 2 * 1024**3))
"""At least 2 GiB; BENCH_PREPARE_BYTES makes a smaller file for a quick check of the benchmark itself."""
MEMORY_LIMITS = (None, "2GB")
"""None: the default config's `prepare.duckdb_memory_limit`."""
TARGET_RATIO = 0.5

ROWS_SQL = """
SELECT
    i AS id,
    round((hash(i, 1) % 1000000) / 1e6, 6) AS x1,
    round((hash(i, 2) % 1000000) / 1e6 * 100 - 50, 4) AS x2,
    round((hash(i, 3) % 1000000) / 1e6 * 10, 3) AS x3,
    CAST(hash(i, 4) % 500 AS BIGINT) AS n1,
    'c' || CAST(hash(i, 5) % 20 AS VARCHAR) AS cat_small,
    'city_' || CAST(hash(i, 6) % 1000 AS VARCHAR) AS cat_large,
    DATE '2020-01-01' + CAST(i % 1500 AS INTEGER) AS day,
    round(3 * x1 - 0.02 * x2 + 0.5 * x3 + (hash(i, 7) % 1000) / 1000.0, 5) AS target
FROM range({rows}) AS r(i)
"""


def _store_paths(tmp: Path) -> tuple[Path, Path, Path]:
    store, work = tmp / "store", tmp / "work"
    raw = store / "raw" / SOURCE_ID / VERSION / "files" / "big.csv"
    return store, work, raw


def _config(tmp: Path, memory_limit: str | None = None):
    from dareforge.config import Config

    store, work, _ = _store_paths(tmp)
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(store), str(work)
    if memory_limit is not None:
        cfg.prepare.duckdb_memory_limit = memory_limit
    return cfg


# -- child processes ------------------------------------------------------------------------------------------
def _setup(tmp: str) -> None:
    """Child: write a CSV of at least MIN_BYTES with DuckDB and register it in the store as an accepted source."""
    import duckdb

    from dareforge.context import RunContext
    from dareforge.crawlers.crawl import CURRENT
    from dareforge.describe import describe_file
    from dareforge.schema import FilterDecision, Framing, Origin, Source, TaskType

    base = Path(tmp)
    _, _, raw = _store_paths(base)
    raw.parent.mkdir(parents=True)
    con = duckdb.connect(config={"memory_limit": "1GB", "threads": 2})
    con.execute("SET enable_progress_bar = false")
    sample = base / "sample.csv"
    con.execute(f"COPY ({ROWS_SQL.format(rows=100_000)}) TO '{sample}' (HEADER)")
    rows = int(MIN_BYTES * 1.02 / (sample.stat().st_size / 100_000))
    sample.unlink()
    con.execute(f"COPY ({ROWS_SQL.format(rows=rows)}) TO '{raw}' (HEADER)")
    con.close()

    ctx = RunContext.from_config(_config(base), show_progress=False)
    described = describe_file(raw, raw.name)
    prefix = f"raw/{SOURCE_ID}/{VERSION}"
    ctx.store.write_manifest(
        prefix, {"source_id": SOURCE_ID, "version": VERSION, "files": [described.model_dump()]}
    )
    ctx.store.write_json(f"raw/{SOURCE_ID}/{CURRENT}", {"version": VERSION})
    source = Source(
        id=SOURCE_ID,
        origin=Origin.MIRROR,
        kind="dataset",
        ref="bench/big-csv",
        title="Synthetic 2 GB regression table",
        version=VERSION,
        raw_version=VERSION,
        total_bytes=described.size,
        files=[described],
        n_rows=rows,
        target_columns=["target"],
    )
    ctx.store.write_records(SOURCE_ID, [source])
    decision = FilterDecision(
        source_id=SOURCE_ID,
        source_version=VERSION,
        rule="bench",
        kept=True,
        reason="registered by the benchmark",
        rules_fingerprint="bench",
    )
    ctx.store.write_records(SOURCE_ID, [decision])
    framing = Framing(
        source_id=SOURCE_ID,
        source_version=VERSION,
        framing=FRAMING,
        status="chosen",
        task_type=TaskType.REGRESSION,
        target_columns=["target"],
        table_file=raw.name,
        id_column="id",
        confidence=1.0,
        proposers=["config"],
        evidence=["registered by the benchmark"],
        reason="registered by the benchmark",
        understand_version="bench",
    )
    ctx.store.write_records(SOURCE_ID, [framing])
    print(json.dumps({"bytes": described.size, "rows": rows}))


def _baseline() -> None:
    """Child: only import the prepare stage and everything it imports."""
    import dareforge.generators.prepare  # noqa: F401


def _prepare(tmp: str, memory_limit: str | None) -> None:
    """Child: run the prepare stage on the registered source (the default accepted set)."""
    from dareforge.context import RunContext
    from dareforge.generators.prepare import load_prepared, prepare

    steps: dict[str, float] = {}

    class Steps(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.msg.endswith("took %.2fs"):
                steps[record.args[1]] = round(record.args[2], 1)

    logger = logging.getLogger("dareforge.generators.prepare")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Steps())
    ctx = RunContext.from_config(_config(Path(tmp), memory_limit), show_progress=False)
    started = time.perf_counter()
    report = prepare(ctx)
    seconds = time.perf_counter() - started
    if report.labels("prepared") != [f"{SOURCE_ID}/{FRAMING}"]:
        raise SystemExit(f"prepare did not prepare {SOURCE_ID}: {report}")
    record = load_prepared(ctx, SOURCE_ID)[0]
    out = {
        "memory_limit": ctx.config.prepare.duckdb_memory_limit,
        "seconds": seconds,
        "n_rows": record.n_rows,
        "n_train": record.n_train,
        "n_test": record.n_test,
        "task_type": record.task_type.value,
        "id_column": record.id_column,
        "output_bytes": sum(f.size for f in record.files),
        "sha256": [f.sha256 for f in record.files],
        "steps": steps,
    }
    print(json.dumps(out))


# -- the parent -----------------------------------------------------------------------------------------------
def _run(code: str) -> tuple[str, int, float]:
    """Run a child Python; returns (stdout, peak RSS in bytes, wall seconds)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    if proc.returncode:
        raise RuntimeError(f"benchmark child failed ({proc.returncode}): {code}")
    return out, usage.ru_maxrss * 1024, time.perf_counter() - started  # Linux reports KiB


def _mb(value: float) -> str:
    return f"{value / 1024**2:,.0f} MB"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="dareforge-prepare-bench-") as tmp:
        here = "from bench import prepare_memory as b; "
        out, _, setup_s = _run(f"{here}b._setup({tmp!r})")
        made = json.loads(out.strip().splitlines()[-1])
        size = made["bytes"]
        _, baseline, _ = _run(f"{here}b._baseline()")
        print(
            f"prepare memory: {size / 1024**3:.2f} GiB CSV, {made['rows']:,} rows (made in {setup_s:.0f}s); "
            f"baseline (import only) {_mb(baseline)}"
        )
        digests = set()
        for limit in MEMORY_LIMITS:
            shutil.rmtree(Path(tmp) / "store" / "prepared", ignore_errors=True)
            (Path(tmp) / "store" / "tables" / "prepared" / f"{SOURCE_ID}.parquet").unlink(missing_ok=True)
            out, peak, wall = _run(f"{here}b._prepare({tmp!r}, {limit!r})")
            result = json.loads(out.strip().splitlines()[-1])
            digests.add(tuple(result["sha256"]))
            ratio = peak / size
            verdict = f"(target < {TARGET_RATIO}) {'OK' if ratio < TARGET_RATIO else 'MISSED'}"
            print(
                f"  duckdb_memory_limit={result['memory_limit']}{' (default)' if limit is None else ''}: peak RSS {_mb(peak)} "
                f"(baseline {_mb(baseline)}, +{_mb(peak - baseline)}), peak/file {ratio:.3f} "
                f"{verdict if limit is None else '(not the default)'}; prepare {result['seconds']:.0f}s, "
                f"process {wall:.0f}s; "
                f"{result['n_train']:,} train + {result['n_test']:,} test rows ({result['task_type']}, "
                f"id {result['id_column']})"
            )
            print(
                "    steps: "
                + ", ".join(f"{step} {seconds:.0f}s" for step, seconds in result["steps"].items())
            )
        if len(digests) != 1:
            raise RuntimeError("prepare wrote different files under different memory limits")
        print("  train/test/answers are byte-identical under every memory limit")
