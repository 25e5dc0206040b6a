from __future__ import annotations

import pytest

from dareforge.config import Config
from dareforge.context import RunContext
from tests.stores import TEST_IF_VARIANTS, build_iris_release


@pytest.fixture
def config(tmp_path) -> Config:
    cfg = Config()
    cfg.store.root = str(tmp_path / "store")
    cfg.store.work_dir = str(tmp_path / "work")
    cfg.generate.if_variants = TEST_IF_VARIANTS
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


@pytest.fixture(scope="session")
def harbor_release(tmp_path_factory):
    """(context, release) of the small iris + CO2 release with question tasks that tests/test_harbor.py
    describes (`_release`), built once per session for the Harbor modules; what they export goes to their own
    folders."""
    from tests.test_harbor import _release

    # Two IF seeds: Class-IF then has more tasks than the one control per family test_harbor.py samples, so the
    # other's oracle is certified rather than run (every other family may hold one task).
    sources = ["sklearn-iris", "statsmodels-co2"]
    return _release(tmp_path_factory.mktemp("harbor"), sources, questions=True, if_variants=2)


@pytest.fixture(scope="session")
def harbor_export(harbor_release, tmp_path_factory):
    """`harbor_release` exported to Harbor without control runs (test_harbor.py has those), once per session:
    (release, report) for the modules that only read or copy the task folders."""
    from dareforge.exports.export_format import ExportJob
    from dareforge.exports.harbor import HarborLayout

    ctx, release = harbor_release
    dest = tmp_path_factory.mktemp("harbor-out") / "harbor"
    return release, HarborLayout("harbor", controls_per_family=0).export(ExportJob(ctx, release, dest=dest))
