"""Control runs of an exported Harbor task without Docker, in Harbor's two phases: its scripts run in our
bubblewrap sandbox with Harbor's paths bound where Harbor puts them, the verifier apart from the agent as
task.toml asks (`[verifier] environment_mode = "separate"`).

Harbor builds `environment/` into an image whose working folder is `/app`, runs the agent in one container of it
(the oracle agent with `solution/` at `/solution`), then starts a second container of the same image for the
verifier, carries over the agent's `artifacts` (here `/app/<output>`), adds `tests/` at `/tests` and an empty
`/logs/verifier`, and runs `bash /tests/test.sh`, which leaves the reward in `/logs/verifier/reward.txt`. Here:

- the agent phase is a sandbox with `/app` (a fresh copy of `environment/app/`, read-write) and `/logs`
  (read-write); `/solution` (read-only) only for the oracle's `solve.sh`; never `/tests`. A no-op runs nothing;
  a test's hostile agent is a shell script (`agent`). Its PID namespace, and every process the agent left in it,
  ends with the phase;
- the verifier phase is a second sandbox, another uid: `/app` a fresh copy of `environment/app/` with each
  artifact carried from the agent's `/app` (`carry`: a link stays a link, where Harbor drops one that leaves the
  artifact, so our grader must refuse it itself), `/tests` read-only, a fresh `/logs`; no `/solution`.

Both sandboxes are built by `dareforge.sandbox.isolation` (read-only /usr and Python runtime, no network, own PID
namespace, resource limits, an unprivileged uid when run as root, its seccomp filter). The interpreter is this
process's (the stack the release's references ran on, which the task's Dockerfile pins), not the image's.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dareforge.child_python import python_argv
from dareforge.config import SandboxConfig
from dareforge.exports import ExportError
from dareforge.reference_solutions.submission_files import MAX_PREDICTIONS_BYTES
from dareforge.sandbox import isolation
from dareforge.sandbox.host_folders import chown_tree
from dareforge.sandbox.kernel import _pick_uid

APP, SOLUTION, TESTS, LOGS = "/app", "/solution", "/tests", "/logs"
VERIFIER = f"{LOGS}/verifier"
REWARD = "reward.txt"
DETAILS = "grade.json"
HOME = "/tmp/home"


@dataclass(frozen=True)
class ControlRun:
    """What one run left: the reward Harbor would read (None: no reward file), the grader's details, and why
    a script failed (its exit status and the last line it printed)."""

    reward: float | None
    details: dict
    failure: str | None = None


def _env() -> dict[str, str]:
    env = {
        "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": HOME,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MALLOC_ARENA_MAX": "2",
    }
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    return env


def _readable(root: Path) -> None:
    """World-readable folders and files (the sandbox uid reads /solution and /tests)."""
    root.chmod(0o755)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            (Path(folder) / name).chmod(0o755)
        for name in files:
            (Path(folder) / name).chmod(0o755 if name.endswith(".sh") else 0o644)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def artifacts(task_dir: Path) -> list[PurePosixPath]:
    """The paths under `/app` that task.toml's `artifacts` names: what Harbor copies from the agent's container
    into the verifier's."""
    config = task_dir / "task.toml"
    entries = tomllib.loads(config.read_text()).get("artifacts", [])
    paths = [PurePosixPath(e if isinstance(e, str) else e.get("source", "")) for e in entries]
    for path in paths:
        if path.parent == path or PurePosixPath(APP) not in path.parents or ".." in path.parts:
            raise ExportError(
                f"{config}: `artifacts` entry {str(path)!r} is not a path under {APP}; the control runs carry "
                f"only the agent's {APP} into the verifier (write the graded output's path, e.g. {APP}/<output>)"
            )
    return paths


def carry(source: Path, target: Path) -> None:
    """Copy what the agent left at `source` (if anything) to the verifier's `target`, as Harbor carries an
    artifact from the agent's container to the verifier's, but keeping more than Harbor keeps: Harbor's tar
    filter drops links that leave the artifact and special files, here a link stays a link (wherever it points,
    resolved in the verifier's sandbox) and a FIFO a FIFO, so the grader itself must refuse them. A regular
    file is copied by content (a hard link too: its content is what the agent can read), a folder entry by
    entry; sockets and device nodes are dropped, as Harbor drops them. The agent's processes are gone by now
    (its PID namespace ended), so nothing changes `source` while it is read; still, nothing here follows a
    link of the agent's."""
    try:
        info = os.lstat(source)
    except FileNotFoundError:
        return
    if target.is_symlink() or target.is_file():
        target.unlink()  # the image's file of that name: the agent's replaces it
    elif target.is_dir():
        shutil.rmtree(target)
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISDIR(info.st_mode):
        target.mkdir(mode=0o755)
        for name in sorted(os.listdir(source)):
            carry(source / name, target / name)
    elif stat.S_ISFIFO(info.st_mode):
        os.mkfifo(target, 0o644)
    elif stat.S_ISREG(info.st_mode) and info.st_size > MAX_PREDICTIONS_BYTES:
        # Never read, so never copied: a sparse file of that size costs no disk and the grader refuses it
        # on its size alone (copying a sparse 100 GB file would write 100 GB).
        with open(target, "xb") as dst:
            dst.truncate(info.st_size)
        target.chmod(0o644)
    elif stat.S_ISREG(info.st_mode):
        reader = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(reader, "rb") as src, open(target, "xb") as dst:
            shutil.copyfileobj(src, dst)
        target.chmod(0o644)


