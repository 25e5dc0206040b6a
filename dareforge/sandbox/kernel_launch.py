"""The steps of starting one kernel that need no running sandbox, each given what it works on: the connection
file the kernel binds its sockets by, the kernel's environment, bubblewrap's command line with the files it
reads, the sandbox's pid 1 as bubblewrap reports it, the placeholder whose namespaces make the finished sandbox,
and a kernel forked into them by the warm fork server (`kernel_forks`). `Sandbox` puts them together, in order,
and keeps what they start.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dareforge.config import SandboxConfig
from dareforge.sandbox import isolation, processes
from dareforge.sandbox.connection import CHANNELS
from dareforge.sandbox.kernel_forks import NAMESPACES, ForkedKernel, KernelForkServer
from dareforge.sandbox.sandbox_errors import SandboxError

KERNEL_ARGS = ("--HistoryManager.hist_file=:memory:", "--IPKernelApp.quiet=True")
KERNEL_BOOT = (Path(__file__).parent / "kernel_boot.py").read_text()
"""The kernel's main program (run with `python -c`: the sandbox cannot import dareforge): it caps output."""
PLACEHOLDER = shutil.which("sleep", path="/usr/bin:/bin") or "/usr/bin/sleep"
"""What bubblewrap runs when the kernel is forked into the sandbox instead: it keeps the sandbox up."""
JOIN_GROUP = (
    "/bin/sh",
    "-c",
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"',
    "join-group",
)
"""Run COUNT PROCS_FILE... ARGV: the process joins the sandbox's control group, then becomes ARGV, so all it
starts is in the group from its first fork."""


def write_connection_file(ipc: Path, uid: int | None) -> tuple[Path, dict[str, Any]]:
    """The kernel's connection file in the launch's `ipc` folder (sockets there, a fresh key), and what it says;
    the folder and the file are the sandbox's uid's until the kernel has read them."""
    conn = ipc / "kernel.json"
    info = {
        "transport": "ipc",
        "ip": str(ipc / "k"),
        "key": uuid.uuid4().hex,
        "signature_scheme": "hmac-sha256",
        "kernel_name": "",
        **{f"{name}_port": n for n, name in enumerate(CHANNELS, start=1)},
    }
    conn.write_text(json.dumps(info))
    conn.chmod(0o600)
    if uid is not None:
        os.chown(ipc, uid, uid)
        os.chown(conn, uid, uid)
    return conn, info


def kernel_env(home: str, input_path: str, work_path: str, isolated: bool) -> dict[str, str]:
    """The kernel's whole environment, nothing of the host's: where the task's folders are, a home of its own."""
    env = {
        "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "USER": isolation.SANDBOX_USER,
        "LOGNAME": isolation.SANDBOX_USER,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp" if isolated else str(Path(home).parent / "tmp"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        # glibc reserves 64 MB of address space per thread arena; under RLIMIT_AS that is memory lost.
        "MALLOC_ARENA_MAX": "2",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "TASK_INPUT": input_path,
        "TASK_WORK": work_path,
    }
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    return env  # no JPY_PARENT_PID: in a PID namespace ipykernel's parent poller would kill the kernel


def bwrap_prefix(
    runtime: Path, ipc: Path, uid: int | None, inputs: Path, workspace: Path, memory_mb: int
) -> tuple[list[str], int, list[int]]:
    """bubblewrap's command line up to the command it runs in the sandbox, the read end of the pipe it reports
    the sandbox's pid 1 on, and the descriptors it must inherit (the caller closes them once it runs)."""
    etc = runtime / "etc"
    etc.mkdir(exist_ok=True)
    for name, text in isolation.etc_files(uid if uid is not None else os.getuid()).items():
        (etc / name).write_text(text)
    fds: list[int] = []
    program = isolation.seccomp_program()
    seccomp_fd = None
    if program is not None:
        path = runtime / "seccomp.bpf"
        path.write_bytes(program)
        seccomp_fd = os.open(path, os.O_RDONLY)
        fds.append(seccomp_fd)
    info_r, info_w = os.pipe()
    fds.append(info_w)
    bwrap = isolation.probe().bwrap
    assert bwrap is not None
    prefix = isolation.command(
        bwrap=bwrap,
        inputs=inputs,
        workspace=workspace,
        ipc_dir=ipc,
        etc_dir=etc,
        tmp_bytes=memory_mb * 1024 * 1024 // 4,
        seccomp_fd=seccomp_fd,
        info_fd=info_w,
    )
    # Hand bwrap its arguments through a file (--args): the host paths stay out of the sandbox's `ps`.
    args_path = runtime / "bwrap.args"
    args_path.write_bytes(b"".join(arg.encode() + b"\0" for arg in prefix[1:-1]))
    args_fd = os.open(args_path, os.O_RDONLY)
    fds.append(args_fd)
    return [prefix[0], "--args", str(args_fd), "--"], info_r, fds


def read_sandbox_pid(fd: int, deadline: float, proc: subprocess.Popen[bytes]) -> int | None:
    """The sandbox's first process id (its pid 1, as seen from the host), which bwrap writes to --info-fd; None
    when bwrap ended or the deadline passed before it did."""
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            with contextlib.suppress(ValueError):
                return int(json.loads(data)["child-pid"])
        elif proc.poll() is not None:
            break
    return None


def wait_placeholder(
    reaper_pid: int | None, uid: int, workspace: Path, check_starting: Callable[[], None]
) -> int:
    """The placeholder's pid once it runs as the sandbox's uid with the sandbox's root: bubblewrap has finished
    the mounts and the launcher its limits, so its namespaces are the sandbox's, complete. `check_starting`
    raises when the start has failed or run out of time."""
    bound = os.stat(workspace)
    while True:
        check_starting()
        kids = processes.children(reaper_pid) if reaper_pid else []
        if len(kids) == 1 and processes.uid_of(kids[0]) == uid:
            with contextlib.suppress(OSError):
                seen = os.stat(f"/proc/{kids[0]}/root{isolation.WORK_DIR}")
                if (seen.st_dev, seen.st_ino) == (bound.st_dev, bound.st_ino):
                    return kids[0]
        time.sleep(0.002)


def fork_kernel(
    placeholder: int,
    reaper_pid: int | None,
    spec: dict[str, Any],
    kernel_args: list[str],
    env: dict[str, str],
    config: SandboxConfig,
    log_fd: int,
) -> ForkedKernel:
    """Have the fork server fork a kernel into the namespaces of `placeholder`, the sandbox's only process."""
    namespaces: dict[str, int] = {}
    try:
        for name in NAMESPACES:
            namespaces[name] = os.open(f"/proc/{placeholder}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
        if processes.children(reaper_pid or -1) != [placeholder]:
            raise SandboxError("the sandbox's placeholder process changed while its namespaces were opened")
        program = isolation.seccomp_program()
        request = {
            "spec": spec,
            "seccomp": program.hex() if program is not None else None,
            "env": env,
            "argv": kernel_args,
        }
        server = KernelForkServer.shared(config.preload, env, KERNEL_BOOT, config.nice)
        return server.fork(request, log_fd, namespaces)
    finally:
        for fd in namespaces.values():
            os.close(fd)
