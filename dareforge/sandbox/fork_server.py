"""The kernel fork server's main program: a clean interpreter with ipykernel and the preloaded modules imported
once, that forks a kernel into a sandbox bubblewrap has already built. Run on the host as
`python -c <this file's source> SOCKET_FD PRELOAD_JSON NICE KERNEL_BOOT_SOURCE CONFINEMENT_SOURCE` (standard
library only, like `kernel_boot` and `confinement`, so nothing of dareforge is in the image a kernel inherits).

Why: a kernel costs about 0.75 CPU-seconds to start with a fresh interpreter (ipykernel 0.3, numpy and pandas
0.45), and every episode gets a fresh kernel; a fork of this warm image costs a few hundredths. On a 2-core
machine that CPU, not the model, bounded how many episodes ran per minute.

Isolation is bubblewrap's, not rebuilt here. The host starts the sandbox as before (mounts, namespaces,
seccomp, the launcher's limits and uid) with a placeholder process in place of the kernel, then passes this server
the placeholder's namespace descriptors. For each request the server forks a child that joins those namespaces
(network, IPC, UTS, cgroup, mount, and the PID namespace for its own child) and forks the kernel, which is then
inside the sandbox's PID namespace and sees only its filesystem. The kernel repeats what the launcher does
before it runs anything of the request's: a new session, standard descriptors (the log pipe), every other
descriptor closed, the resource limits, the capability bounding set emptied, the sandbox's uid, no new
privileges, the same seccomp filter, the environment, the working folder (limits, uid and folders by the
launcher's own code, `confinement`). The kernel dies with the sandbox (its PID namespace ends with bwrap),
whatever happens to this server.

Protocol (SOCK_SEQPACKET, JSON): request {"id", "namespaces": [names of the passed descriptors after the
first], "spec": the launcher's spec, "seccomp": hex of the BPF program or null, "env", "argv"} with descriptors
[log, *namespaces]; replies {"id", "pid"} or {"id", "error"}; when a kernel ends, {"exited": pid, "code"} with
the code as `subprocess.Popen.returncode` gives it (negative: the signal).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import types
from typing import NamedTuple

CLONE_FLAGS = {
    "net": 0x40000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "cgroup": 0x02000000,
    "mnt": 0x00020000,
    "pid": 0x20000000,
}
JOIN_ORDER = ("net", "ipc", "uts", "cgroup", "pid", "mnt")
"""Mount last: once in the sandbox's filesystem, /proc and the descriptors' paths are the sandbox's."""
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
MAX_MESSAGE = 1 << 20
MAX_FDS = 16

libc = ctypes.CDLL(None, use_errno=True)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


class Programs(NamedTuple):
    """The sandbox-side programs a forked kernel runs, loaded from their sources (nothing of dareforge)."""

    kernel_boot: types.ModuleType
    confinement: types.ModuleType


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module  # kernel_boot names its output stream class by its module's name
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def join_namespaces(fds: dict[str, int]) -> None:
    for name in JOIN_ORDER:
        if name in fds:
            _check(libc.setns(fds[name], CLONE_FLAGS[name]), f"setns {name}")


