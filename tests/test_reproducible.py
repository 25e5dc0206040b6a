"""A release and its exports are a function of their inputs: two builds from the same sources on two fresh
stores give byte-identical released and exported files, and none of them holds a path of the machine that
built them.

Each build runs the pipeline `dareforge run` runs, without a model: crawl (two builtin sources and one mirror
folder both builds read), filter, understand, prepare, generate, check (the first build in its own process, the
second on two worker processes, as `dareforge run` maps them), validate, the release, gold trajectories played in the
sandbox, the SFT and RL exports, then publishes all three to a folder and writes the DARE-bench layout. What
varies between the builds is what varies between two runs on one machine: the store's folder, the time, and
measured seconds (references, executions).
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dareforge.context import RunContext
from dareforge.exports.export_format import ExportJob
from dareforge.exports.formats import export_format
from dareforge.pipeline import Run, stage
from dareforge.publish.release import build_release
from dareforge.publish.targets import LocalTarget
from dareforge.publish.versions import BUILDS
from dareforge.trajectories import gold_trajectories
from dareforge.trajectories.corpus import build_corpus
from tests.stores import store_config

SOURCES = ["sklearn-iris", "sklearn-diabetes"]
RELEASE = "bench"
DAY = date(2026, 1, 15)
REPO = Path(__file__).resolve().parents[1]
OUTPUTS = ("store/releases", "store/exports", "published", "dare-bench")
"""What leaves the store: the release's two halves and the exports, their published copies, DARE-bench's
layout. Reports, run logs and store tables stay on the machine and may hold times and paths."""


def _mirror(root: Path) -> Path:
    """One mirror source: a small labelled table with the metadata a Kaggle download has."""
    rng = np.random.default_rng(7)
    rows = 300
    frame = pd.DataFrame({"x1": rng.normal(size=rows).round(4), "x2": rng.uniform(0, 5, size=rows).round(3)})
    frame["label"] = np.where(frame["x1"] + 0.3 * frame["x2"] > 0.7, "yes", "no")
    folder = root / "plants"
    folder.mkdir(parents=True)
    meta = {"id": "someone/plants", "title": "plants", "lastUpdated": "2024-05-01T00:00:00Z"}
    (folder / "dataset-metadata.json").write_text(json.dumps(meta))
    frame.to_csv(folder / "data.csv", index=False)
    return root


def _build(root: Path, mirror: Path, jobs: int) -> Path:
    cfg = store_config(root, SOURCES)
    cfg.mirror.paths = [str(mirror)]
    cfg.generate.if_variants = 1
    cfg.synthesize.split = "all"  # gold trajectories and the SFT export on both sides of the release
    cfg.validate_.ladder_cpu_seconds = 300.0  # the ladder's figures are in the release card; its seconds vary
    ctx = RunContext.from_config(cfg, show_progress=False)
    run = Run(
        ctx, RELEASE, jobs=jobs
    )  # jobs > 1: the per-source stages in worker processes, as dareforge run
    for name in ("crawl", "filter", "understand", "prepare", "generate", "check", "validate"):
        stage(name).run(run)
    release = build_release(ctx, RELEASE, today=DAY).release
    assert release.manifest["skill"]["ladder"], "no ladder ran: the byte comparison leaves its figures out"
    gold = gold_trajectories(ctx, RELEASE, split="all", workers=2)
    assert gold.verified, f"no gold trajectory verified, so no SFT export to compare: {gold.summary()}"
    corpus = build_corpus(ctx, RELEASE, today=DAY)
    target = LocalTarget(root / "published")
    for built in (release, *(export.export for export in corpus.exports.values())):
        target.publish(built)
    export_format("dare-bench").export(ExportJob(ctx, release, dest=root / "dare-bench"))
    return root


def _outputs(root: Path) -> dict[str, bytes]:
    """Every file of those folders but the build records, which stay in the store (when and where a version
    was built is what they are for)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for folder in OUTPUTS
        for path in sorted((root / folder).rglob("*"))
        if path.is_file() and BUILDS not in path.relative_to(root).parts
    }


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> tuple[dict[str, bytes], dict[str, bytes], list[Path]]:
    mirror = _mirror(tmp_path_factory.mktemp("mirror"))
    first = _build(tmp_path_factory.mktemp("first"), mirror, jobs=1)
    second = _build(tmp_path_factory.mktemp("second"), mirror, jobs=2)
    return _outputs(first), _outputs(second), [first, second, mirror]


def test_two_fresh_builds_release_and_export_the_same_bytes(builds):
    first, second, _ = builds
    assert set(first) == set(second)
    for folder in OUTPUTS:
        assert any(name.startswith(folder + "/") for name in first), f"the build wrote nothing under {folder}"
    assert any(name.startswith("store/exports/bench-sft/") for name in first)
    differing = sorted(name for name in first if first[name] != second[name])
    assert differing == [], f"{len(differing)} of {len(first)} files differ between two builds: {differing}"


def test_no_released_or_exported_file_holds_a_host_path(builds):
    first, second, folders = builds
    host_paths = {str(p) for p in folders} | {str(REPO), str(Path.cwd()), str(Path.home())}
    found = [
        f"{name}: {path}"
        for outputs in (first, second)
        for name, data in outputs.items()
        for path in host_paths
        if path.encode() in data
    ]
    assert found == [], "\n".join(found)
