"""The embedded local model's server lifecycle: started, waited for, used by the real client, stopped.

The lifecycle runs against a real child process speaking the same protocol (tests/llm_server.py as a program),
so `make test` needs no compiled llama.cpp; the last test uses the real llama.cpp server and SmolLM2 when
`make local-llm` has installed them, and is skipped otherwise.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from dareforge.config import EndpointConfig, LocalModelConfig
from dareforge.llm import LLMClient
from dareforge.llm.local import LocalModelError, ServerProcess, find_local_model, local_endpoint


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scripted_server(port: int, tmp_path: Path, timeout: float = 30.0) -> ServerProcess:
    command = [sys.executable, "-m", "tests.llm_server", "--port", str(port)]
    return ServerProcess(command, port, tmp_path / "server.log", timeout)


def test_server_process_starts_answers_and_stops(tmp_path):
    port = free_port()
    server = scripted_server(port, tmp_path)
    models = server.start()
    try:
        assert models == ["scripted-model"]
        endpoint = EndpointConfig(name="local", base_url=server.base_url, model="scripted-model")
        result = LLMClient(endpoint, None).complete([{"role": "user", "content": "hello there"}])
        assert result.ok and "hello there" in result.text
        with pytest.raises(LocalModelError, match=f"port {port} is already in use"):
            scripted_server(port, tmp_path / "second").start()
    finally:
        server.stop()
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):  # the process is gone
        s.connect(("127.0.0.1", port))


def test_a_server_that_dies_while_starting_reports_its_log(tmp_path):
    command = [sys.executable, "-c", "import sys; print('model file is corrupt'); sys.exit(3)"]
    server = ServerProcess(command, free_port(), tmp_path / "server.log", 30.0)
    with pytest.raises(LocalModelError, match=r"exited with code 3(.|\n)*model file is corrupt"):
        server.start()


def test_a_server_that_never_answers_is_stopped(tmp_path):
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    server = ServerProcess(command, free_port(), tmp_path / "server.log", 1.0)
    with pytest.raises(LocalModelError, match="did not answer within 1 s"):
        server.start()
    assert server._proc is None


def test_missing_runtime_says_what_to_run(tmp_path):
    config = LocalModelConfig(python=str(tmp_path / "nowhere" / "python"))
    model, why = find_local_model(config)
    assert model is None and "make local-llm" in why
    with pytest.raises(LocalModelError, match="make local-llm"), local_endpoint(config, tmp_path):
        pass
    assert find_local_model(LocalModelConfig(enabled=False))[1].startswith("the local model is disabled")


LOCAL = find_local_model(LocalModelConfig())


@pytest.mark.skipif(LOCAL[0] is None, reason=f"local model not installed: {LOCAL[1]}")
def test_the_real_local_model_answers_through_the_client(tmp_path):
    config = LocalModelConfig(port=free_port())
    with local_endpoint(config, tmp_path) as endpoint:
        assert endpoint.model == "SmolLM2-135M-Instruct.Q4_1"
        result = LLMClient(endpoint, None).complete(
            [{"role": "user", "content": "Say hello in one word."}], max_tokens=16, temperature=0.0
        )
    assert result.ok, result.error
    assert result.text.strip() and result.completion_tokens > 0
