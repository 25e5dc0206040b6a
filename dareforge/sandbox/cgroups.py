"""Limits over all of a sandbox's processes together: one control group per sandbox for memory and process count.

RLIMIT_AS and RLIMIT_NPROC bound each process alone: four children of 1.5 GB each passed a 4 GB limit. A control
group counts them together (memory.max / memory.limit_in_bytes over every process and the tmpfs pages they
write, pids.max over every task). Used where the machine lets root make one:

- cgroup v2 (a unified hierarchy whose root offers the `memory` and `pids` controllers): one group
  `dareforge/<name>` below the root (v2 lets no group with processes in it, such as our own, hand controllers
  to children; the root is exempt);
- cgroup v1 (writable `memory` and `pids` hierarchies): one group under each, below this process's own group
  there, so the limits of whatever runs dareforge still apply above them;
- neither (no root, no controllers, a read-only /sys/fs/cgroup): `support()` says why, and the per-process
  resource limits are all there is (logged once).

Groups are named `<pid>-<serial>`: a later run removes those whose process is gone (a killed run's leftovers).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
PARENT = "dareforge"
_serial = itertools.count()


@dataclass(frozen=True)
class Support:
    """Which cgroup version this machine lets us use for sandboxes ("v2", "v1", or None with `reason`)."""

    version: str | None
    reason: str = ""


def _own_path(controller: str) -> str:
    """This process's group in the v1 hierarchy of `controller`, from /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path.lstrip("/")
    raise OSError(f"this process is in no {controller} cgroup")


def _bases(version: str) -> dict[str, Path]:
    """Where this process's sandbox groups go: per controller (v1) or the one unified folder (v2)."""
    if version == "v2":
        return {"": ROOT / PARENT}
    return {c: ROOT / c / _own_path(c) / PARENT for c in ("memory", "pids")}


@functools.cache
def support() -> Support:
    if os.geteuid() != 0:
        return Support(None, "not root: only root may make control groups here")
    unified = ROOT / "cgroup.controllers"
    try:
        if unified.exists():
            if not {"memory", "pids"} <= set(unified.read_text().split()):
                return Support(None, "the cgroup v2 hierarchy offers no memory and pids controllers")
            version = "v2"
        elif (ROOT / "memory" / "cgroup.procs").exists() and (ROOT / "pids" / "cgroup.procs").exists():
            version = "v1"
        else:
            return Support(None, "neither cgroup v2 nor the v1 memory and pids hierarchies are mounted")
        for base in _bases(version).values():
            base.mkdir(exist_ok=True)
            if version == "v2":
                _enable_controllers(base)
        _remove_orphans(version)
    except OSError as exc:
        return Support(None, f"cannot make control groups: {exc}")
    return Support(version)


def _enable_controllers(base: Path) -> None:
    """v2 hands a controller to a group's children only when each ancestor hands it down."""
    for folder in (ROOT, base):
        enabled = set((folder / "cgroup.subtree_control").read_text().split())
        if not {"memory", "pids"} <= enabled:
            (folder / "cgroup.subtree_control").write_text(
                " ".join(f"+{c}" for c in sorted({"memory", "pids"} - enabled))
            )


def _remove_orphans(version: str) -> None:
    for base in _bases(version).values():
        for group in base.iterdir():
            owner = group.name.split("-", 1)[0]
            if group.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
                with contextlib.suppress(OSError):
                    group.rmdir()  # refused while a process is still in it


class SandboxGroup:
    """The control group(s) of one sandbox: `join(pid)` before the process starts what it will start."""

    def __init__(self, version: str, memory_bytes: int, max_processes: int):
        self.version = version
        name = f"{os.getpid()}-{next(_serial)}"
        self.folders = {controller: base / name for controller, base in _bases(version).items()}
        for folder in self.folders.values():
            folder.mkdir()
        try:
            if version == "v2":
                folder = self.folders[""]
                (folder / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(FileNotFoundError):  # no swap accounting: nothing to swap to
                    (folder / "memory.swap.max").write_text("0")
                (folder / "pids.max").write_text(str(max_processes))
            else:
                memory = self.folders["memory"]
                (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
                with contextlib.suppress(FileNotFoundError):
                    (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                (self.folders["pids"] / "pids.max").write_text(str(max_processes))
        except OSError:
            self.remove()
            raise

    @property
    def procs_files(self) -> list[Path]:
        """Writing a pid to each of these moves that process (not its existing children) into the group."""
        return [folder / "cgroup.procs" for folder in self.folders.values()]

    def join(self, pid: int) -> None:
        for procs in self.procs_files:
            procs.write_text(str(pid))

    def pids(self) -> list[int]:
        folder = self.folders.get("pids", self.folders.get(""))
        assert folder is not None
        try:
            return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_kills(self) -> int:
        """Processes the kernel killed for the group's memory limit so far."""
        if self.version == "v2":
            path, key = self.folders[""] / "memory.events", "oom_kill"
        else:
            path, key = self.folders["memory"] / "memory.oom_control", "oom_kill"
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        return 0

    def remove(self) -> None:
        """Remove the group once its processes are gone (a group with a process in it cannot be removed)."""
        for folder in self.folders.values():
            with contextlib.suppress(OSError):
                folder.rmdir()


def create(memory_bytes: int, max_processes: int) -> SandboxGroup | None:
    """A group with these limits, or None where the machine has none to give (said once, in the log)."""
    found = support()
    if found.version is None:
        _warn_once(found.reason)
        return None
    return SandboxGroup(found.version, memory_bytes, max_processes)


@functools.cache
def _warn_once(reason: str) -> None:
    log.warning(
        "no control group for sandboxes (%s): memory_mb and max_processes bound each process of a sandbox, "
        "not all of them together",
        reason,
    )