class Controller:
    """Runs a task folder's scripts in the sandbox (see the module doc); without bubblewrap it refuses (the
    scripts are not run unconfined, whatever `sandbox.allow_unsandboxed` says)."""

    def __init__(self, config: SandboxConfig):
        found = isolation.probe()
        if not found.available:
            raise ExportError(
                f"the harbor export runs every task's oracle and a no-op in the sandbox, which needs bubblewrap: "
                f"{found.reason} (`make sysdeps` installs it)"
            )
        self.config = config
        self.bwrap = isolation.probe().bwrap

    def run(
        self,
        task_dir: Path,
        *,
        oracle: bool,
        solve_timeout: float,
        test_timeout: float,
        place: dict[str, bytes] | None = None,
        agent: str | None = None,
    ) -> ControlRun:
        """Harbor's two phases (module doc). The agent phase runs `solution/solve.sh` (`oracle`), the shell
        script `agent` (a test's hostile agent), or nothing (a no-op); `place` puts files in its `/app` first."""
        if oracle and agent is not None:
            raise ValueError("a control run is the oracle or a given agent, not both")
        carried = artifacts(task_dir)
        with tempfile.TemporaryDirectory(prefix="dfharbor-") as scratch:
            root = Path(scratch)
            acting = self._phase_root(root / "agent", task_dir, ("solution",) if oracle else ())
            for name, data in (place or {}).items():
                (acting / "app" / name).write_bytes(data)
            uid = self._own(acting)
            failure = None
            if oracle:
                failure = self._script(
                    acting, uid, ["/bin/bash", f"{SOLUTION}/solve.sh"], solve_timeout, "solution/solve.sh"
                )
            elif agent is not None:
                failure = self._script(acting, uid, ["/bin/bash", "-c", agent], solve_timeout, "the agent")
            # The agent's sandbox is gone (its PID namespace ended with it, and every process in it); the
            # verifier starts from the image's /app and what Harbor carries over.
            judging = self._phase_root(root / "verifier", task_dir, ("tests",))
            for path in carried:
                carry(acting / path.relative_to("/"), judging / path.relative_to("/"))
            uid = self._own(judging)
            test_failure = self._script(
                judging, uid, ["/bin/bash", f"{TESTS}/test.sh"], test_timeout, "tests/test.sh"
            )
            failure = failure or test_failure
            reward_file = judging / "logs" / "verifier" / REWARD
            details_file = judging / "logs" / "verifier" / DETAILS
            reward = None
            if reward_file.is_file():
                try:
                    reward = float(reward_file.read_text().strip())
                except ValueError:
                    reward = None
            details = json.loads(details_file.read_text()) if details_file.is_file() else {}
            return ControlRun(reward, details, failure)

    @staticmethod
    def _phase_root(root: Path, task_dir: Path, parts: tuple[str, ...]) -> Path:
        """A phase's folders: a fresh `/app` from `environment/app/` (the image's), the task's `parts` (read-only
        in the sandbox), an empty `/logs` and the sandbox's own folders."""
        for part in parts:
            shutil.copytree(task_dir / part, root / part)
        shutil.copytree(task_dir / "environment" / "app", root / "app")
        for empty in ("logs/verifier", "logs/agent", "logs/artifacts", "inputs", "work", "ipc", "etc"):
            (root / empty).mkdir(parents=True)
        _readable(root)  # before anything of the agent's is in it: it follows links
        return root

    @staticmethod
    def _own(root: Path) -> int | None:
        """A fresh unprivileged uid for the phase (as root), owning its `/app` and `/logs`; its account files."""
        uid = _pick_uid() if os.geteuid() == 0 else None
        if uid is not None:
            chown_tree(root / "app", uid)
            chown_tree(root / "logs", uid)
        for name, text in isolation.etc_files(uid if uid is not None else os.getuid()).items():
            (root / "etc" / name).write_text(text)
        return uid

    def _script(
        self, root: Path, uid: int | None, command: list[str], timeout: float, name: str
    ) -> str | None:
        program = isolation.seccomp_program()
        seccomp_fd = None
        if program is not None:
            (root / "seccomp.bpf").write_bytes(program)
            seccomp_fd = os.open(root / "seccomp.bpf", os.O_RDONLY)
        try:
            return self._confined(root, uid, command, timeout, name, seccomp_fd)
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)

    def _confined(
        self,
        root: Path,
        uid: int | None,
        command: list[str],
        timeout: float,
        name: str,
        seccomp_fd: int | None,
    ) -> str | None:
        prefix = isolation.command(
            bwrap=str(self.bwrap),
            inputs=root / "inputs",
            workspace=root / "work",
            ipc_dir=root / "ipc",
            etc_dir=root / "etc",
            tmp_bytes=self.config.memory_mb * 1024 * 1024 // 4,
            seccomp_fd=seccomp_fd,
            info_fd=None,
        )
        binds = ["--bind", str(root / "app"), APP, "--bind", str(root / "logs"), LOGS]
        for folder, where in (("tests", TESTS), ("solution", SOLUTION)):
            if (root / folder).is_dir():  # only the phase that has it: /tests never in the agent's
                binds += ["--ro-bind", str(root / folder), where]
        spec = {
            "rlimits": isolation.rlimits(self.config),
            "nice": self.config.nice,
            "uid": uid,
            "mkdirs": [HOME],
            "cwd": APP,
        }
        launcher = python_argv("-S", "-c", isolation.LAUNCHER, json.dumps(spec), isolated=True)
        argv = [*prefix[:-1], *binds, "--", *launcher, *command]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=_env(),
                cwd="/",
                check=False,
                pass_fds=() if seccomp_fd is None else (seccomp_fd,),
            )
        except subprocess.TimeoutExpired:
            return f"{name} did not finish within {timeout:g} s"
        if done.returncode != 0:
            return f"{name} exited with status {done.returncode}: {_last_line(done.stderr or done.stdout)}"
        return None
