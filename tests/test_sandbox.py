"""The agent sandbox: what code inside can see and do, and what the host gets back.

Needs bubblewrap (`make sysdeps` installs it); without it the isolation tests are skipped, loudly. The escape
attempts never leave the machine: the network test first checks that the only interface is a loopback of the
sandbox's own network namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dareforge.config import SandboxConfig
from dareforge.sandbox import (
    INPUT_DIR,
    WORK_DIR,
    KernelPool,
    Sandbox,
    SandboxError,
    SandboxUnavailableError,
    isolation,
    probe,
    processes,
)
from dareforge.sandbox.execution import OutputBudget, cut_end, cut_traceback, strip_ansi
from dareforge.sandbox.kernel_boot import OutputCap
from dareforge.sandbox.kernel_forks import KernelForkServer
from dareforge.sandbox.kernel_launch import KERNEL_BOOT

# No verdict here may depend on the machine's speed (CI is a busy 2-core machine): every limit is far above what
# the code needs, except SHORT, used only where the code never ends by itself and so cannot finish first.
SECONDS = 300.0
GRACE = 60.0
START = 300.0
SHORT = 1.0
CONFIG = SandboxConfig(memory_mb=2048, max_processes=32, max_output_bytes=2000, max_traceback_chars=400)
IPYKERNEL_ENV = {"CLICOLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "GIT_PAGER", "PAGER", "TERM", "PWD"}
"""Variables ipykernel (and bubblewrap: PWD) set in a kernel besides the sandbox's own environment."""
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


@pytest.fixture(scope="module", params=[True, False], ids=["forked", "fresh-interpreter"])
def sandbox(request, task, tmp_path_factory):
    """Every test of what the code can see and do runs on both kinds of kernel: forked from the warm fork
    server into the sandbox, and started by bubblewrap with a fresh interpreter."""
    workspace = tmp_path_factory.mktemp("workspace")
    config = CONFIG.model_copy(update={"fork_kernels": request.param})
    with Sandbox(
        task / "public", workspace, config, SECONDS, interrupt_grace_s=GRACE, start_timeout_s=START
    ) as box:
        assert box.forks == (request.param and box.isolated and os.geteuid() == 0)
        yield box


def run_ok(box: Sandbox, code: str):
    result = box.execute(code)
    assert result.error is None, (result.error, result.traceback, result.stderr)
    return result


