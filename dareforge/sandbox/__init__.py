"""Isolated Python kernels for agent code: `Sandbox` (one per trajectory) and `KernelPool` (started ahead).

    with Sandbox(task_public_dir, workspace, config.sandbox, seconds_per_execution=60) as sandbox:
        run = sandbox.execute("import pandas as pd; pd.read_csv('/task/input/train.csv').shape")
        run.result, run.error, run.files_written, run.status

Isolation is bubblewrap (see `isolation`); `probe()` says whether it works here.
"""

from dareforge.sandbox.environment import SandboxEnvironment, SandboxFactory
from dareforge.sandbox.execution import Execution
from dareforge.sandbox.isolation import INPUT_DIR, WORK_DIR, Isolation, probe
from dareforge.sandbox.kernel import Sandbox
from dareforge.sandbox.pool import KernelPool
from dareforge.sandbox.sandbox_errors import SandboxError, SandboxUnavailableError

__all__ = [
    "INPUT_DIR",
    "WORK_DIR",
    "Execution",
    "Isolation",
    "KernelPool",
    "Sandbox",
    "SandboxEnvironment",
    "SandboxError",
    "SandboxFactory",
    "SandboxUnavailableError",
    "probe",
]
