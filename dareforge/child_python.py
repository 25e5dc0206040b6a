"""How the project starts Python in a child process: always the installed code, whatever the working folder holds.

`python -m package` and `python -c code` put the working folder first on the child's `sys.path`, so a folder
holding another `dareforge/` (an older clone, or a copy planted in a shared folder) would run its code instead
of ours, with the operator's rights, and an older worker that never says the new ready line hung a whole run
(issue 43). So every Python child starts with `-P` (Python 3.11: no path entry for the working folder or the
script's folder) where its environment must pass through, or `-I` (isolated: also no PYTHON* variables and no
user site) where nothing of it is needed; and the PYTHONPATH a child inherits loses the entries that name the
working folder (empty or relative ones). `tests/test_child_python.py` walks the package so that a new launch
cannot miss the flag.

Pool workers of `multiprocessing` (spawn) need nothing here: they take the parent's `sys.path` before they import
anything of ours.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from os import PathLike

SAFE_PATH = "-P"
"""The child's environment passes through; only the unsafe first path entry goes (Python 3.11)."""
ISOLATED = "-I"
"""Nothing of the environment is read (PYTHON* variables, user site): for children that need none of it; every
Python 3 version knows it (the local model's runtime is a venv of its own)."""


def python_argv(*args: str, python: str | PathLike[str] | None = None, isolated: bool = False) -> list[str]:
    """A command line running `python` (default: this interpreter) on `args` (`-m module ...`, `-c code ...`)
    with the installed code only."""
    return [str(python or sys.executable), ISOLATED if isolated else SAFE_PATH, *args]


def child_env(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`base` (default: this process's environment) with `extra` set, for a Python child: PYTHONPATH keeps only
    absolute entries, since an empty or relative one is read against the child's working folder."""
    env = dict(os.environ if base is None else base)
    if "PYTHONPATH" in env:
        kept = [entry for entry in env.pop("PYTHONPATH").split(os.pathsep) if os.path.isabs(entry)]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
    env.update(extra or {})
    return env