@contextlib.contextmanager
def limits(box: Sandbox, *, seconds: float = SECONDS, grace: float = GRACE, begin: float = START):
    saved = box.seconds_per_execution, box.interrupt_grace_s, box.begin_timeout_s
    box.seconds_per_execution, box.interrupt_grace_s, box.begin_timeout_s = seconds, grace, begin
    try:
        yield box
    finally:
        box.seconds_per_execution, box.interrupt_grace_s, box.begin_timeout_s = saved


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def reset_peak_rss() -> None:
    """Start a new peak (Linux: "5" to clear_refs), so a test measures its own peak, not an earlier test's."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


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
    """What the sandbox shows of the host is its mount table: check it, check the few places a secret could be,
    and walk what is left (not the read-only binds of system and Python files: bounded, no clock to race)."""
    repo = Path(__file__).resolve().parents[1]
    runtime = [str(root) for root in isolation.runtime_roots()]
    secret_files = [task / "private" / "answers.csv", Path("/etc/shadow")]
    secret_dirs = [task / "private", repo / "data", repo, Path.home(), Path("/root"), Path("/home")]
    # The Python runtime is bound whole and skipped by the walk below: no secret may be inside it.
    assert not [(s, r) for s in secret_files + secret_dirs for r in runtime if s.is_relative_to(r)]
    run_ok(
        sandbox,
        "import os\n"
        "mounts = []\n"
        "for line in open('/proc/self/mountinfo'):\n"
        "    fields, fstype = line.split(' - ')[0].split(), line.split(' - ')[1].split()[0]\n"
        "    mounts.append((fields[4], fstype, fields[5].split(',')[0]))\n"
        "def listing(path):\n"
        "    try:\n"
        "        return sorted(os.listdir(path))\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        f"dirs = {{p: listing(p) for p in {[str(p) for p in secret_dirs]!r}}}\n"
        f"files = {{p: os.path.exists(p) for p in {[str(p) for p in secret_files]!r}}}\n"
        "skip = {point for point, fstype, opts in mounts if opts == 'ro' and point != '/task/input'} | {'/proc'}\n"
        "walked, found = 0, []\n"
        "for folder, subdirs, names in os.walk('/'):\n"
        "    subdirs[:] = [d for d in subdirs if os.path.join(folder, d) not in skip]\n"
        "    walked += len(subdirs) + len(names)\n"
        "    found += [os.path.join(folder, n) for n in names]\n"
        "    if walked > 20_000:\n"
        "        raise RuntimeError('more than 20,000 entries outside the read-only binds: something is exposed')\n"
        "import json\n"
        "json.dump([mounts, dirs, files, found], open('isolation.json', 'w'))",  # more than the output limit
    )
    mounts, dirs, files, found = json.loads(sandbox.read_file("isolation.json"))
    host_fs = {
        p: (fstype, opts)
        for p, fstype, opts in mounts
        if fstype not in ("tmpfs", "proc", "devpts", "devtmpfs")
    }
    etc = {f"/etc/{name}" for name in (*isolation.ETC_FILES, *isolation.etc_files(0))}
    read_only = {"/usr", *etc, *runtime, INPUT_DIR} | {
        f"/{n}" for n in ("bin", "sbin", "lib", "lib64", "lib32", "libx32")
    }
    writable = {WORK_DIR} | {p for p in host_fs if p.startswith(f"{sandbox._runtime}/ipc")}
    # Host folders seen inside: system and Python files read-only, the task's inputs, the workspace, the sockets.
    assert {p for p, (_, opts) in host_fs.items() if opts == "ro"} <= read_only
    assert {p for p, (_, opts) in host_fs.items() if opts != "ro"} <= writable
    assert not any(files.values()), files
    for folder, entries in dirs.items():
        # Absent, or only the empty parents bubblewrap made for a bind further down (the venv in the repo...).
        on_the_way = {Path(p).relative_to(folder).parts[0] for p in host_fs if Path(p).is_relative_to(folder)}
        assert entries == "FileNotFoundError" or set(entries) <= on_the_way, (folder, entries)
    assert f"{INPUT_DIR}/train.csv" in found  # the walk saw the task's files
    assert not [path for path in found if path.endswith("answers.csv")]


@needs_bwrap
def test_the_kernel_runs_unprivileged_confined_and_alone(sandbox):
    """What bubblewrap and the launcher set up, a forked kernel must have too: the sandbox's uid, no
    capabilities, no new privileges, the seccomp filter (no user namespaces), the sandbox's hostname and
    namespaces, the lower CPU priority, only the kernel's environment, and no descriptor of the host's."""
    if not sandbox.forks and os.geteuid() != 0:
        pytest.skip("as a non-root user bubblewrap maps the host's uid; the uid checks below are root's")
    (
        run_ok(
            sandbox,
            "import ctypes, json, os, socket\n"
            "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
            "status = {k: v.split() for k, v in status.items()}\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "refused = libc.unshare(0x10000000) != 0 and ctypes.get_errno()\n"
            "def link(fd):\n"
            "    try:\n"
            "        return os.readlink(f'/proc/self/fd/{fd}')\n"
            "    except OSError:\n"
            "        return None  # the descriptor of the listing itself, closed by now\n"
            "fds = {fd: link(fd) for fd in os.listdir('/proc/self/fd')}\n"
            "own = [len(open(f'/proc/self/{name}').read()) > 0 for name in ('io', 'environ')]\n"
            "nice = os.getpriority(os.PRIO_PROCESS, 0)\n"
            "group = open('/proc/self/autogroup').read() if os.path.exists('/proc/self/autogroup') else None\n"
            "json.dump({'status': status, 'unshare_errno': refused, 'host': socket.gethostname(), 'own': own,\n"
            "    'nice': nice, 'autogroup': group,\n"
            "    'env': sorted(os.environ), 'ns': {n: os.readlink(f'/proc/self/ns/{n}') for n in\n"
            "    ('mnt', 'pid', 'net', 'ipc', 'uts')}, 'fds': fds}, open('facts.json', 'w'))",
        )
    )
    facts = json.loads(sandbox.read_file("facts.json"))
    status = facts["status"]
    assert status["Uid"] == [str(sandbox.uid)] * 4 and status["Gid"] == [str(sandbox.uid)] * 4
    assert status["Groups"] == []
    # (CapInh may keep bubblewrap's three: with an empty bounding set and no new privileges nothing can use them.)
    for caps in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[caps][0], 16) == 0, caps
    assert status["NoNewPrivs"] == ["1"] and status["Seccomp"] == ["2"]
    assert facts["unshare_errno"] == 1  # EPERM: the filter refuses new user namespaces
    assert facts["host"] == "sandbox"
    assert facts["nice"] == CONFIG.nice > 0  # agent code yields the CPU to the engine
    # ... and so does its session, which the scheduler weighs before any nice value (autogroups)
    assert facts["autogroup"] is None or facts["autogroup"].split()[-1] == str(CONFIG.nice)
    assert facts["own"] == [True, True]  # its own /proc files are its own (a dumpable process)
    for name, inside in facts["ns"].items():
        assert inside != os.readlink(f"/proc/self/ns/{name}"), name
    assert set(facts["env"]) - set(sandbox._env(isolation.HOME_DIR)) <= IPYKERNEL_ENV
    # Its descriptors: standard streams, pipes, sockets, /dev/null and its sockets' folder; no host file.
    paths = [t for t in facts["fds"].values() if t and t.startswith("/") and not t.startswith("/dev/")]
    assert all(t.startswith(f"{sandbox._runtime}/ipc") for t in paths), facts["fds"]


NICER_ENGINE = """
import os, sys
from dareforge.sandbox import confinement
os.nice(19)  # the engine was started under `nice -n 19`
os.setuid(65534)  # a sandbox's first process holds no capability to lower a nice value
confinement.limit({"nice": 10, "rlimits": []})
print(os.getpriority(os.PRIO_PROCESS, 0))
"""


def test_a_sandbox_under_a_nicer_engine_keeps_the_engines_nice():
    """A refresh run under `nice -n 19` stopped at its first sandbox: every kernel died at start with EPERM,
    setting nice 10 from 19 without the capability to."""
    done = subprocess.run([sys.executable, "-c", NICER_ENGINE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "19"


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
    # Refused at once, not timed out (that would be TimeoutError): there is no route out to wait on.
    assert result.result == "['ConnectionRefusedError', 'OSError']"


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
    # A bomb left forking in the background; the next execution that runs past its limit finds processes left
    # over and the whole sandbox is replaced. (Started by an earlier call, so no interrupt can come first.)
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    run_ok(sandbox, f"import subprocess, sys\nbomb = subprocess.Popen([sys.executable, '-c', {bomb!r}])")
    with limits(sandbox, seconds=SHORT):
        result = sandbox.execute("while True:\n    pass")
    assert result.timed_out and result.status == "execution-limit" and result.restarted
    assert subprocess.run(["true"], check=False).returncode == 0  # the host still forks
    alive = run_ok(sandbox, "import os\nsorted(p for p in os.listdir('/proc') if p.isdigit())").result
    # The sandbox's init, the placeholder a kernel is forked beside, the new kernel: nothing of the bomb is left.
    assert alive == ("['1', '2', '3']" if sandbox.forks else "['1', '2']")


@needs_bwrap
def test_memory_bomb_is_recorded(sandbox):
    result = sandbox.execute("block = bytearray(50 * 1024**3)")
    assert result.error.startswith("MemoryError") or result.killed
    assert run_ok(sandbox, "len(bytearray(10 * 1024**2))").result == str(10 * 1024**2)


@needs_bwrap
def test_endless_loop_hits_the_execution_limit(sandbox):
    run_ok(sandbox, "kept = 'state'")
    with limits(sandbox, seconds=SHORT):
        result = sandbox.execute("while True:\n    pass")
    assert result.timed_out and result.status == "execution-limit" and not result.restarted
    assert result.error.startswith("ExecutionLimit") and result.error.endswith("and was interrupted")
    assert result.seconds >= SHORT
    assert run_ok(sandbox, "kept").result == "'state'"
    # A kernel that ignores the interrupt is replaced. (ipykernel's handler is swapped by an earlier call, so the
    # interrupt is ignored whenever it comes.)
    run_ok(
        sandbox,
        "import signal, ipykernel.kernelbase\nipykernel.kernelbase.default_int_handler = signal.SIG_IGN",
    )
    with limits(sandbox, seconds=SHORT, grace=SHORT):
        result = sandbox.execute("while True:\n    pass")
    assert result.timed_out and result.restarted and "did not stop when interrupted" in result.error
    assert run_ok(sandbox, "1 + 2").result == "3"


@needs_bwrap
def test_the_limit_starts_when_the_kernel_begins_the_code(sandbox):
    """A kernel that gets no CPU for a while (a busy machine; here it is stopped) before it picks up a request:
    between requests ipykernel ignores SIGINT, so an interrupt sent then would be lost and the kernel replaced.
    The limit counts from when the code begins, so the interrupt reaches it and the state stays."""
    run_ok(sandbox, "kept = 'state'")
    pid = sandbox._kernel_pid
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(3 * SHORT, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        with limits(sandbox, seconds=SHORT):
            result = sandbox.execute("while True:\n    pass")
    finally:
        resume.join()
    assert result.timed_out and not result.restarted, result.error
    assert run_ok(sandbox, "kept").result == "'state'"
    # One that never begins (stopped for good) is replaced.
    os.kill(sandbox._kernel_pid, signal.SIGSTOP)
    with limits(sandbox, seconds=SHORT, begin=SHORT):
        result = sandbox.execute("1")
    assert (
        result.timed_out
        and result.restarted
        and "before it told the host it had begun the code" in result.error
    )
    assert run_ok(sandbox, "2 + 2").result == "4"


@needs_bwrap
def test_killing_the_parent_or_everything_leaves_the_host_alone(sandbox):
    result = sandbox.execute("import os\nos.kill(os.getppid(), 9)\n'alive'")
    if sandbox.forks:
        # A forked kernel's parent (the fork server) is outside its PID namespace: getppid() is 0, and
        # kill(0, ...) signals the kernel's own process group.
        assert result.killed and result.restarted
    else:
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
    head, note, tail = result.stdout.split("\n", 2)
    assert result.truncated and head == "x" * CONFIG.max_output_bytes
    # 8,000 x's, a newline, "after" and a newline were dropped; the note says so, then the end follows.
    assert note.startswith("[output truncated: 8007 bytes of stdout past the 2000-byte limit")
    assert "sandbox.max_output_bytes" in note and "its last 200 bytes follow" in note
    assert tail == "x" * 193 + "\nafter\n"
    result = sandbox.execute("def deep(n):\n    return deep(n + 1) if n < 50 else 1 / 0\ndeep(0)")
    assert result.error == "ZeroDivisionError: division by zero"
    assert len(result.traceback) <= CONFIG.max_traceback_chars
    assert "\x1b" not in result.traceback and result.traceback.rstrip().endswith("division by zero")
    assert "characters cut" in result.traceback


@needs_bwrap
def test_printing_hundreds_of_megabytes_costs_the_host_no_memory(sandbox):
    """Capped where the kernel writes: printed, written to fd 1 by a subprocess, the cell's result or an
    exception's message, hundreds of MB never reach the host, and the agent is told how much was cut. Bounded in
    bytes, under a generous time limit."""
    megabytes, limit = 300, CONFIG.max_output_bytes
    cases = {
        "print": f"chunk = 'x' * 1_000_000\nfor _ in range({megabytes}):\n    print(chunk)",
        "subprocess": f"import os\nos.system('head -c {megabytes}000000 /dev/zero | tr \"\\\\0\" y')",
        "result": f"'z' * {megabytes}_000_000",
        "exception": "raise ValueError('e' * 100_000_000)",
    }
    seen = {}
    for name, code in cases.items():
        reset_peak_rss()
        before = peak_rss_mb()
        result = sandbox.execute(code)
        growth = peak_rss_mb() - before
        assert growth < 100, f"{name}: the host's peak memory grew by {growth:.0f} MB"
        seen[name] = result
    for name in ("print", "subprocess", "result"):
        text = seen[name].result if name == "result" else seen[name].stdout
        assert seen[name].error is None and seen[name].truncated, name
        assert "sandbox.max_output_bytes" in text and len(text) < 2 * limit, name
    assert (
        f"{megabytes * 1_000_001 - limit} bytes of stdout past the {limit}-byte limit" in seen["print"].stdout
    )
    # The result's repr adds two quotes.
    assert f"{megabytes * 1_000_000 + 2 - limit} bytes of result past" in seen["result"].result
    error = seen["exception"].error
    assert error.startswith("ValueError: eee") and error.endswith(" characters cut]")
    assert len(error) <= len("ValueError: ") + CONFIG.max_traceback_chars
    assert len(seen["exception"].traceback) <= CONFIG.max_traceback_chars


@needs_bwrap
def test_output_written_to_file_descriptors_reaches_the_agent_capped(sandbox):
    # A subprocess given sys.stdout writes to its file descriptor: captured and capped like print.
    result = run_ok(
        sandbox, "import subprocess, sys\nsubprocess.run('seq 1 100000', shell=True, stdout=sys.stdout)"
    )
    assert result.stdout.startswith("1\n2\n3\n") and result.stdout.endswith("99999\n100000\n")
    assert result.truncated and "bytes of stdout past the 2000-byte limit" in result.stdout
    # Code writing straight to the kernel's own output (its log) costs the host neither disk nor memory.
    reset_peak_rss()
    before = peak_rss_mb()
    run_ok(
        sandbox,
        "import os, sys\nblock = b'z' * 1_000_000\n"
        "for _ in range(100):\n    os.write(sys.stdout._original_stdstream_copy, block)",
    )
    assert peak_rss_mb() - before < 50
    on_disk = sum(f.stat().st_size for f in sandbox._runtime.rglob("*") if f.is_file())
    assert on_disk < 1_000_000


@needs_bwrap
def test_the_kernel_starts_without_its_debugger_yet_the_code_may_import_it(sandbox):
    # debugpy was a quarter of a kernel's start-up CPU for a front end's debugger that nothing here uses.
    code = "import sys\nsorted(m for m in sys.modules if m.split('.')[0] in ('debugpy', '_pydevd_bundle'))"
    assert run_ok(sandbox, code).result == "[]"
    assert run_ok(sandbox, "import debugpy\ndebugpy.__name__").result == "'debugpy'"


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="kernels are forked only where bubblewrap runs as root")
def test_a_forked_kernel_comes_from_the_warm_image_and_outlives_its_fork_server(task, tmp_path):
    """The fork server's kernels have the preload imported before any code ran (a fresh interpreter has
    not); killing the server leaves running kernels alone, their deaths are still seen, and the next kernel
    comes from a new server."""
    preloaded = "import sys\nall(name in sys.modules for name in ('numpy', 'pandas'))"
    # A preload that cannot be imported costs the kernels that module, not their start.
    broken = CONFIG.model_copy(update={"preload": ["numpy", "no_such_module_here"]})
    with Sandbox(task / "public", tmp_path / "broken", broken, SECONDS, start_timeout_s=START) as box:
        assert box.forks and run_ok(box, "import sys\n'numpy' in sys.modules").result == "True"
    fresh_config = CONFIG.model_copy(update={"fork_kernels": False})
    with Sandbox(task / "public", tmp_path / "fresh", fresh_config, SECONDS, start_timeout_s=START) as fresh:
        assert not fresh.forks and run_ok(fresh, preloaded).result == "False"
    draw = "import numpy, random\n(numpy.random.randint(1 << 30), random.randrange(1 << 30))"
    with Sandbox(task / "public", tmp_path / "w1", CONFIG, SECONDS, start_timeout_s=START) as first:
        assert first.forks and run_ok(first, preloaded).result == "True"
        first_draw = run_ok(first, draw).result
        server = KernelForkServer.shared(
            CONFIG.preload, first._env(isolation.HOME_DIR), KERNEL_BOOT, CONFIG.nice
        )
        server._proc.kill()
        server._proc.wait()
        assert run_ok(first, "6 * 7").result == "42"
        with Sandbox(task / "public", tmp_path / "w2", CONFIG, SECONDS, start_timeout_s=START) as second:
            assert run_ok(second, preloaded).result == "True"
            # Unseeded draws differ between kernels of one image, as between fresh interpreters.
            assert run_ok(second, draw).result != first_draw
            assert (
                KernelForkServer.shared(
                    CONFIG.preload, second._env(isolation.HOME_DIR), KERNEL_BOOT, CONFIG.nice
                )
                is not server
            )
        os.kill(first._kernel_pid, signal.SIGKILL)
        deadline = time.monotonic() + START
        while not processes.gone(first._kernel_pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        result = first.execute("1")
        assert result.restarted and result.error is None  # seen dead before the call, started afresh
        assert run_ok(first, "2 + 2").result == "4"


@needs_bwrap
def test_read_file_refuses_links_out_of_the_workspace(sandbox):
    run_ok(sandbox, "import os\nos.symlink('/etc/passwd', 'link.csv')\nos.mkfifo('pipe.csv')")
    for name in ("link.csv", "pipe.csv", "../x", "/etc/passwd"):
        with pytest.raises(SandboxError):
            sandbox.read_file(name)


@needs_bwrap
def test_pool_hands_out_started_kernels(task, tmp_path):
    pool = KernelPool(CONFIG, 1, seconds_per_execution=SECONDS, root=tmp_path / "pool", start_timeout_s=START)
    with pool:
        assert pool.wait_ready(2 * START)
        box = pool.acquire(task / "public", tmp_path / "ws")
        assert (pool.hits, pool.misses) == (1, 0)  # handed a started kernel; none was started for it
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


@needs_bwrap
def test_a_pool_told_its_demand_starts_no_kernel_nobody_takes(task, tmp_path):
    # Kept at 2 ready, 3 to be taken: 3 kernels start, not the 2 + 3 a pool of unknown demand would start.
    config = CONFIG.model_copy(update={"preload": []})
    pool = KernelPool(
        config, 2, seconds_per_execution=SECONDS, root=tmp_path / "pool", start_timeout_s=START, demand=3
    )
    with pool:
        for n in range(3):
            box = pool.acquire(task / "public", tmp_path / f"ws{n}")
            try:
                assert run_ok(box, "1 + 1").result == "2"
            finally:
                box.close()
        assert (pool.hits, pool.misses) == (3, 0)
        assert pool.wait_ready(1.0)  # nothing more is wanted: ready at once
    assert pool.started == 3


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
    assert cut_end("short", 10) == "short"
    cut = cut_end("z" * 1000, 100)
    kept = cut.count("z")
    assert len(cut) <= 100 and cut == "z" * kept + f" [... {1000 - kept} characters cut]"


def test_kernel_notices_of_dropped_output_make_the_note():
    budget = OutputBudget(1000)
    budget.add("stdout", "head\n")
    assert not budget.truncated
    budget.kernel_notice({"dropped": {"stdout": 5}, "tails": {"stdout": "a"}})
    budget.kernel_notice({"dropped": {"stdout": 12, "result": 3}, "tails": {"stdout": "end\n", "result": ""}})
    for malformed in (
        {"dropped": {"stdout": "9" * 99}},
        {"dropped": [1]},
        {"tails": {"stdout": "x" * 10_000}},
    ):
        budget.kernel_notice(malformed)  # a kernel is not trusted: ignored, or bounded
    assert budget.truncated
    assert budget.text("stdout") == (
        "head\n\n[output truncated: 12 bytes of stdout past the 1000-byte limit of this execution were dropped "
        "(setting sandbox.max_output_bytes); its last 4 bytes follow]\nend\n"
    )
    assert budget.text("result").endswith(
        "3 bytes of result past the 1000-byte limit of this execution were "
        "dropped (setting sandbox.max_output_bytes)]\n"
    )
    budget.kernel_notice({"dropped": {}, "tails": {"stdout": "t" * 10_000}})
    assert budget.text("stdout").endswith("its last 100 bytes follow]\n" + "t" * 100)


def test_output_cap_counts_per_execution_and_keeps_the_end():
    cap = OutputCap(limit=10, tail=4)
    drops: list[int] = []
    cap.on_drop = lambda: drops.append(1)
    first, second = {"msg_id": "a"}, {"msg_id": "b"}
    assert cap.admit(first, "stdout", "12345") == "12345"
    assert cap.admit(first, "stderr", "é" * 4) == "éé"  # 2-byte characters: whole ones only, 9 of 10 bytes
    assert (
        cap.admit(first, "stdout", "x") == ""
    )  # closed after the first drop: nothing slips in before the note
    assert cap.admit(first, "stdout", b"raw bytes") == b""
    assert cap.admit(second, "stdout", "0123456789") == "0123456789"  # a new execution, a new budget
    assert drops == [1]  # one notice pending, however many drops
    [(parent, notice)] = cap.notices()
    assert parent is first and notice["limit"] == 10
    assert notice["dropped"] == {"stderr": 4, "stdout": 10}
    assert notice["tails"] == {"stderr": "éé", "stdout": "ytes"}
    assert cap.notices() == []
    assert cap.admit(second, "result", "!") == ""
    assert [n["dropped"] for _, n in cap.notices()] == [{"result": 1}] and drops == [1, 1]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
