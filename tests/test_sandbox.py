"""The agent sandbox: what code inside can see and do, and what the host gets back.

Needs bubblewrap (`make sysdeps` installs it); without it the isolation tests are skipped, loudly. The escape
attempts never leave the machine: the network test first checks that the only interface is a loopback of the
sandbox's own network namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dareforge.config import SandboxConfig
from dareforge.sandbox import (
    INPUT_DIR,
    KernelPool,
    Sandbox,
    SandboxError,
    SandboxUnavailableError,
    isolation,
    probe,
)
from dareforge.sandbox.execution import OutputBudget, cut_traceback, strip_ansi

SECONDS = 3.0
CONFIG = SandboxConfig(memory_mb=2048, max_processes=32, max_output_bytes=2000, max_traceback_chars=400)
ISOLATION = probe()
needs_bwrap = pytest.mark.skipif(
    not ISOLATION.available,
    reason=f"!!! SANDBOX ISOLATION NOT TESTED: {ISOLATION.reason}; install it with `make sysdeps` "
    "(apt-get install bubblewrap) !!!",
)


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("task")
    (root / "public").mkdir()
    (root / "public" / "train.csv").write_text("id,x,y\n1,0.5,1\n2,0.7,0\n")
    (root / "private").mkdir()
    (root / "private" / "answers.csv").write_text("id,y\n3,1\n")
    for path in (root, root / "public", root / "public" / "train.csv"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


@pytest.fixture(scope="module")
def sandbox(task, tmp_path_factory):
    workspace = tmp_path_factory.mktemp("workspace")
    with Sandbox(task / "public", workspace, CONFIG, SECONDS, interrupt_grace_s=2.0) as box:
        yield box


def run_ok(box: Sandbox, code: str):
    result = box.execute(code)
    assert result.error is None, (result.error, result.traceback, result.stderr)
    return result


@needs_bwrap
def test_state_persists_and_written_files_are_reported(sandbox):
    assert sandbox.isolated and sandbox.input_path == INPUT_DIR
    run_ok(sandbox, "counter = 41")
    result = run_ok(sandbox, "counter += 1\nprint('hello')\ncounter")
    assert (result.stdout, result.result) == ("hello\n", "42")
    result = run_ok(
        sandbox,
        "import os, shutil\n"
        "os.makedirs('sub', exist_ok=True)\n"
        "shutil.copy('/task/input/train.csv', 'sub/copy.csv')\n"
        "open('notes.txt', 'w').write('n')\n"
        "os.getcwd()",
    )
    assert result.result == "'/task/work'"
    assert result.files_written == ("notes.txt", "sub/copy.csv")
    assert (sandbox.workspace / "sub" / "copy.csv").read_text().startswith("id,x,y")
    assert run_ok(sandbox, "open('other.txt', 'w').write('o')").files_written == ("other.txt",)
    assert sandbox.read_file("notes.txt") == b"n"


@needs_bwrap
def test_private_files_store_and_host_secrets_are_invisible(sandbox, task):
    answers = task / "private" / "answers.csv"
    result = sandbox.execute(f"open({str(answers)!r}).read()")
    assert result.error.startswith("FileNotFoundError")
    assert sandbox.execute("open('/etc/shadow').read()").error.startswith("FileNotFoundError")
    # Nowhere in the sandbox's file tree is there an answers file, the repo's store, or the host's home.
    home = Path.home()
    allowed_home = {p.relative_to(home).parts[0] for p in isolation.runtime_roots() if home in p.parents}
    store = Path(__file__).resolve().parents[1] / "data"
    result = run_ok(
        sandbox,
        "import os\n"
        "found = []\n"
        "for top in [p for p in os.listdir('/') if p not in ('proc', 'sys', 'dev', 'usr')]:\n"
        "    for folder, dirs, files in os.walk('/' + top):\n"
        "        found += [os.path.join(folder, f) for f in files if f == 'answers.csv']\n"
        f"home = sorted(os.listdir({str(home)!r})) if os.path.isdir({str(home)!r}) else []\n"
        f"found, home, os.path.exists({str(store)!r}), os.path.exists('/home') and os.listdir('/home')",
    )
    found, home_entries, store_visible, home_dirs = eval(result.result)
    assert found == [] and not store_visible and not home_dirs
    assert set(home_entries) <= allowed_home


@needs_bwrap
def test_inputs_are_read_only(sandbox, task):
    before = (task / "public" / "train.csv").read_text()
    for code in (
        "open('/task/input/train.csv', 'a').write('tampered')",
        "open('/task/input/new.csv', 'w').write('x')",
        "import os; os.remove('/task/input/train.csv')",
    ):
        result = sandbox.execute(code)
        assert result.error is not None and result.error.split(":")[0] in ("PermissionError", "OSError"), code
    assert (task / "public" / "train.csv").read_text() == before
    assert sorted(os.listdir(task / "public")) == ["train.csv"]


@needs_bwrap
def test_no_network(sandbox):
    result = run_ok(
        sandbox,
        "import socket\n"
        "names = [name for _, name in socket.if_nameindex()]\n"
        "assert names == ['lo'], names  # own network namespace: never reach the host's network\n"
        "errors = []\n"
        "for address in [('127.0.0.1', 22), ('192.0.2.1', 80)]:\n"
        "    try:\n"
        "        socket.create_connection(address, timeout=2).close()\n"
        "        errors.append(None)\n"
        "    except OSError as exc:\n"
        "        errors.append(type(exc).__name__)\n"
        "errors",
    )
    assert result.result == "['ConnectionRefusedError', 'OSError']"
    assert result.seconds < 2  # refused at once, not timed out


@needs_bwrap
def test_fork_bomb_is_contained(sandbox):
    counted = run_ok(
        sandbox,
        "import os, time\n"
        "pids = []\n"
        "try:\n"
        "    while True:\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        pids.append(pid)\n"
        "except OSError as exc:\n"
        "    error = type(exc).__name__\n"
        "for pid in pids:\n"
        "    os.kill(pid, 9)\n"
        "    os.waitpid(pid, 0)\n"
        "len(pids), error",
    )
    forked, error = eval(counted.result)
    assert error == "BlockingIOError" and 0 < forked < CONFIG.max_processes
    result = sandbox.execute(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    )
    assert result.timed_out and result.status == "execution-limit" and result.restarted
    assert subprocess.run(["true"], check=False).returncode == 0  # the host still forks
    assert run_ok(sandbox, "1 + 1").result == "2"


@needs_bwrap
def test_memory_bomb_is_recorded(sandbox):
    result = sandbox.execute("block = bytearray(50 * 1024**3)")
    assert result.error.startswith("MemoryError") or result.killed
    assert run_ok(sandbox, "len(bytearray(10 * 1024**2))").result == str(10 * 1024**2)


@needs_bwrap
def test_endless_loop_hits_the_execution_limit(sandbox):
    run_ok(sandbox, "kept = 'state'")
    result = sandbox.execute("while True:\n    pass")
    assert result.timed_out and result.status == "execution-limit" and not result.restarted
    assert result.error.startswith("ExecutionLimit") and "KeyboardInterrupt" in result.traceback
    assert SECONDS <= result.seconds < SECONDS + 3
    assert run_ok(sandbox, "kept").result == "'state'"
    # Code that swallows the interrupt: the kernel is replaced.
    result = sandbox.execute(
        "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    while True:\n        pass"
    )
    assert result.timed_out and result.restarted
    assert run_ok(sandbox, "1 + 2").result == "3"


@needs_bwrap
def test_killing_the_parent_or_everything_leaves_the_host_alone(sandbox):
    result = sandbox.execute("import os\nos.kill(os.getppid(), 9)\n'alive'")
    assert result.error is None or result.error.startswith("PermissionError")
    result = sandbox.execute("import subprocess\nsubprocess.run('kill -9 -1', shell=True)\n'alive'")
    assert result.killed or result.error is None  # the kernel itself may be among the victims
    result = sandbox.execute("import os\nos.kill(os.getpid(), 9)")
    assert result.killed and result.restarted and result.status == "killed"
    assert result.error.startswith("KernelDied")
    os.kill(os.getpid(), 0)  # this process is alive, and so is the host's init
    os.kill(1, 0)
    assert run_ok(sandbox, "2 * 21").result == "42"


@needs_bwrap
def test_output_is_truncated_and_traceback_cut(sandbox):
    result = run_ok(sandbox, "print('x' * 10_000)\nprint('after')")
    assert result.truncated and "output truncated" in result.stdout
    assert result.stdout.count("x") == CONFIG.max_output_bytes
    result = sandbox.execute("def deep(n):\n    return deep(n + 1) if n < 50 else 1 / 0\ndeep(0)")
    assert result.error == "ZeroDivisionError: division by zero"
    assert len(result.traceback) <= CONFIG.max_traceback_chars
    assert "\x1b" not in result.traceback and result.traceback.rstrip().endswith("division by zero")
    assert "characters cut" in result.traceback


@needs_bwrap
def test_read_file_refuses_links_out_of_the_workspace(sandbox):
    run_ok(sandbox, "import os\nos.symlink('/etc/passwd', 'link.csv')\nos.mkfifo('pipe.csv')")
    for name in ("link.csv", "pipe.csv", "../x", "/etc/passwd"):
        with pytest.raises(SandboxError):
            sandbox.read_file(name)


@needs_bwrap
def test_pool_hands_out_started_kernels(task, tmp_path):
    with KernelPool(CONFIG, 1, seconds_per_execution=SECONDS, root=tmp_path / "pool") as pool:
        assert pool.wait_ready(60)
        started = time.perf_counter()
        box = pool.acquire(task / "public", tmp_path / "ws")
        assert time.perf_counter() - started < 0.5 and pool.hits == 1
        try:
            result = run_ok(
                box, "import os\nopen('out.txt', 'w').write('o')\nsorted(os.listdir('/task/input'))"
            )
            assert result.result == "['train.csv']" and result.files_written == ("out.txt",)
            # The pool imported the preload while the kernel waited.
            assert run_ok(box, "import sys\n'pandas' in sys.modules").result == "True"
            assert (tmp_path / "ws" / "out.txt").read_text() == "o"
            assert box.execute("open('/task/input/train.csv', 'a').write('x')").error is not None
        finally:
            box.close()
    assert (task / "public" / "train.csv").read_text().startswith("id,x,y")


def test_missing_isolation_is_an_error_unless_allowed(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(
        isolation, "probe", lambda: isolation.Isolation(False, None, "bwrap is not installed")
    )
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        Sandbox(tmp_path, tmp_path / "ws", SandboxConfig(), SECONDS)
    box = Sandbox(tmp_path, tmp_path / "ws", SandboxConfig(allow_unsandboxed=True), SECONDS)
    assert not box.isolated and box.input_path == str(tmp_path)
    assert "WITHOUT isolation" in caplog.text


def test_output_budget_and_traceback_helpers():
    budget = OutputBudget(10)
    budget.add("stdout", "12345")
    budget.add("stderr", "abcdefgh")
    assert budget.text("stdout") == "12345" and budget.text("stderr").startswith("abcde\n[output truncated")
    text = "\x1b[31mred\x1b[0m " + "y" * 500
    assert strip_ansi(text).startswith("red y")
    cut = cut_traceback(text, 100)
    assert len(cut) == 100 and cut.endswith("y" * 50) and cut.startswith("[...")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
