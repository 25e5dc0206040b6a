"""Processes sharing one store: same stages at once, one `dareforge run` at a time, scratch that never collides.

No test here races the clock: processes start their work together at a barrier (each waits for a line on stdin),
and "still waiting" is shown by a process blocked on a lock the test holds, released only when the test says so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dareforge.cli import app
from dareforge.cli.run import RUN_LOCK
from dareforge.config_loader import load_config
from dareforge.context import PROCESS_FOLDERS, RunContext
from dareforge.pipeline import Run, stage
from dareforge.publish.release import load_release, verify_release
from dareforge.publish.versions import finished_versions
from dareforge.sandbox import probe
from dareforge.schema import Task
from dareforge.scratch import TEMP_PREFIX, process_folder
from tests.stores import store_config

SOURCES = ["sklearn-iris", "statsmodels-co2"]  # a tabular and a time-series source
RELEASE = "both"

STAGES = textwrap.dedent(
    """
    import sys
    from dareforge.config import Config
    from dareforge.context import RunContext
    from dareforge.crawlers.crawl import crawl
    from dareforge.crawlers.filter import filter_sources
    from dareforge.families.generate import generate
    from dareforge.generators.prepare import prepare
    from dareforge.understand.understand_stage import understand
    from dareforge.publish.release import build_release
    from dareforge.validators.validate import validate

    cfg = Config()
    cfg.store.root = sys.argv[1]
    cfg.builtin.include = sys.argv[2].split(",")
    cfg.validate_.data_docs = False  # seconds of HTML nobody reads here
    cfg.generate.if_variants = 1  # a second IF seed is written the same way as the first: it proves nothing more
    ctx = RunContext.from_config(cfg, show_progress=False)
    print("ready", flush=True)
    sys.stdin.readline()  # the barrier: every process starts the stages when the test says go
    crawl(ctx)
    filter_sources(ctx)
    understand(ctx)
    prepare(ctx)
    generated = generate(ctx)
    if generated.failures:
        sys.exit(f"generate failed: {generated.failures}")
    validate(ctx)
    print(build_release(ctx, sys.argv[3]).version, flush=True)
    """
)


def _start_together(commands: list[list[str]], env: dict[str, str] | None = None) -> list[subprocess.Popen]:
    procs = [
        subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for cmd in commands
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return procs


def _release_files(ctx: RunContext, version: str) -> dict[str, str]:
    """sha256 of the release's task files, answers and split tables, by path."""
    release = load_release(ctx, RELEASE, version)
    # README, the manifests and private.parquet also hold times and measured seconds, which differ between any
    # two builds (a separate matter); every byte that defines the tasks is compared.
    return {
        f"{part.name}/{entry['name']}": entry["sha256"]
        for part in release.parts()
        for entry in part.manifest["files"]
        if entry["name"].startswith(("files/", "answers/", "data/train", "data/test"))
    }


def _tasks(ctx: RunContext) -> dict[str, tuple]:
    return {
        t.id: (t.status, sorted((f.name, f.sha256) for f in [*t.public_files, *t.private_files]))
        for t in ctx.store.read_records(Task)
    }


def test_two_processes_running_the_same_stages_at_once_build_what_one_builds(tmp_path):
    shared = tmp_path / "shared"
    procs = _start_together(
        [[sys.executable, "-c", STAGES, str(shared / "store"), ",".join(SOURCES), RELEASE] for _ in range(2)]
    )
    outputs = [proc.communicate() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    versions = {out.strip().splitlines()[-1] for out, _ in outputs}

    single = subprocess.run(
        [sys.executable, "-c", STAGES, str(tmp_path / "single" / "store"), ",".join(SOURCES), RELEASE],
        input="go\n",
        capture_output=True,
        text=True,
    )
    assert single.returncode == 0, single.stderr

    both = RunContext.from_config(store_config(shared, SOURCES), show_progress=False)
    one = RunContext.from_config(store_config(tmp_path / "single", SOURCES), show_progress=False)
    # One version: the second builder waited for the first and found the same content.
    assert versions == set(finished_versions(both.store, f"releases/{RELEASE}")) and len(versions) == 1
    (version,) = versions
    (single_version,) = finished_versions(one.store, f"releases/{RELEASE}")
    assert verify_release(both, RELEASE, version) == []
    assert _tasks(both) == _tasks(one) and len(_tasks(one)) >= 4
    assert (
        load_release(both, RELEASE, version).task_ids == load_release(one, RELEASE, single_version).task_ids
    )
    assert _release_files(both, version) == _release_files(one, single_version)
    # Each process's scratch folder went with it.
    assert list((shared / "store" / ".work" / "proc").iterdir()) == []


HOLD_RUN_LOCK = textwrap.dedent(
    """
    import sys
    from dareforge.store import Store

    with Store(sys.argv[1]).lock(sys.argv[2]):
        print("held", flush=True)
        sys.stdin.readline()
    """
)


@pytest.fixture
def run_lock_held(tmp_path):
    """Another process holding the store's run lock until the test closes its stdin."""
    store = tmp_path / "store"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_RUN_LOCK, str(store), RUN_LOCK],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield store, holder
    if holder.poll() is None:
        holder.kill()
        holder.wait()


