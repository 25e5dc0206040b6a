from __future__ import annotations

import pytest

from dareforge.config import Config
from dareforge.context import RunContext
from tests.stores import build_iris_release


@pytest.fixture
def config(tmp_path) -> Config:
    cfg = Config()
    cfg.store.root = str(tmp_path / "store")
    cfg.store.work_dir = str(tmp_path / "work")
    return cfg


@pytest.fixture
def ctx(config) -> RunContext:
    return RunContext.from_config(config, show_progress=False)


@pytest.fixture(scope="module")
def server():
    """A scripted OpenAI-compatible server over real HTTP (tests/llm_server.py), one per test module."""
    from tests.llm_server import LLMServer

    with LLMServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def iris_release(tmp_path_factory):
    """The folder of an iris-only release (tests/stores.py `build_iris_release`), built once per session: the
    same generate-and-release several modules started with; each copies it (`copy_iris_release`)."""
    return build_iris_release(tmp_path_factory.mktemp("iris-release"))
