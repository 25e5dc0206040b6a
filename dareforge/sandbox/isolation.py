"""Isolation: is bubblewrap here and working, and the bwrap command line that confines one kernel.

Design (see `command`):
- The sandbox root is an empty tmpfs. Read-only binds: /usr (and the /bin, /lib... symlinks to it), the Python
  runtime (the venv and its base interpreter, nothing else of their parent folders), a handful of /etc files
  (loader cache, time zone, certificates, fonts) and synthesized /etc/passwd, /etc/group and /etc/hosts.
  The task's public files are bound read-only at /task/input and the workspace read-write at /task/work, the
  kernel's working folder. Nothing else of the host is visible: not the store, not the repo, not /root or /home.
- Fresh /proc (own PID namespace), minimal /dev, private tmpfs /tmp and /dev/shm (each a quarter of the memory
  limit: tmpfs pages are host memory that RLIMIT_AS does not see).
- Namespaces: network (no interface but a down loopback), PID, IPC, UTS, cgroup. `--die-with-parent` and
  `--new-session` (no terminal injection).
- bwrap runs as root (the host's root-only paths such as a pyenv interpreter under /root can be bound), keeps
  only CAP_SETUID/CAP_SETGID/CAP_SETPCAP, and `LAUNCHER` inside sets the resource limits, empties the capability
  bounding set and switches to an unprivileged uid unique to the sandbox before exec'ing the kernel. A non-root
  uid is what makes RLIMIT_NPROC bite (root is exempt), and a uid per sandbox gives each its own process budget.
  When the host user is not root, bwrap makes a user namespace and the kernel keeps the host user's uid.
- A seccomp filter refuses new user namespaces (unshare/clone with CLONE_NEWUSER; clone3 answers ENOSYS so libc
  falls back to clone), ptrace, and every syscall of a foreign ABI (x32, i386).
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dareforge.config import SandboxConfig
from dareforge.sandbox.sandbox_errors import SandboxUnavailableError

log = logging.getLogger(__name__)

INPUT_DIR = "/task/input"
WORK_DIR = "/task/work"
HOME_DIR = "/tmp/home"
SANDBOX_USER = "agent"
PROBE_TIMEOUT_S = 15

LAUNCHER = (Path(__file__).parent / "confinement.py").read_text()
"""Runs inside the sandbox as the first process (`python -I -S -c LAUNCHER SPEC CMD...`): limits, then privileges
dropped for good, then exec of the kernel (see `confinement`)."""

# /etc files a Python data-science stack reads; none holds secrets. Missing ones are skipped.
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "fonts",
    "mime.types",
    "os-release",
    "alternatives",
)


@dataclass(frozen=True)
class Isolation:
    """Whether bubblewrap isolates here; `reason` says why not."""

    available: bool
    bwrap: str | None = None
    reason: str = ""


@functools.cache
def probe() -> Isolation:
    """Find bwrap and run it once with the namespaces the sandbox uses (cached for the process)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Isolation(False, None, "bubblewrap (bwrap) is not installed")
    argv = [bwrap, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", *namespace_args()]
    argv += privilege_args()
    try:
        done = subprocess.run(
            [*argv, "--", "true"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Isolation(False, bwrap, f"bwrap did not run: {exc}")
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        return Isolation(False, bwrap, f"bwrap is installed but cannot create namespaces here: {detail}")
    return Isolation(True, bwrap)


def require(config: SandboxConfig) -> bool:
    """True when bubblewrap isolates; False when it does not and `allow_unsandboxed` lets code run anyway."""
    found = probe()
    if found.available:
        return True
    if not config.allow_unsandboxed:
        raise SandboxUnavailableError(
            f"cannot isolate agent code: {found.reason}. Install bubblewrap (`apt-get install bubblewrap`, "
            "or `make sysdeps`), or, for trusted code only, set `sandbox.allow_unsandboxed: true` "
            "(env DAREFORGE_SANDBOX__ALLOW_UNSANDBOXED=true) to run kernels without isolation."
        )
    log.warning(
        "running agent code WITHOUT isolation (%s; sandbox.allow_unsandboxed is true): the code sees the "
        "host's files and network; only resource limits apply",
        found.reason,
    )
    return False


def namespace_args() -> list[str]:
    args = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--hostname", "sandbox", "--die-with-parent", "--new-session"]
    if os.geteuid() != 0:
        args.append("--unshare-user")
    return args


def privilege_args() -> list[str]:
    if os.geteuid() != 0:
        return []  # unprivileged bwrap drops every capability itself
    args = ["--cap-drop", "ALL"]
    for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
        args += ["--cap-add", cap]
    return args


def rlimits(config: SandboxConfig) -> list[tuple[str, int, int]]:
    memory = config.memory_mb * 1024 * 1024
    return [
        ("RLIMIT_AS", memory, memory),
        # SIGXCPU at the soft limit (Python dies of it), SIGKILL a few seconds later if it is caught.
        ("RLIMIT_CPU", config.cpu_seconds, config.cpu_seconds + 5),
        ("RLIMIT_NPROC", config.max_processes, config.max_processes),
        ("RLIMIT_CORE", 0, 0),
    ]


def runtime_roots() -> list[Path]:
    """Folders the kernel's Python needs: the venv and its base interpreter (not their parents)."""
    candidates = {
        Path(sys.prefix),
        Path(os.path.realpath(sys.prefix)),
        Path(os.path.realpath(sys.base_prefix)),
    }
    candidates.add(Path(os.path.realpath(sys.executable)).parent.parent)
    roots: list[Path] = []
    for path in sorted(candidates, key=lambda p: len(p.parts)):
        if path == Path("/") or _under(path, Path("/usr")) or any(_under(path, r) for r in roots):
            continue
        roots.append(path)
    return roots


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass
class _Args:
    argv: list[str] = field(default_factory=list)
    made: set[str] = field(default_factory=lambda: {"/"})

    def dirs(self, dest: str) -> None:
        """Create the parents of `dest` as world-readable folders (bwrap would make them 0700)."""
        for parent in reversed(Path(dest).parents):
            if str(parent) not in self.made:
                self.argv += ["--perms", "0755", "--dir", str(parent)]
                self.made.add(str(parent))

    def bind(self, option: str, src: str | Path, dest: str | Path) -> None:
        self.dirs(str(dest))
        self.argv += [option, str(src), str(dest)]
        self.made.add(str(dest))


def command(
    *,
    bwrap: str,
    inputs: Path,
    workspace: Path,
    ipc_dir: Path,
    etc_dir: Path,
    tmp_bytes: int,
    seccomp_fd: int | None,
    info_fd: int | None,
) -> list[str]:
    """The bwrap arguments up to and including `--`; the launcher and kernel command follow."""
    a = _Args()
    a.argv += namespace_args() + privilege_args()
    a.bind("--ro-bind", "/usr", "/usr")
    for name in ("bin", "sbin", "lib", "lib64", "lib32", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            a.argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            a.bind("--ro-bind", host, host)
    a.dirs("/etc/x")
    for name in ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            a.bind("--ro-bind", f"/etc/{name}", f"/etc/{name}")
    for name in ("passwd", "group", "hosts", "hostname"):
        a.bind("--ro-bind", etc_dir / name, f"/etc/{name}")
    a.argv += ["--proc", "/proc", "--dev", "/dev"]
    a.made |= {"/proc", "/dev", "/dev/shm"}
    for tmp in ("/tmp", "/dev/shm"):
        a.argv += ["--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", tmp]
        a.made.add(tmp)
    # After --tmpfs /tmp: the Python runtime (a checkout under /tmp has its venv there) and the socket folder
    # often live in the host's /tmp and must be bound on top of the fresh one.
    for root in runtime_roots():
        a.bind("--ro-bind", root, root)
    a.bind("--bind", ipc_dir, ipc_dir)
    a.bind("--ro-bind", inputs, INPUT_DIR)
    a.bind("--bind", workspace, WORK_DIR)
    if seccomp_fd is not None:
        a.argv += ["--seccomp", str(seccomp_fd)]
    if info_fd is not None:
        a.argv += ["--info-fd", str(info_fd)]
    return [bwrap, *a.argv, "--"]


def etc_files(uid: int) -> dict[str, str]:
    """Synthesized account files: the sandbox user exists (getpass, pwd), the host's accounts are not shown."""
    return {
        "passwd": (
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"{SANDBOX_USER}:x:{uid}:{uid}:agent:{HOME_DIR}:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "group": f"root:x:0:\n{SANDBOX_USER}:x:{uid}:\nnogroup:x:65534:\n",
        "hosts": "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n",
        "hostname": "sandbox\n",
    }


# --- seccomp: a classic BPF program, as bwrap's --seccomp reads it (an array of struct sock_filter) ---

_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_CLONE_NEWUSER = 0x10000000
# machine: (AUDIT_ARCH, clone, unshare, clone3, ptrace)
_ARCH = {
    "x86_64": (0xC000003E, 56, 272, 435, 101),
    "aarch64": (0xC00000B7, 220, 97, 435, 117),
}


def seccomp_program() -> bytes | None:
    """Deny new user namespaces, ptrace and foreign-ABI syscalls; None on an architecture this does not know.

    ptrace: no data-science code needs it, and a kernel that makes its parent its tracer (PTRACE_TRACEME) and
    stops itself leaves that parent, bwrap's reaper or the fork server, a trace stop to handle."""
    arch = _ARCH.get(platform.machine())
    if arch is None:
        return None
    audit_arch, nr_clone, nr_unshare, nr_clone3, nr_ptrace = arch
    deny, nosys = _ERRNO | _EPERM, _ERRNO | _ENOSYS
    prog = [
        (_LD_W_ABS, 0, 0, 4),  # 0: A = arch
        (_JEQ_K, 1, 0, audit_arch),  # 1: native? skip 1
        (_RET_K, 0, 0, deny),  # 2
        (_LD_W_ABS, 0, 0, 0),  # 3: A = syscall number
        (_JGE_K, 0, 1, 0x40000000),  # 4: x32 ABI bit
        (_RET_K, 0, 0, deny),  # 5
        (_JEQ_K, 0, 1, nr_clone3),  # 6
        (_RET_K, 0, 0, nosys),  # 7: libc falls back to clone
        (_JEQ_K, 0, 1, nr_ptrace),  # 8
        (_RET_K, 0, 0, deny),  # 9
        (_JEQ_K, 2, 0, nr_unshare),  # 10 -> 13
        (_JEQ_K, 1, 0, nr_clone),  # 11 -> 13
        (_RET_K, 0, 0, _ALLOW),  # 12
        (_LD_W_ABS, 0, 0, 16),  # 13: A = low 32 bits of the flags (args[0])
        (_JSET_K, 0, 1, _CLONE_NEWUSER),  # 14
        (_RET_K, 0, 0, deny),  # 15
        (_RET_K, 0, 0, _ALLOW),  # 16
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)
