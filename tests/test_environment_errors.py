"""Config and environment mistakes as the CLI reports them: one line that names the key, variable or path and
the fix, exit code 2, never a traceback (issue 25, C2-C7). A full disk also leaves the store as its readers
expect it, and the same run finishes once space is freed, with what a run on a roomy disk releases."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dareforge.cli import app
from dareforge.publish.versions import BUILDS
from dareforge.schema import RECORDS
from dareforge.store import Store
from tests.mounts import tmpfs

REPO = Path(__file__).resolve().parents[1]
STORE_ROOT_HINT = "point `store.root` (--store, DAREFORGE_STORE__ROOT or the config file) at another folder"
RELEASED = ("releases", "exports", "published")
"""What a run puts out of the store's own bookkeeping: the release, the exports and their published copies."""


@pytest.fixture
def cli(tmp_path, monkeypatch) -> Callable[..., object]:
    """`dareforge -q --store STORE ARGS...` on two small builtin sources, without a model."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAREFORGE_BUILTIN__INCLUDE", "[sklearn-iris, sklearn-wine]")
    monkeypatch.setenv("DAREFORGE_LLM__LOCAL__ENABLED", "false")

    def invoke(store: Path, *args: str):
        return CliRunner().invoke(app, ["-q", "--store", str(store), *args], catch_exceptions=False)

    return invoke


def error_line(result) -> str:
    """The one line the CLI printed for a mistake, without its `error: ` prefix."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    (line,) = [line for line in lines if line.startswith("error: ")]
    assert line == lines[-1]  # what `run` printed before it (the stages' summaries) may come first
    return line.removeprefix("error: ")


def test_a_limit_that_means_nothing_is_one_line_naming_the_key_and_where_it_was_set(
    cli, tmp_path, monkeypatch
):
    monkeypatch.setenv("DAREFORGE_SANDBOX__CPU_SECONDS", "-10")
    assert error_line(cli(tmp_path / "store", "filter")) == (
        "config: sandbox.cpu_seconds = -10: Input should be greater than 0 "
        "(set in env DAREFORGE_SANDBOX__CPU_SECONDS)"
    )
    monkeypatch.delenv("DAREFORGE_SANDBOX__CPU_SECONDS")
    file = tmp_path / "limits.yaml"
    file.write_text("rules:\n  min_rows: -5\n")
    assert error_line(cli(tmp_path / "store", "--config", str(file), "filter")) == (
        f"config: rules.min_rows = -5: Input should be greater than 0 (set in file {file})"
    )


