"""The DAGs parse without import errors, and each runs end to end with `dag.test()` on three builtin sources.

Airflow reads its configuration when it is first imported, so the session fixture sets AIRFLOW_* (a temporary
AIRFLOW_HOME, the repository's airflow.cfg and dags/) before anything imports airflow, then creates the
SQLite metadata database (`airflow db migrate`) and the pools once. The DAG runs share one store: the refresh
fills it and publishes `dareforge`; the release and audit DAGs work on what the refresh left.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from dareforge.errors import ConfigError, TransientError
from dareforge.orchestration import DEFAULT_RELEASE, POOLS, RELEASES_ASSET, TASKS_ASSET

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "dags"
DAG_IDS = {"dare_refresh", "dare_release", "dare_audit", "dare_sft"}
SOURCES = ["sklearn-iris", "vega-cars", "vega-stocks"]


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("airflow_home")
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW_CONFIG": str(REPO / "airflow.cfg"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),  # airflow.cfg says ${AIRFLOW_HOME}/dags, the repo root's
    }
    if "airflow" in sys.modules:
        from airflow.configuration import conf

        if conf.get("core", "dags_folder") != str(DAGS):
            pytest.fail("airflow was imported before tests/test_dags.py could configure it")
    (home / "data" / "airflow").mkdir(parents=True)  # airflow.cfg keeps SQLite and logs there
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield home


@pytest.fixture(scope="session")
def airflow_db(airflow_home: Path) -> Path:
    """The metadata database and the pools, once per session (without them: "no such table: task_instance").

    `upgradedb` is what `airflow db migrate` runs (about 3 s on SQLite); calling it here spares the CLI's own
    3 s of imports.
    """
    from airflow.utils.db import upgradedb

    from dareforge.orchestration import ensure_pools

    upgradedb()
    assert (airflow_home / "data" / "airflow" / "airflow.db").is_file()  # airflow.cfg's ${AIRFLOW_HOME} path
    assert sorted(ensure_pools()) == sorted(POOLS)
    assert ensure_pools() == []  # idempotent
    return airflow_home


@pytest.fixture(scope="module")
def dagbag(airflow_home: Path):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


@pytest.fixture(scope="module")
def store_env(tmp_path_factory) -> Path:
    """One store for all DAG runs of this module, restricted to three small builtin sources."""
    root = tmp_path_factory.mktemp("dag_store")
    config = root / "dareforge.yaml"
    config.write_text("{}\n")  # never a developer's ./dareforge.yaml
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAREFORGE_CONFIG", str(config))
        mp.setenv("DAREFORGE_STORE__ROOT", str(root / "store"))
        mp.setenv("DAREFORGE_STORE__WORK_DIR", str(root / "work"))
        mp.setenv("DAREFORGE_BUILTIN__INCLUDE", f"[{', '.join(SOURCES)}]")
        # One IF seed per framing: the DAGs map and pass the same paths whatever the count.
        mp.setenv("DAREFORGE_GENERATE__IF_VARIANTS", "1")
        # The same verdicts whether or not this machine ran `make local-llm`: no embedded model here.
        mp.setenv("DAREFORGE_LLM__LOCAL__PYTHON", str(root / "no-local-llm" / "python"))
        yield root / "store"


def _ctx():
    from dareforge.orchestration import context

    return context()


def _states(run) -> dict[str, list[str]]:
    states: dict[str, list[str]] = {}
    for ti in sorted(run.get_task_instances(), key=lambda t: (t.task_id, t.map_index)):
        states.setdefault(ti.task_id, []).append(str(ti.state))
    return states


def _events(uri: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent.extra)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri.startswith(uri))
            .order_by(AssetEvent.id)
        )
        return [extra for (extra,) in rows]


def test_dags_import_without_errors(dagbag):
    from airflow.sdk import Asset

    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) >= DAG_IDS
    refresh = dagbag.dags["dare_refresh"]
    assert refresh.catchup is False
    assert refresh.params["release"] == DEFAULT_RELEASE
    crawl, publish = refresh.task_dict["crawl"], refresh.task_dict["publish"]
    assert crawl.pool == "kaggle_api"
    assert crawl.retries == publish.retries == 2
    assert crawl.retry_exponential_backoff == publish.retry_exponential_backoff > 1  # True means 1.0
    assert all(refresh.task_dict[t].is_mapped for t in ("understand", "prepare", "generate"))
    assert [a.uri.rstrip("/") for a in refresh.task_dict["validate"].outlets] == [TASKS_ASSET]
    assert [a.uri.rstrip("/") for a in publish.outlets] == [RELEASES_ASSET]
    assert dagbag.dags["dare_release"].schedule is None
    refresh_dag = dagbag.dags["dare_refresh"]
    # weekly, and unpausing waits for the next Sunday instead of running the last one at once
    assert refresh_dag.start_date is None and refresh_dag.timetable.expression == "0 0 * * 0"
    assert refresh_dag.timetable.run_immediately is False
    assert dagbag.dags["dare_audit"].schedule == [Asset(RELEASES_ASSET)]
    assert dagbag.dags["dare_sft"].schedule == [Asset(RELEASES_ASSET)]
    assert refresh.task_dict["probe"].downstream_task_ids == {"gate"}
    assert refresh.task_dict["gate"].downstream_task_ids == {"publish"}
    pools = {t.pool for d in dagbag.dags.values() for t in d.tasks} - {"default_pool"}
    assert pools <= set(POOLS)  # every pool a task names is one ensure_pools creates


def test_audit_takes_the_release_from_the_newest_triggering_event():
    from airflow.sdk import Asset

    from dareforge.orchestration import release_to_audit

    now = datetime.now(UTC)
    events = [
        SimpleNamespace(extra={"release": "dareforge@2"}, timestamp=now),
        SimpleNamespace(extra={"release": "dareforge@1"}, timestamp=now - timedelta(hours=1)),
    ]
    assert release_to_audit({Asset(RELEASES_ASSET): events}, "x") == "dareforge@2"
    assert release_to_audit({}, "dareforge") == "dareforge"
    assert release_to_audit(None, "dareforge@1") == "dareforge@1"


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (TransientError("HTTP 503"), True),
        (ConnectionResetError("peer reset"), True),
        (ConfigError("bad yaml"), False),
        (FileNotFoundError("no such file"), False),
        (ValueError("a bug"), False),
    ],
)
def test_only_transient_errors_reach_airflow_retries(airflow_home, error, retried):
    from airflow.sdk.exceptions import AirflowFailException

    from dareforge.orchestration import retry_only_transient

    with pytest.raises(type(error) if retried else AirflowFailException), retry_only_transient("stage"):
        raise error


@pytest.fixture(scope="module")
def refresh_run(dagbag, airflow_db, store_env):
    return dagbag.dags["dare_refresh"].test()


def test_refresh_runs_end_to_end(refresh_run, store_env):
    from dareforge.orchestration import source_batches
    from dareforge.publish.release import list_versions

    states = _states(refresh_run)
    assert refresh_run.state == "success", states
    mapped = ("understand", "prepare", "generate", "check")
    # the sources go several to an instance: one per batch
    assert {states[t] == ["success"] * len(source_batches(SOURCES, t)) for t in mapped} == {True}, states
    assert states["probe"] == ["skipped"]  # no model at all: nothing to probe with; publish goes on
    others = {t: s for t, s in states.items() if t not in (*mapped, "probe")}
    assert all(s == ["success"] for s in others.values()), states
    assert len(list((store_env / "tasks").glob("*/_MANIFEST.json"))) >= len(SOURCES)
    versions = list_versions(_ctx(), DEFAULT_RELEASE)
    assert len(versions) == 1
    assert _events(RELEASES_ASSET)[-1] == {"release": f"{DEFAULT_RELEASE}@{versions[0]}"}
    assert len(_events(TASKS_ASSET)) == 1


def test_the_refresh_probe_opens_models_as_dareforge_run_does(refresh_run, store_env):
    """Under Airflow the probe looks for the embedded local model too (it used to check llm.endpoints only, so a
    cluster never probed although `make run` did); without one, the skip says what to install."""
    from dareforge.orchestration import run_stage

    report = run_stage("probe")
    assert report.outcomes == {}  # the probe did not run
    assert "make local-llm" in report.lines[0]


def test_release_publishes_a_new_name_and_skips_unchanged_content(dagbag, refresh_run):
    from dareforge.publish.release import list_versions

    release = dagbag.dags["dare_release"]
    run = release.test(run_conf={"name": "dareforge-manual"})
    assert run.state == "success", _states(run)
    assert _states(run) == {"gate": ["success"], "publish": ["success"]}
    assert len(list_versions(_ctx(), "dareforge-manual")) == 1
    events = len(_events(RELEASES_ASSET))

    again = release.test(run_conf={"name": DEFAULT_RELEASE})  # same content as the refresh's release
    assert again.state == "success", _states(again)
    assert _states(again)["publish"] == ["skipped"]
    assert len(list_versions(_ctx(), DEFAULT_RELEASE)) == 1
    assert len(_events(RELEASES_ASSET)) == events  # nothing published, no event, no audit run


def test_audit_passes_on_the_fresh_release(dagbag, refresh_run, store_env):
    from dareforge.publish.release import list_versions

    run = dagbag.dags["dare_audit"].test(run_conf={"release": DEFAULT_RELEASE})
    assert run.state == "success", _states(run)
    (version,) = list_versions(_ctx(), DEFAULT_RELEASE)
    assert (store_env / "reports" / "audit" / DEFAULT_RELEASE / version / "index.html").is_file()


def test_sft_builds_gold_trajectories_and_exports_without_a_model(dagbag, refresh_run, store_env):
    from dareforge.exports.export_format import list_export_versions

    run = dagbag.dags["dare_sft"].test(run_conf={"release": DEFAULT_RELEASE})
    assert run.state == "success", _states(run)
    assert _states(run) == {
        "gold": ["success"],
        "sample": ["skipped"],
        "judge": ["skipped"],
        "export": ["success"],
    }
    assert len(list_export_versions(_ctx(), f"{DEFAULT_RELEASE}-sft")) == 1
    assert len(list_export_versions(_ctx(), f"{DEFAULT_RELEASE}-rl")) == 1


def test_the_dags_that_follow_a_release_start_unpaused(dagbag):
    """A paused dare_audit or dare_sft would never follow a publish unless the user found and unpaused it."""
    for dag_id in ("dare_audit", "dare_sft"):
        assert dagbag.dags[dag_id].is_paused_upon_creation is False


@pytest.mark.parametrize(
    ("sources", "per", "most"), [(0, 8, 512), (5, 1, 8), (9, 1, 8), (5, 8, 512), (17, 8, 512), (2260, 8, 128)]
)
def test_sources_map_several_per_instance_within_the_limit(sources, per, most):
    from dareforge.orchestration import batches_of

    ids = [f"s{n:05d}" for n in range(sources)]
    batches = batches_of(ids, per, most)
    assert [s for batch in batches for s in batch] == ids  # every source once, in order
    assert len(batches) == min(-(-sources // per), most)
    assert all(batches) and (not batches or max(map(len, batches)) - min(map(len, batches)) <= 1)
    assert batches_of(ids, per, most) == batches


def test_cheap_stages_take_more_sources_to_an_instance_than_costly_ones():
    """A task instance starts once (about 5 CPU-s): understand and prepare, about 1-2 s a source, take many
    sources to an instance; generate and check share smaller batches, re-batched from what prepare prepared."""
    from dareforge.orchestration import source_batches

    ids = [f"s{n:05d}" for n in range(1_316)]  # the catalog's accepted sources
    cheap, costly = source_batches(ids, "understand"), source_batches(ids, "generate")
    assert source_batches(ids, "prepare") == cheap and source_batches(ids, "check") == costly
    assert len(cheap) == 14 and len(costly) == 83
