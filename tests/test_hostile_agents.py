"""Agent code that attacks the engine around the sandbox, not its walls: each attempt ends its own execution (or
episode) with a true reason, and the host, the run and every other episode go on as if it were not there.

The rows of issue 25 (S1-S7), on both kinds of kernel (forked from the warm server, fresh interpreter). No
verdict depends on the machine's speed: limits are far above what benign code needs, and SHORT is used only
where the code never ends by itself.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dareforge import scratch
from dareforge.agents.loop import write_submitted
from dareforge.config import SandboxConfig
from dareforge.sandbox import KernelPool, Sandbox, cgroups, disk, host_folders, probe, processes
from dareforge.sandbox.connection import KernelConnection, execution_limit, host_memory_bound, message_limit
from dareforge.sandbox.host_folders import bounds_workspaces

SECONDS = 300.0
SHORT = 1.0
CONFIG = SandboxConfig(memory_mb=1024, max_processes=32, max_output_bytes=2000, workspace_mb=64)

pytestmark = pytest.mark.skipif(not probe().available, reason=f"no sandbox here: {probe().reason}")
needs_cgroups = pytest.mark.skipif(
    cgroups.support().version is None, reason=f"no control groups here: {cgroups.support().reason}"
)
needs_mounts = pytest.mark.skipif(
    not bounds_workspaces(CONFIG), reason=f"workspaces cannot be bounded here: {disk.available()}"
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("inputs")
    (folder / "train.csv").write_text("x,y\n1,2\n")
    (folder / "train.csv").chmod(0o644)
    return folder


@pytest.fixture(params=[True, False], ids=["forked", "fresh-interpreter"])
def sandbox(request, inputs, tmp_path):
    box = Sandbox(
        inputs, tmp_path / "work", CONFIG.model_copy(update={"fork_kernels": request.param}), SECONDS
    )
    with box:
        yield box


def still_works(box: Sandbox) -> None:
    after = box.execute("print(6 * 7)")
    assert after.ok and after.stdout.strip() == "42", after


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


BAD_SIGNATURE = (
    "k = get_ipython().kernel\n"
    "k.iopub_socket.send_multipart([b'x', b'<IDS|MSG>', b'bad', b'{}', b'{}', b'{}', b'{}'])\n"
    "print('sent')"
)
HUGE_MESSAGES = (
    "k = get_ipython().kernel\n"
    "for _ in range(50):\n"
    "    k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x' * 20_000_000},\n"
    "                   parent=k.get_parent())\n"
    "print('sent')"
)
MANY_MESSAGES = (
    "k = get_ipython().kernel\n"
    "for _ in range(2_000):\n"
    "    k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x' * 50_000},\n"
    "                   parent=k.get_parent())\n"
    "print('sent')"
)
FOREIGN_MESSAGES = (
    "k = get_ipython().kernel\n"
    "for _ in range(20_000):\n"
    "    k.session.send(k.iopub_socket, 'status', {'execution_state': 'idle'}, parent={'msg_id': 'other'})\n"
    "print('sent')"
)
MALFORMED_CONTENT = (  # signed with the kernel's own key, so only its content is wrong
    "import json\n"
    "k = get_ipython().kernel\n"
    "header = k.session.msg_header('stream')\n"
    "parts = [json.dumps(p, default=str).encode() for p in (header, k.get_parent()['header'], {}, ['no', 'dict'])]\n"
    "k.iopub_socket.send_multipart([b'stream', b'<IDS|MSG>', k.session.sign(parts), *parts])\n"
    "print('sent')"
)


# -- S1, S4: what the kernel sends ------------------------------------------------------------------------------


def test_s1_a_message_with_a_bad_signature_ends_the_execution_not_the_host(sandbox):
    result = sandbox.execute(BAD_SIGNATURE)
    assert result.killed and result.restarted and result.status == "killed"
    assert result.error.startswith("KernelProtocolError: the kernel sent a message the host cannot read")
    assert "Invalid Signature" in result.error
    still_works(sandbox)


def test_malformed_content_from_a_signed_message_ends_the_execution(sandbox):
    result = sandbox.execute(MALFORMED_CONTENT)
    assert result.killed and result.error.startswith("KernelProtocolError"), result
    still_works(sandbox)


@pytest.mark.parametrize(
    "code", [HUGE_MESSAGES, MANY_MESSAGES, FOREIGN_MESSAGES], ids=["huge", "many", "foreign"]
)
def test_s4_floods_through_the_kernel_socket_cost_the_host_no_memory(sandbox, code):
    sandbox.execute("1")
    before = rss_mb()
    reset_peak_rss()
    result = sandbox.execute(code)
    grown = peak_rss_mb() - before
    assert result.killed and result.restarted and result.error.startswith("KernelProtocolError"), result
    assert grown <= 100, f"the host grew {grown:.0f} MB"
    assert len(result.stdout.encode()) <= 2 * CONFIG.max_output_bytes
    still_works(sandbox)


FRAME = 1_000_000
"""Under `message_limit(CONFIG)`: each frame alone passes the old per-frame limit."""
MULTIPART_FLOOD = (  # issue 42: frames each under the limit, hundreds to a message, another request's parent
    "k = get_ipython().kernel\n"
    "for _ in range(3):\n"
    "    k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x'}, parent={'msg_id': 'other'},\n"
    f"                   buffers=[memoryview(b'x' * {FRAME})] * 100)\n"
    "print('sent')"
)
MESSAGES_PAST_THE_EXECUTION_BUDGET = (  # each message under the limit, together far past the execution's
    "k = get_ipython().kernel\n"
    "for _ in range(150):\n"
    "    k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x'}, parent=k.get_parent(),\n"
    f"                   buffers=[memoryview(b'x' * {FRAME})])\n"
    "print('sent')"
)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (
            MULTIPART_FLOOD,
            f"a message of more than {message_limit(CONFIG)} bytes (all its frames and buffers",
        ),
        (MESSAGES_PAST_THE_EXECUTION_BUDGET, f"more than {execution_limit(CONFIG)} bytes of messages in one"),
    ],
    ids=["one-message", "one-execution"],
)
def test_a_message_or_an_execution_past_its_budget_ends_the_execution_within_the_host_bound(
    sandbox, code, reason
):
    assert message_limit(CONFIG) > FRAME and execution_limit(CONFIG) < 150 * FRAME
    sandbox.execute("1")
    before = rss_mb()
    reset_peak_rss()
    result = sandbox.execute(code)
    grown = peak_rss_mb() - before
    assert result.killed and result.restarted, result
    assert result.error.startswith(f"KernelProtocolError: the kernel sent {reason}"), result.error
    assert grown <= host_memory_bound(CONFIG) / 2**20, f"the host grew {grown:.1f} MB"
    still_works(sandbox)


BENIGN_MANY_MESSAGES = (
    "import sys\n"
    "for i in range(3_000):\n"
    "    print(i, flush=True)\n"
    "    sys.stderr.write('e'); sys.stderr.flush()\n"
    "'r' * 100"
)


def test_benign_output_in_many_messages_stays_within_the_budgets(sandbox):
    result = sandbox.execute(BENIGN_MANY_MESSAGES)
    assert result.ok and not result.killed, result
    assert result.stdout.startswith("0\n1\n2\n") and result.truncated
    big = sandbox.execute("print('y' * 1_900)")
    assert big.ok and big.stdout == "y" * 1_900 + "\n" and not big.truncated, big


def test_output_sent_while_the_host_reads_nothing_still_ends_the_execution(sandbox, monkeypatch):
    # A busy machine can deschedule the host while the code prints: here the host reads nothing until the code
    # has sent all 6,000 of its messages. A publisher that drops past 1,000 queued messages lost the `idle`
    # status among them, and the host then waited out the execution's whole limit.
    done = sandbox.workspace / "sent"
    original = KernelConnection._poll

    def reading_only_once_all_is_sent(self, seconds):
        for _ in range(6_000):  # at most 10 minutes: a kernel that never gets there fails the assertions
            if done.exists():
                break
            time.sleep(0.1)
        return original(self, seconds)

    monkeypatch.setattr(KernelConnection, "_poll", reading_only_once_all_is_sent)
    result = sandbox.execute(BENIGN_MANY_MESSAGES + "\nopen('sent', 'w').close()")
    assert result.ok and not result.killed, result
    assert result.stdout.startswith("0\n1\n2\n") and result.truncated
    assert "dropped" in result.stderr and result.stderr.rstrip().endswith("e" * 20), result.stderr[-400:]


def test_the_message_limit_leaves_room_for_a_full_output_escaped():
    assert message_limit(CONFIG) > 6 * CONFIG.max_output_bytes


# -- S3, S6: processes ------------------------------------------------------------------------------------------

FOUR_CHILDREN = (
    "import subprocess, sys\n"
    'child = \'b = bytearray(400 * 2**20); b[::4096] = bytes(len(b[::4096])); print("full", flush=True); '
    "import time; time.sleep(600)'\n"
    "procs = [subprocess.Popen([sys.executable, '-c', child], stdout=subprocess.PIPE) for _ in range(4)]\n"
    "full = [p.stdout.readline().strip() == b'full' for p in procs]  # EOF for a child the OOM killer ended\n"
    "for p in procs:\n"
    "    p.kill()\n"
    "    p.wait()\n"
    "print(sum(full))"
)


@needs_cgroups
def test_s3_a_sandboxs_processes_together_stay_under_memory_mb(sandbox):
    group = sandbox._group
    assert group is not None
    result = sandbox.execute(FOUR_CHILDREN)
    assert result.ok, result
    # 4 x 400 MB do not fit in 1024 MB (RLIMIT_AS lets each one through): the group's OOM killer ended some.
    # How many printed "full" says nothing: the killer may pick a child that had already filled (the largest),
    # so all four can have printed before one of them died.
    assert group.oom_kills() >= 1, result
    folder = group.folders.get("memory", group.folders.get(""))
    peak_file = folder / ("memory.max_usage_in_bytes" if group.version == "v1" else "memory.peak")
    if peak_file.exists():
        assert int(peak_file.read_text()) <= CONFIG.memory_mb * 2**20
    still_works(sandbox)


def test_s6_a_background_process_is_paused_between_executions(sandbox):
    started = sandbox.execute(
        "import subprocess, sys\nbusy = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\nprint(busy.pid)"
    )
    assert started.ok and "1 background process paused until the next execution" in started.stderr
    (stray,) = sandbox._strays()
    assert processes.state(stray) in ("T", "t")  # stopped: no CPU while the agent thinks
    # and it is resumed for the next execution (a worker pool must find its workers)
    resumed = sandbox.execute("import os\nprint(os.popen(f'ps -o stat= -p {busy.pid}').read().strip())")
    assert resumed.stdout.strip().startswith("R"), resumed


def test_s6_a_worker_pool_survives_the_pause(sandbox):
    code = (
        "from joblib import Parallel, delayed\n"
        "print(Parallel(n_jobs=2, backend='loky')(delayed(abs)(-i) for i in range(4)))"
    )
    for _ in range(2):
        result = sandbox.execute(code)
        assert result.ok and result.stdout.startswith("[0, 1, 2, 3]"), result


# -- S7 and death reasons ---------------------------------------------------------------------------------------


def test_s7_ptrace_is_refused_and_a_stopped_kernel_is_named(sandbox):
    refused = sandbox.execute(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())"
    )
    assert refused.stdout.split() == ["-1", "1"], refused  # EPERM
    # The kernel may stop before its IOPub thread says it began: both clocks are short (it never ends itself).
    sandbox.seconds_per_execution = sandbox.begin_timeout_s = SHORT
    try:
        stopped = sandbox.execute("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)")
    finally:
        sandbox.seconds_per_execution = sandbox.begin_timeout_s = SECONDS
    assert stopped.timed_out and stopped.restarted
    assert "the kernel was stopped by a signal" in stopped.error, stopped
    still_works(sandbox)


def test_an_exit_status_over_128_is_not_read_as_a_signal(sandbox):
    result = sandbox.execute("import os\nos._exit(255)")
    assert result.killed and "exited with status 255" in result.error, result
    still_works(sandbox)


# -- S5, S2: disk and paths -------------------------------------------------------------------------------------


@needs_mounts
def test_s5_workspace_writes_stop_at_workspace_mb_and_the_files_stay(sandbox):
    result = sandbox.execute(
        "open('predictions.csv', 'w').write('id,y\\n1,2\\n')\n"
        "written = 0\n"
        "try:\n"
        "    with open('big', 'wb') as f:\n"
        "        for _ in range(1000):\n"
        "            f.write(b'x' * 2**20)\n"
        "            written += 1\n"
        "except OSError as exc:\n"
        "    print(written, exc.errno)\n"
        "import os; os.mkfifo('fifo'); os.symlink('/etc/passwd', 'link')"
    )
    written, errno = result.stdout.split()
    assert int(written) <= CONFIG.workspace_mb and errno == "28", result  # ENOSPC
    workspace = sandbox.workspace
    sandbox.close()
    assert not os.path.ismount(workspace)
    assert (workspace / "predictions.csv").read_text() == "id,y\n1,2\n"
    assert (workspace / "big").stat().st_size <= CONFIG.workspace_mb * 2**20
    assert os.readlink(workspace / "link") == "/etc/passwd"  # kept as a link, never followed
    assert not (workspace / "fifo").exists()


def test_s5_the_ipc_folder_takes_no_writes(sandbox):
    result = sandbox.execute(
        "import os, sys\n"
        "folder = os.path.dirname(sys.argv[sys.argv.index('-f') + 1])\n"
        "for name in ('junk', 'kernel.json'):\n"
        "    try:\n"
        "        open(os.path.join(folder, name), 'ab').write(b'x' * 1000)\n"
        "        print('wrote', name)\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)"
    )
    assert result.stdout.split() == ["refused", "13", "refused", "13"], result


def test_s2_a_fifo_planted_as_the_answer_file_is_replaced_not_opened(tmp_path):
    target = tmp_path / "answer.json"
    os.mkfifo(target)
    write_submitted(target, '"42"')  # a blocking open would hang here forever
    assert target.is_file() and target.read_text() == '{"answer": "42"}'
    folder = tmp_path / "planted"
    folder.mkdir()
    write_submitted(folder, '"1"')  # a folder stays; the grader then says it is no file
    assert folder.is_dir() and not list(tmp_path.glob(".answer-*"))


@needs_cgroups
def test_a_closed_sandbox_leaves_no_control_group_or_mount(inputs, tmp_path):
    box = Sandbox(inputs, tmp_path / "work", CONFIG, SECONDS).start()
    folders = list(box._group.folders.values())
    box.execute("import subprocess\nsubprocess.Popen(['sleep', '600'])")
    box.close()
    assert not any(folder.exists() for folder in folders)
    assert not os.path.ismount(tmp_path / "work")


def test_a_killed_runs_control_groups_are_removed_by_the_next(tmp_path):
    if cgroups.support().version is None:
        pytest.skip(cgroups.support().reason)
    dead = int(os.popen("sh -c 'echo $$'").read())
    while Path(f"/proc/{dead}").exists():
        time.sleep(0.01)
    leftovers = [base / f"{dead}-0" for base in cgroups._bases(cgroups.support().version).values()]
    for folder in leftovers:
        folder.mkdir()
    cgroups.support.cache_clear()
    try:
        cgroups.support()
        assert not any(folder.exists() for folder in leftovers)
    finally:
        for folder in leftovers:
            with contextlib.suppress(OSError):
                folder.rmdir()


def test_without_control_groups_or_mounts_the_limits_bind_each_process(inputs, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(cgroups, "support", lambda: cgroups.Support(None, "no controllers in this test"))
    monkeypatch.setattr(disk, "available", lambda: "no mounts in this test")
    cgroups._warn_once.cache_clear()
    host_folders._warn_unbounded.cache_clear()
    with caplog.at_level("WARNING"), Sandbox(inputs, tmp_path / "work", CONFIG, SECONDS) as box:
        assert box._group is None and not os.path.ismount(box.workspace)
        alone = box.execute(
            f"b = bytearray({CONFIG.memory_mb} * 2**20)"
        )  # RLIMIT_AS still bounds one process
        assert alone.error is not None and alone.error.startswith("MemoryError"), alone
        still_works(box)
    assert "no control group for sandboxes (no controllers in this test)" in caplog.text
    assert "sandbox.workspace_mb is not enforced" in caplog.text


@needs_mounts
def test_a_killed_runs_sandbox_leaves_no_mount_or_folder_behind(inputs, tmp_path):
    """kill -9 of the host process: its sandboxes die with it (bubblewrap's --die-with-parent), and the next
    sweep of scratch folders detaches the workspace tmpfs it left mounted and removes the folder."""
    script = (
        "import sys, time\n"
        "from dareforge.config import SandboxConfig\n"
        "from dareforge.sandbox import Sandbox\n"
        "from dareforge.scratch import temp_root\n"
        "box = Sandbox(sys.argv[1], temp_root() / 'work', SandboxConfig(), 60).start()\n"
        "print(box.workspace, flush=True)\n"
        "time.sleep(600)\n"
    )
    host = subprocess.Popen([sys.executable, "-c", script, str(inputs)], stdout=subprocess.PIPE, text=True)
    try:
        workspace = Path(host.stdout.readline().strip())
        assert os.path.ismount(workspace)
    finally:
        host.kill()
        host.wait()
    scratch.remove_dead(tmp_path / "work-dir")
    assert not os.path.ismount(workspace) and not workspace.parent.exists()


@needs_mounts
def test_a_pooled_kernel_takes_only_an_empty_workspace(inputs, tmp_path):
    """A file written in the caller's workspace before the hand-out would be hidden under the pool's tmpfs: the
    hand-over refuses, and the pool starts that episode's kernel cold, which keeps what was there."""
    with KernelPool(CONFIG, 1, demand=1, root=tmp_path / "pool") as pool:
        workspace = tmp_path / "work"
        workspace.mkdir()
        (workspace / "answer.json").write_text('{"answer": 1}')
        box = pool.acquire(inputs, workspace)
        try:
            assert pool.misses == 1 and (workspace / "answer.json").read_text() == '{"answer": 1}'
        finally:
            box.close()
    assert (workspace / "answer.json").read_text() == '{"answer": 1}' and not os.path.ismount(workspace)