def test_a_config_path_that_is_a_folder_is_one_line(cli, tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    assert error_line(cli(tmp_path / "store", "--config", str(folder), "filter")) == (
        f"config file {folder} cannot be read (Is a directory); point --config or DAREFORGE_CONFIG at a "
        "readable YAML file"
    )


def test_invalid_yaml_in_an_env_var_is_one_line_naming_the_variable(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("DAREFORGE_MIRROR__PATHS", "[/srv/kaggle-mirror")  # also no markup to the console
    line = error_line(cli(tmp_path / "store", "filter"))
    assert line.startswith(
        "DAREFORGE_MIRROR__PATHS='[/srv/kaggle-mirror': not valid YAML (expected ',' or ']'"
    )
    assert line.endswith("fix the value or unset the variable")


@pytest.mark.parametrize("under", ["", "store"], ids=["the root", "a folder above it"])
def test_a_file_where_the_store_root_needs_a_folder_is_one_line(cli, tmp_path, under):
    file = tmp_path / "not-a-folder"
    file.write_text("")
    line = error_line(cli(file / under, "crawl"))
    assert line == f"{file} is a file where a folder is needed: move that file away, or {STORE_ROOT_HINT}"


def test_a_read_only_store_is_one_line_and_can_still_be_read(cli, tmp_path):
    disk = tmp_path / "disk"
    with tmpfs(disk, 64 * 1024) as remount:
        store = disk / "store"
        assert cli(store, "crawl").exit_code == 0
        remount("ro")
        line = error_line(cli(store, "crawl"))
        assert re.fullmatch(
            rf"{re.escape(str(store / '.locks'))}/\S+ is on a read-only file system: remount it read-write, or "
            + re.escape(STORE_ROOT_HINT),
            line,
        ), line
        assert error_line(cli(disk / "new-store", "crawl")).startswith(
            f"{disk / 'new-store'} is on a read-only"
        )
        read = cli(store, "sql", "select count(*) as n from sources", "--format", "json")
        assert read.exit_code == 0 and '"n": 2' in read.output, read.output


WITHOUT_FILE_CAPABILITIES = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
"""Root writes anywhere; without the capabilities that let it, root meets a folder's mode like any user."""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_store_this_user_may_not_write_is_one_line(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o555)
    crawl = ["-m", "dareforge.cli", "-q", "--store", str(store), "crawl"]
    done = subprocess.run(
        [*WITHOUT_FILE_CAPABILITIES, sys.executable, *crawl],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "DAREFORGE_BUILTIN__INCLUDE": "[sklearn-iris]"},
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        f"error: permission denied on {store / '.locks'}: give this user access to it, or {STORE_ROOT_HINT}"
    ]


STEP_OF_EACH_STAGE = {
    "crawl": "dareforge.crawlers.crawl.describe_file",
    "understand": "dareforge.understand.understand_stage._frame",
    "prepare": "dareforge.generators.prepare._prepare_framing",
    "generate": "dareforge.families.generate.build_tasks",
    "validate": "dareforge.validators.leakage.LeakageFeature.run",
}
"""A step each stage runs per source (or per task), inside the guard that records that source's failure."""


@pytest.mark.parametrize("stage", STEP_OF_EACH_STAGE)
def test_a_full_disk_is_no_sources_failure_the_run_stops_in_one_line(stage, cli, tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a failed write() raises it: no file named

    monkeypatch.setenv("DAREFORGE_BUILTIN__INCLUDE", "[sklearn-iris]")
    monkeypatch.setattr(STEP_OF_EACH_STAGE[stage], full_disk)
    store = tmp_path / "store"
    assert error_line(cli(store, "run")) == (
        f"no space left on device while writing {store}: free space there, or {STORE_ROOT_HINT}; then run again: "
        "finished work is kept"
    )


def _kib_used(folder: Path, skip: str = "") -> int:
    """Disk space the files under `folder` take (as `du` counts it), leaving out the subfolder `skip`."""
    files = (
        p for p in folder.rglob("*") if p.is_file() and not (skip and skip in p.relative_to(folder).parts)
    )
    return sum(p.stat().st_blocks for p in files) // 2


def _assert_consistent(root: Path) -> None:
    """What the store's own readers expect: every table partition reads, every manifest matches its files, and
    no interrupted write left a temp file behind (the work dir's scratch is not the store)."""
    work = root / ".work"
    assert [p for p in root.rglob(".tmp-*") if not p.is_relative_to(work)] == []
    store = Store(str(root))
    for cls in RECORDS.values():
        store.read_records(cls)
    manifests = [key for key in store.list("") if key.endswith("/_MANIFEST.json")]
    assert [problem for key in manifests for problem in store.verify(key.rpartition("/")[0])] == []


def _released(root: Path) -> dict[str, bytes]:
    """Every released, exported and published file but the build records (when and where it was built)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for folder in RELEASED
        for path in sorted((root / folder).rglob("*"))
        if path.is_file() and BUILDS not in path.parts
    }


def test_a_full_disk_stops_the_run_in_one_line_and_the_same_run_finishes_once_space_is_freed(
    cli, tmp_path, monkeypatch
):
    # One source and no IF variants: this test runs the whole pipeline three times, and a full disk fails the
    # store's writes the same whichever source or family writes (each IF task cost every run a reference and a
    # validation run more; wine, a second source of the same kinds of task, half of each run's CPU).
    monkeypatch.setenv("DAREFORGE_BUILTIN__INCLUDE", "[sklearn-iris]")
    monkeypatch.setenv("DAREFORGE_GENERATE__IF_VARIANTS", "0")
    roomy = tmp_path / "roomy"
    assert cli(roomy, "run").exit_code == 0
    # Reports (Data Docs) cover only the checks a run made, so a resumed run writes fewer: the sizes that must
    # fail leave them out, and only then are they too small for any run to finish.
    outputs = _kib_used(roomy, skip="reports")
    disk = tmp_path / "disk"
    store = disk / "store"
    with tmpfs(disk, outputs // 2) as remount:  # full halfway through the run
        line = error_line(cli(store, "run"))
        assert re.fullmatch(
            rf"no space left on device while writing {re.escape(str(store))}\S*: free space there, or point "
            r"`store\.(root|work_dir)` \(.*\) at another folder; then run again: finished work is kept",
            line,
        ), line
        _assert_consistent(store)
        remount(f"size={2 * _kib_used(roomy)}k")
        finished = cli(store, "run")
        assert finished.exit_code == 0, finished.output
        _assert_consistent(store)
        assert _released(store) == _released(roomy)
