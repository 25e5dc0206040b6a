"""An upgrade: a store the previous prepare format wrote, refreshed by today's `dareforge run` (issue 43).

The old store is written by the commit before the last PREPARE_FORMAT bump (its `dareforge/` taken out of this
repository's history with `git archive`), on two small builtin sources. Today's installed `dareforge run` then
refreshes it from that old folder, whose `dareforge/` must change nothing: the refresh cuts a new release version
with a changelog, and each source keeps the split side it had.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from dareforge.child_python import child_env, python_argv
from dareforge.context import RunContext
from dareforge.publish.release import list_versions, load_release
from dareforge.schema import PreparedSource
from tests.stores import prediction_only, store_config

REPO = Path(__file__).resolve().parents[1]
PREVIOUS = "77c287edd8a96d9aebeb4e1ef5bebc38e36cd8d2"
"""The parent of 5021c5f, which raised PREPARE_FORMAT to 6: its stores hold format 5 (`git log -S
PREPARE_FORMAT` finds the bumps)."""
SOURCES = ["sklearn-iris", "statsmodels-co2"]  # a classification and a series: both split sides get a source
# Both runs make goal tasks only (no IF, QA or Lake task): the upgrade is about the store's formats and the
# sources' split sides, which every family shares, and each IF task would cost both runs a reference run more.
GUARD_S = 1200
"""A guard against a hung child (the failure this test is about), far above a run's minute; never a measure."""

OLD_RUN = """
import sys
from datetime import date
from pathlib import Path

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.families.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.publish.release import build_release
from dareforge.understand.understand_stage import understand

root, old_code = Path(sys.argv[1]), Path(sys.argv[2])
import dareforge
if not Path(dareforge.__file__).is_relative_to(old_code):
    sys.exit(f"the old run imported {dareforge.__file__}, not the old code")
cfg = Config()
cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
cfg.builtin.include = sys.argv[3].split(",")
cfg.generate.qa_per_source = cfg.generate.lakes_per_source = cfg.generate.if_variants = 0
ctx = RunContext.from_config(cfg, show_progress=False)
for stage in (crawl, filter_sources, understand, prepare, generate):
    stage(ctx)
build_release(ctx, "bench", today=date(2026, 1, 15))
"""


def _old_code(folder: Path) -> Path:
    """The previous format's package, unpacked in `folder`; skips where this checkout lacks that commit."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout of dareforge (the previous format's code comes from its history)")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS, "dareforge"], capture_output=True, timeout=GUARD_S
    )
    if archive.returncode != 0:
        pytest.skip(
            f"commit {PREVIOUS[:7]} is not in this clone (shallow?): {archive.stderr.decode()[-200:]}"
        )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=GUARD_S)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_todays_run_upgrades_a_store_of_the_previous_format_from_a_folder_holding_the_old_code(tmp_path):
    old = _old_code(tmp_path / "old-clone")
    root = tmp_path / "root"
    _run(
        python_argv("-c", OLD_RUN, str(root), str(old), ",".join(SOURCES)),
        cwd=old,
        env=child_env({"PYTHONPATH": str(old)}),
    )
    ctx = RunContext.from_config(prediction_only(store_config(root, SOURCES)), show_progress=False)
    (before,) = list_versions(ctx, "bench")
    old_release = load_release(ctx, "bench", before)
    prepared_before = _prepared(ctx)

    # The operator's upgrade: today's installed dareforge, run from the old clone's folder.
    settings = {
        "DAREFORGE_STORE__ROOT": str(root / "store"),
        "DAREFORGE_STORE__WORK_DIR": str(root / "work"),
        "DAREFORGE_BUILTIN__INCLUDE": f"[{','.join(SOURCES)}]",
        "DAREFORGE_GENERATE__QA_PER_SOURCE": "0",
        "DAREFORGE_GENERATE__LAKES_PER_SOURCE": "0",
        "DAREFORGE_GENERATE__IF_VARIANTS": "0",
        "DAREFORGE_LLM__LOCAL__ENABLED": "false",
        "DAREFORGE_RUN__JOBS": "1",
    }
    dareforge_cli = Path(sys.executable).parent / "dareforge"
    _run(
        [str(dareforge_cli), "run", "--release", "bench", "--until", "release"],
        cwd=old,
        env=child_env(settings),
    )

    versions = list_versions(ctx, "bench")
    assert len(versions) == 2 and versions[0] == before
    new_release = load_release(ctx, "bench", versions[1])
    # Every source prepared again: PREPARE_FORMAT is part of a prepared version's fingerprint.
    assert {source for source, _ in _prepared(ctx) - prepared_before} == {f"builtin.{s}" for s in SOURCES}
    changes = ctx.store.read_bytes(f"{new_release.prefix}/CHANGELOG.md").decode()
    assert before in changes and versions[1] in changes
    old_sides = {s["id"]: s["split"] for s in old_release.manifest["sources"]}
    new_sides = {s["id"]: s["split"] for s in new_release.manifest["sources"]}
    assert set(old_sides) == {f"builtin.{s}" for s in SOURCES} and set(old_sides.values()) == {
        "train",
        "test",
    }
    assert new_sides == old_sides
    assert new_release.task_ids  # the new version holds tasks, each on its source's side
    assert all(new_sides[t["source_id"]] == t["split"] for t in new_release.manifest["tasks"])


def _prepared(ctx: RunContext) -> set[tuple[str, str]]:
    return {(p.source_id, p.version) for p in ctx.store.read_records(PreparedSource)}