def confine(confinement: types.ModuleType, spec: dict, seccomp: bytes | None, log_fd: int) -> None:
    """For a process that arrived by setns instead of exec: what bubblewrap does for its first process (a new
    session, its descriptors, no new privileges, the seccomp filter), and what the launcher does
    (`confinement`: limits, the sandbox's uid, its folders)."""
    os.setsid()
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    confinement.limit(spec)
    confinement.drop_privileges(spec["uid"])
    # Leaving root made the process non-dumpable (its /proc files root's: /proc/self/io, environ... refused);
    # a fresh kernel is dumpable again after its exec. Nothing of root's is in this memory.
    _check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if seccomp is not None:
        program = ctypes.create_string_buffer(seccomp, len(seccomp))
        fprog = _SockFprog(len(seccomp) // 8, ctypes.addressof(program))
        _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp filter")
    confinement.settle(spec)


def reseed() -> None:
    """Fresh random state: every kernel forked from one image would otherwise draw the same numbers where code
    does not seed (Python's `random` reseeds itself after a fork; numpy's global generator does not)."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def run_kernel(programs: Programs, request: dict, fds: list[int]) -> None:
    """In the grandchild, inside the sandbox: confine, then become the kernel. Never returns."""
    code = 1
    try:
        # The server's signal plumbing first: its wake-up descriptor's number may be reused by the kernel's
        # files, and Python writes a byte there on every signal.
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        seccomp = bytes.fromhex(request["seccomp"]) if request["seccomp"] else None
        confine(programs.confinement, request["spec"], seccomp, fds[0])
        reseed()
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["-c", *request["argv"]]
        programs.kernel_boot.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # reported in the kernel's log, which the host reads when it did not start
        print(f"dareforge fork server: the kernel could not start: {exc!r}", file=sys.stderr)
    finally:
        sys.stderr.flush()
        os._exit(code)


def fork_kernel(programs: Programs, sock: socket.socket, request: dict, fds: list[int]) -> int:
    """Fork a child that joins the sandbox and forks the kernel there; the kernel's host pid."""
    names = ["log", *request["namespaces"]]
    if len(names) != len(fds) or not set(request["namespaces"]) <= set(CLONE_FLAGS):
        raise ValueError(f"descriptors {names} do not match the {len(fds)} passed")
    report_r, report_w = os.pipe()
    child = os.fork()
    if child == 0:
        status = 1
        try:
            sock.close()
            os.close(report_r)
            join_namespaces(dict(zip(names[1:], fds[1:], strict=True)))
            kernel = os.fork()  # the first process this child makes in the sandbox's PID namespace
            if kernel == 0:
                os.close(report_w)
                run_kernel(programs, request, fds)
            os.write(report_w, struct.pack("=i", kernel))
            status = 0
        except BaseException as exc:
            os.write(report_w, struct.pack("=i", -1) + repr(exc).encode()[:4000])
        finally:
            os._exit(status)
    os.close(report_w)
    with os.fdopen(report_r, "rb") as report:
        answer = report.read()
    os.waitpid(child, 0)  # the kernel is now this server's child (subreaper)
    pid = struct.unpack("=i", answer[:4])[0] if len(answer) >= 4 else -1
    if pid <= 0:
        raise OSError(f"could not enter the sandbox: {answer[4:].decode(errors='replace') or 'no answer'}")
    return pid


def reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if not (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
            # A stop reported to this server as the tracer (the sandbox's seccomp filter refuses ptrace, so
            # this is a second wall): a kernel that stops itself under trace is ended, not left hanging.
            os.kill(pid, signal.SIGKILL)
            continue
        sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def serve(programs: Programs, sock: socket.socket) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            reap(sock)
        if sock not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
        if not data:
            return  # the host closed its end
        request: dict = {}
        try:
            request = json.loads(data)
            reply = {"id": request.get("id"), "pid": fork_kernel(programs, sock, request, fds)}
        except Exception as exc:
            reply = {"id": request.get("id"), "error": str(exc) or repr(exc)}
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(json.dumps(reply).encode())
        reap(sock)


def main() -> None:
    if sys.path and sys.path[0] == "":
        del sys.path[0]  # the server's working folder is the host's; nothing there may shadow a module
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
    sock = socket.socket(fileno=int(sys.argv[1]))
    preload, nice = json.loads(sys.argv[2]), int(sys.argv[3])
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    programs = Programs(
        _module("dareforge_kernel_boot", sys.argv[4]), _module("dareforge_confinement", sys.argv[5])
    )
    for name in preload:
        try:
            __import__(name)
        except Exception as exc:  # as a pooled kernel's preload: a warning, and kernels without it
            print(f"dareforge fork server: could not preload {name}: {exc!r}", file=sys.stderr, flush=True)
    import gc

    gc.collect()
    gc.freeze()  # the imported image stays shared with every kernel instead of copied by their first collection
    sock.send(b'{"ready": true}')
    serve(programs, sock)


if __name__ == "__main__":
    main()
