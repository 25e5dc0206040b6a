"""How a sandbox's process confines itself before it runs agent code: its priority and resource limits, then
the sandbox's uid with no capability left, then its folders. One definition for both kinds of kernel: run as
the launcher (`python -I -S -c <this source> SPEC CMD...`, bubblewrap's first process, which then execs the
kernel or the placeholder) and loaded by the fork server for the kernels it forks. Standard library only: inside
the sandbox there is only the interpreter.

A non-root uid is what makes RLIMIT_NPROC bite (root is exempt), and a uid per sandbox gives each its own
process budget; `uid` is None when bubblewrap made a user namespace (a non-root host), where the process keeps
the host user's uid.
"""

import json
import os
import resource
import sys

PR_CAPBSET_DROP = 24


def limit(spec: dict) -> None:
    # Never less nice than it already is: lowering the nice value takes a capability the sandbox has not, and an
    # engine run under `nice -n 19` failed every kernel it started (EPERM).
    nice = max(spec["nice"], os.getpriority(os.PRIO_PROCESS, 0))
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    # bubblewrap's --new-session makes each sandbox a session of its own, and with autogroups the scheduler
    # shares the CPU between sessions before any nice value counts: a few sandboxes took most of two cores
    # from the refresh running beside them. Their session yields too (a kernel without autogroups has no file).
    try:
        with open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
    except OSError:
        pass
    for name, soft, hard in spec["rlimits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))


def drop_privileges(uid: int) -> None:
    """Empty the capability bounding set, then become `uid` (group too, no supplementary groups) for good."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    for cap in range(last_cap + 1):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise SystemExit(f"sandbox: cannot drop capability {cap} from the bounding set")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups():
        raise SystemExit("sandbox: could not drop privileges")


def settle(spec: dict) -> None:
    for path in spec["mkdirs"]:
        os.makedirs(path, exist_ok=True)
    os.chdir(spec["cwd"])  # here, not with bwrap --chdir: only the sandbox uid may enter a 0700 workspace


def launch() -> None:
    spec = json.loads(sys.argv[1])
    limit(spec)
    if spec["uid"] is not None:
        drop_privileges(spec["uid"])
    settle(spec)
    os.execv(sys.argv[2], sys.argv[2:])


if __name__ == "__main__":
    launch()