def _run_env() -> dict[str, str]:
    # No sources: a run that gets past the lock stops at once, after the filter: "the crawl stored no source".
    return {
        **os.environ,
        "DAREFORGE_BUILTIN__ENABLED": "false",
        "DAREFORGE_LLM__LOCAL__ENABLED": "false",
        "COLUMNS": "400",  # one message, one line
    }


def test_a_second_run_refuses_with_no_wait_naming_the_holder(run_lock_held, monkeypatch):
    store, holder = run_lock_held
    for name, value in _run_env().items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["-q", "--store", str(store), "run", "--no-wait"])
    assert result.exit_code == 2
    assert "is in use by another `dareforge run`" in result.output
    assert f"pid {holder.pid} on host {socket.gethostname()} since " in result.output
    assert "nothing to release" not in result.output  # it stopped before doing anything


def test_a_second_run_waits_for_the_first_and_then_runs(run_lock_held, tmp_path):
    store, holder = run_lock_held
    dareforge = Path(sys.executable).with_name("dareforge")
    waiting = subprocess.Popen(
        [str(dareforge), "-q", "--store", str(store), "run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_run_env(),
        cwd=tmp_path,
    )
    assert waiting.stderr is not None
    line = waiting.stderr.readline()  # EOF (an empty line) if the run did not wait
    assert line.startswith("waiting: the store") and f"pid {holder.pid} on host" in line, line
    assert waiting.poll() is None  # blocked on the lock, which the holder still has
    assert holder.stdin is not None
    holder.stdin.close()  # the first run ends
    holder.wait()
    out, err = waiting.communicate()
    assert waiting.returncode == 2 and "the crawl stored no source" in out + err, out + err


def test_work_dir_follows_the_store_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "elsewhere" / "store"
    cfg = load_config(environ={"DAREFORGE_STORE__ROOT": str(store)})
    assert cfg.store.work_path == store / ".work"
    assert load_config(environ={}).store.work_path == Path("data") / ".work"
    explicit = load_config(environ={"DAREFORGE_STORE__ROOT": str(store), "DAREFORGE_STORE__WORK_DIR": "/w"})
    assert explicit.store.work_path == Path("/w")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    remote = load_config(environ={"DAREFORGE_STORE__ROOT": "s3://bucket/dareforge"}).store.work_path
    assert remote.parent == tmp_path / "cache" / "dareforge" / "work"
    other = load_config(environ={"DAREFORGE_STORE__ROOT": "s3://bucket/other"}).store.work_path
    assert other != remote  # one cache per store

    # A crawl's downloads go under the store's work dir, not under the current directory.
    monkeypatch.setenv("DAREFORGE_STORE__ROOT", str(store))
    monkeypatch.setenv("DAREFORGE_BUILTIN__INCLUDE", "[sklearn-iris]")
    result = CliRunner().invoke(app, ["-q", "crawl"])
    assert result.exit_code == 0, result.output
    assert (store / ".work").is_dir() and not (tmp_path / "data").exists()


HOLD_FOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from dareforge.scratch import process_folder

    folder = process_folder(Path(sys.argv[1]), *sys.argv[2:])  # the base, and a prefix when given
    (folder / "draft.csv").write_text("x")
    print(folder, flush=True)
    sys.stdin.readline()
    """
)


def test_scratch_of_a_killed_process_is_removed_and_a_live_ones_kept(tmp_path):
    base = tmp_path / "proc"
    killed, alive = (
        subprocess.Popen(
            [sys.executable, "-c", HOLD_FOLDER, str(base)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    )
    folders = [Path(p.stdout.readline().strip()) for p in (killed, alive)]  # type: ignore[union-attr]
    assert folders[0] != folders[1] and all(f.parent == base for f in folders)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert folders[0].is_dir()  # kill -9 ran no clean-up

    mine = process_folder(base)  # the next process to use the base sweeps it
    assert not folders[0].exists() and not Path(f"{folders[0]}.lock").exists()
    assert (folders[1] / "draft.csv").read_text() == "x"  # its owner still runs
    assert mine.is_dir() and mine not in folders

    alive.communicate("")  # a normal exit removes its own folder
    assert not folders[1].exists() and not Path(f"{folders[1]}.lock").exists()

    shutil.rmtree(mine)  # someone clears the work dir under a long-lived process
    again = process_folder(base)
    assert again.is_dir() and again != mine and not Path(f"{mine}.lock").exists()


def _holding(base: Path, *prefix: str) -> tuple[subprocess.Popen, Path]:
    """A process holding its own scratch folder under `base` until its stdin closes, and that folder."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_FOLDER, str(base), *prefix],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return holder, Path(holder.stdout.readline().strip())  # type: ignore[union-attr]


def test_the_next_stage_removes_the_scratch_a_killed_run_left_and_keeps_a_live_ones(
    ctx, tmp_path, monkeypatch
):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # the system temp folder, as this process sees it
    work = ctx.work_dir / PROCESS_FOLDERS
    killed = [_holding(work), _holding(temp, TEMP_PREFIX)]
    alive, kept = _holding(work)
    for holder, folder in killed:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert folder.is_dir()  # kill -9 ran no clean-up
    # A stage that makes no scratch of its own (nothing to redo): it sweeps all the same.
    stage("filter").run(Run(ctx))
    assert [folder.exists() for _, folder in killed] == [False, False]
    assert not list(work.glob(f"{killed[0][1].name}*")) and not list(temp.glob(f"{killed[1][1].name}*"))
    assert (kept / "draft.csv").read_text() == "x"  # its owner still runs
    alive.communicate("")


AGENT_KILLED_MID_EPISODE = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from types import SimpleNamespace
    from dareforge.agents.loop import run_agent
    from dareforge.config import SandboxConfig
    from dareforge.sandbox import Sandbox
    from dareforge.schema import MetricSpec, Task

    task = Task(
        id="t", family="Class-MM", source_id="s", source_version="1", prepared_version="1",
        generator_version="1", seed=0, instruction="predict", public_files=[], private_files=[],
        metric=MetricSpec(name="macro-f1", target_columns=["y"], key_columns=["id"]), package_versions=[],
    )

    class Client:
        endpoint = SimpleNamespace(name="scripted", model="m")

        async def chat(self, messages, **kwargs):
            return SimpleNamespace(
                error=None, text="<code>1</code>", prompt_tokens=1, completion_tokens=1, finish_reason="stop"
            )

    def sandbox(inputs, workspace, seconds):
        box = Sandbox(inputs, workspace, SandboxConfig(), seconds).start()
        print("playing", flush=True)  # mid-episode: a kernel runs, its folders exist
        sys.stdin.readline()
        return box

    asyncio.run(run_agent(task, Path(sys.argv[1]), Client(), sandbox))
    """
)


@pytest.mark.skipif(not probe().available, reason=f"needs bubblewrap: {probe().reason}")
def test_kill_9_mid_episode_leaves_temp_folders_the_next_process_removes(tmp_path):
    # A short temp folder: the kernel's sockets live under it, and a socket path has at most 107 characters.
    temp = Path(tempfile.mkdtemp(prefix="dfk-", dir="/tmp"))
    try:
        _kill_mid_episode_then_sweep(temp, tmp_path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _kill_mid_episode_then_sweep(temp: Path, tmp_path: Path) -> None:
    (tmp_path / "public").mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    player = subprocess.Popen(
        [sys.executable, "-c", AGENT_KILLED_MID_EPISODE, str(tmp_path / "public")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert player.stdout is not None and player.stdout.readline().strip() == "playing"
    player.send_signal(signal.SIGKILL)
    player.wait()
    left = [p.name for p in temp.glob("dareforge-*/*")]  # all inside the killed process's own folder
    assert any(n.startswith("dfsbx-") for n in left) and any(n.startswith("dareforge-agent-") for n in left)

    later = subprocess.run(
        [sys.executable, "-c", "from dareforge.scratch import temp_root; print(temp_root())"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert Path(later.stdout.strip()).parent == temp
    assert list(temp.iterdir()) == []  # the killed player's folders are gone, and the later one's at its exit


def test_store_lock_is_reentrant_within_a_thread_and_names_its_holder(tmp_path):
    from dareforge.locking import StoreBusyError
    from dareforge.store import Store

    store = Store(str(tmp_path / "store"))
    with store.lock("prepared/a"), store.lock("prepared/a"):  # nested in one thread: no self-deadlock
        held = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys\nfrom dareforge.store import Store\n"
                "with Store(sys.argv[1]).lock('prepared/a', wait=False): pass",
                str(tmp_path / "store"),
            ],
            capture_output=True,
            text=True,
        )
        assert held.returncode != 0 and f"pid {os.getpid()} on host" in held.stderr
    with store.lock("prepared/a", wait=False):  # released after the outer block
        pass
    info = json.loads((tmp_path / "store" / ".locks" / "prepared" / "a.lock").read_text() or "{}")
    assert info == {}  # a released lock names nobody

    def try_lock() -> str:
        with store.lock("x", wait=False):
            return "got it"

    with store.lock("x"), pytest.raises(StoreBusyError):
        _in_another_thread(try_lock)  # threads of one process exclude each other too
    assert _in_another_thread(try_lock) == "got it"


def _in_another_thread(fn):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()
