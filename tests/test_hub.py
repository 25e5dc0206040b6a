"""HubTarget against a local fake of the Hub API (tests/hub_server.py), driven by the real huggingface_hub client.

One small release (builtin sklearn-iris) is built per module; each test gets a fresh fake Hub. The client is
pointed at it with `endpoint=`; telemetry is off (else the client asks huggingface.co for an agent registry)
and a request hook fails any request that is not for 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from datetime import date
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import constants, set_client_factory
from huggingface_hub.utils._http import default_client_factory, hf_request_event_hook

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.families.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.publish import ReleaseError, build_release, load_release, verify_release
from dareforge.publish.hub import HubPublishError, HubTarget
from dareforge.publish.release import answers_folder
from dareforge.publish.targets import Target
from dareforge.schema import Task, Verdict
from dareforge.understand.understand_stage import understand
from tests.hub_server import GITATTRIBUTES, FakeHub

DAY = date(2026, 1, 15)
TOKEN = "hf_write"
TITLE = "dareforge release bench@2026.01.15"
SECRET_NAMES = {
    "answers.csv",
    "reference_predictions.csv",
    "reference.py",
    "spec.json",
    "strong_reference.py",
}


def _context(root: Path) -> RunContext:
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    cfg.builtin.include = ["sklearn-iris"]
    return RunContext.from_config(cfg, show_progress=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    ctx = _context(tmp_path_factory.mktemp("hub"))
    for step in (crawl, filter_sources, understand, prepare, generate):
        step(ctx)
    return ctx, build_release(ctx, "bench", today=DAY).release


@pytest.fixture
def release(built):
    return built[1]


def _only_loopback(request: httpx2.Request) -> None:
    assert request.url.host == "127.0.0.1", f"request left the machine: {request.url}"


@pytest.fixture
def hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)  # read at import time
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)  # the fake speaks LFS, not Xet
    set_client_factory(
        lambda: httpx2.Client(
            event_hooks={"request": [hf_request_event_hook, _only_loopback]},
            follow_redirects=True,
            timeout=20,
        )
    )
    try:
        with FakeHub() as server:
            yield server
    finally:
        set_client_factory(default_client_factory)


def _target(hub: FakeHub, **kw) -> HubTarget:
    return HubTarget("acme", **{"token": TOKEN, "endpoint": hub.url, "backoff_s": 0.01, **kw})


def _expected(release, private: bool) -> dict[str, bytes]:
    prefix, manifest = (
        (release.private_prefix, release.private_manifest) if private else (release.prefix, release.manifest)
    )
    files = {e["name"]: release.store.read_bytes(f"{prefix}/{e['name']}") for e in manifest["files"]}
    return {**files, "manifest.json": release.store.read_bytes(f"{prefix}/manifest.json")}


def _sha(release, private: bool) -> str:
    prefix = release.private_prefix if private else release.prefix
    return hashlib.sha256(release.store.read_bytes(f"{prefix}/manifest.json")).hexdigest()


def test_publish_makes_one_tagged_commit_per_half(hub, release):
    target = _target(hub)
    assert isinstance(target, Target)
    result = target.push(release)
    assert result.urls == {
        "public": f"{hub.url}/datasets/acme/bench",
        "private": f"{hub.url}/datasets/acme/bench-private",
    }
    assert not result.already_published and {r.status for r in result.repos} == {"published"}
    assert hub.dataset("acme/bench-private").private is True
    assert hub.dataset("acme/bench").private is False
    for repo_id, private in (("acme/bench", False), ("acme/bench-private", True)):
        expected = _expected(release, private)
        [commit] = hub.release_commits(repo_id)
        assert commit.title == TITLE and _sha(release, private) in commit.message
        assert commit.added == expected  # bytes as in the store, every manifest file plus manifest.json
        assert hub.dataset(repo_id).tags == {"v2026.01.15": commit.id}
        assert hub.tree_at(repo_id, "v2026.01.15") == {**expected, ".gitattributes": GITATTRIBUTES}
    # The private half goes first: a public version never exists without its answers.
    commits = [path for method, path in hub.requests if path.endswith("/commit/main")]
    assert commits == ["/api/datasets/acme/bench-private/commit/main", "/api/datasets/acme/bench/commit/main"]


def test_answers_never_reach_the_public_repo(hub, built):
    ctx, release = built
    _target(hub).publish(release)
    public = hub.tree_at("acme/bench", "v2026.01.15")
    private = hub.tree_at("acme/bench-private", "v2026.01.15")
    assert not any(p.startswith("answers/") for p in public)
    assert not {Path(p).name for p in public} & SECRET_NAMES
    assert "data/private.parquet" not in public
    secret_bytes = {
        ctx.store.read_bytes(f"tasks/{t.id}/private/{f.name}")
        for t in ctx.store.read_records(Task)
        for f in t.private_files
    }
    assert not secret_bytes & set(public.values())
    for task in ctx.store.read_records(Task):
        for f in task.private_files:
            assert f"{answers_folder(task.id)}/{f.name}" in private


def test_republishing_makes_no_new_commit(hub, release, caplog, monkeypatch):
    target = _target(hub)
    first = target.push(release)

    def no_staging(*args):
        raise AssertionError("a published version was copied again (4.6 GB for the whole catalog)")

    monkeypatch.setattr(HubTarget, "_stage", staticmethod(no_staging))
    with caplog.at_level(logging.INFO, logger="dareforge.publish.hub"):
        again = target.push(release)
    assert again.already_published and again.urls == first.urls
    assert [r.commit for r in again.repos] == [r.commit for r in first.repos]
    assert hub.calls["commit"] == 2 and hub.calls["tag"] == 2 and hub.calls["preupload"] == 2
    assert all(len(hub.release_commits(r)) == 1 for r in ("acme/bench", "acme/bench-private"))
    assert "already published" in caplog.text


@pytest.mark.parametrize("fault", [503, 429, "drop", "lost"])
def test_transient_failure_is_retried(hub, release, caplog, fault):
    hub.faults["commit"] = [fault]  # the first commit (the private half's) fails once
    with caplog.at_level(logging.WARNING, logger="dareforge.publish.hub"):
        result = _target(hub).push(release)
    assert {r.status for r in result.repos} == {"published"}
    assert [r.attempts for r in result.repos] == [2, 1]
    # "lost": the Hub made the commit but the answer never came; the retry finds it instead of committing again.
    assert hub.calls["commit"] == (2 if fault == "lost" else 3)
    for repo_id in ("acme/bench", "acme/bench-private"):
        [commit] = hub.release_commits(repo_id)
        assert hub.dataset(repo_id).tags == {"v2026.01.15": commit.id}
    [line] = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert "acme/bench-private" in line and "retry 1/4" in line
    assert (f"HTTP {fault}" in line) if isinstance(fault, int) else ("Error" in line)


def test_giving_up_after_max_retries(hub, release):
    hub.faults["commit"] = [502, 502, 502]
    with pytest.raises(HubPublishError, match="after 3 attempts") as info:
        _target(hub, max_retries=2).push(release)
    assert info.value.status == 502 and info.value.repo == "acme/bench-private"
    assert hub.calls["commit"] == 3 and "acme/bench" not in {r.id for r in hub.repos.values()}


@pytest.mark.parametrize(
    ("token", "status", "existing", "endpoint"),
    [
        ("hf_bad", 401, False, "info"),  # an unknown token: refused on the first request
        ("hf_read", 403, False, "create"),  # a read token cannot create the repo
        ("hf_read", 403, True, "preupload"),  # ... nor write to an existing one
    ],
)
def test_auth_errors_fail_at_once(hub, built, token, status, existing, endpoint):
    ctx, release = built
    if existing:
        hub.create("acme/bench-private", private=True)
    with pytest.raises(HubPublishError) as info:
        _target(hub, token=token).push(release)
    err = info.value
    assert err.status == status and err.repo == "acme/bench-private"
    assert f"HTTP {status}" in str(err) and "acme/bench-private" in str(err) and "HF_TOKEN" in str(err)
    assert hub.calls[endpoint] == 1  # not retried
    assert hub.calls["commit"] == 0 and hub.calls["tag"] == 0
    assert "datasets/acme/bench" not in hub.repos
    assert verify_release(ctx, "bench") == []  # nothing local changed


def test_refuses_a_public_private_repo(hub, release):
    hub.create("acme/bench-private", private=False)
    with pytest.raises(HubPublishError, match="acme/bench-private exists and is public"):
        _target(hub).push(release)
    assert hub.calls["commit"] == 0 and "datasets/acme/bench" not in hub.repos


def test_tag_of_another_build_is_an_error(hub, release):
    repo = hub.create("acme/bench-private", private=True)
    repo.tags["v2026.01.15"] = repo.branches["main"]
    with pytest.raises(HubPublishError, match="versions are immutable"):
        _target(hub).push(release)
    assert hub.calls["commit"] == 0


def test_missing_token_and_damaged_release_send_nothing(hub, built, tmp_path, monkeypatch):
    ctx, release = built
    monkeypatch.setattr("dareforge.publish.hub.get_token", lambda: None)
    with pytest.raises(HubPublishError, match="HF_TOKEN"):
        HubTarget("acme", endpoint=hub.url).push(release)
    shutil.copytree(ctx.config.store.root, tmp_path / "store")
    copy = _context(tmp_path)
    damaged = load_release(copy, "bench")
    name = damaged.manifest["files"][-1]["name"]
    copy.store.write_bytes(f"{damaged.prefix}/{name}", b"tampered\n")
    with pytest.raises(ReleaseError, match="damaged"):
        _target(hub).push(damaged)
    assert {method for method, _ in hub.requests} == {
        "GET"
    }  # it asked whether it was published, sent nothing


def test_new_version_is_one_commit_holding_exactly_its_files(hub, built, tmp_path):
    ctx, first = built
    shutil.copytree(ctx.config.store.root, tmp_path / "store")
    copy = _context(tmp_path)
    tasks = sorted(copy.store.read_records(Task), key=lambda t: t.id)
    dropped = tasks[0]
    copy.store.write_records(
        "all",
        [
            Verdict(task_id=t.id, source_id=t.source_id, family=t.family, accepted=t is not dropped,
                    reasons=[] if t is not dropped else ["leakage-feature: test"], thresholds_fingerprint="t1")
            for t in tasks
        ],
    )  # fmt: skip
    second = build_release(copy, "bench", today=DAY).release
    assert second.version == "2026.01.15.1"
    target = _target(hub)
    target.push(load_release(copy, "bench", first.version))
    target.push(second)
    for repo_id, private in (("acme/bench", False), ("acme/bench-private", True)):
        v1, v2 = hub.release_commits(repo_id)
        assert v2.title == "dareforge release bench@2026.01.15.1"
        tree = hub.tree_at(repo_id, "v2026.01.15.1")
        assert set(tree) == {*_expected(second, private), ".gitattributes"}
        assert {p: tree[p] for p in _expected(second, private)} == _expected(second, private)
        assert not any(dropped.id in p for p in tree) and any(dropped.id in p for p in v2.deleted)
        assert hub.tree_at(repo_id, "v2026.01.15") == v1.tree  # the old tag still shows the old version
        # Unchanged files are not sent again (the Hub's preupload oid lets the client drop them).
        kept = tasks[1].id
        assert not any(kept in p for p in v2.added) and any(kept in p for p in tree)


def test_a_large_version_goes_in_bounded_part_commits_then_one_tagged_commit(hub, release):
    """A whole-catalog release (tens of thousands of files, gigabytes) went in one commit, whose payload the
    client holds in memory: 2.5 GB of RSS at 3,800 tasks. Parts are bounded by bytes and by files."""
    sizes = {e["name"]: e["size"] for e in release.manifest["files"]}
    bound = max(sizes.values())  # a file larger than the bound still goes, alone
    target = _target(hub, commit_files=4, commit_bytes=bound)
    target.push(release)
    for repo_id, private in (("acme/bench", False), ("acme/bench-private", True)):
        commits = hub.release_commits(repo_id)
        *parts, last = commits
        assert parts and last.title == TITLE and _sha(release, private) in last.message
        assert [c.title for c in parts] == [
            f"{TITLE} (part {i}/{len(commits)})" for i in range(1, len(commits))
        ]
        assert all(len(c.added) <= 4 and sum(map(len, c.added.values())) <= bound for c in commits)
        assert "manifest.json" in last.added  # the version exists only once its last commit is made
        assert hub.dataset(repo_id).tags == {"v2026.01.15": last.id}
        assert hub.tree_at(repo_id, "v2026.01.15") == {
            **_expected(release, private),
            ".gitattributes": GITATTRIBUTES,
        }
    made = hub.calls["commit"]
    assert target.push(release).already_published and hub.calls["commit"] == made


def test_a_failed_final_commit_resumes_without_repeating_the_parts(hub, release):
    target = _target(hub, commit_files=4)
    parts = -(-len(_expected(release, private=True)) // 4) - 1
    hub.faults["commit"] = [None] * parts + [503]  # the private half's final commit fails once
    target.push(release)
    commits = hub.release_commits("acme/bench-private")
    assert len(commits) == parts + 1 and commits[-1].title == TITLE
    assert hub.tree_at("acme/bench-private", "v2026.01.15") == {
        **_expected(release, private=True),
        ".gitattributes": GITATTRIBUTES,
    }


def test_files_over_the_hubs_lfs_size_go_by_lfs_once(hub, release):
    """A whole-catalog release holds tables of 10 MiB and more, which the Hub takes only by LFS (the fake's
    size is lowered here so the small release has such files); publishing it again uploads nothing."""
    hub.lfs_threshold = 2048
    large = {e["name"] for e in release.manifest["files"] if e["size"] >= 2048}
    assert large
    target = _target(hub)
    target.push(release)
    for repo_id, private in (("acme/bench", False), ("acme/bench-private", True)):
        expected = {**_expected(release, private), ".gitattributes": GITATTRIBUTES}
        assert hub.tree_at(repo_id, "v2026.01.15") == expected
    public = hub.release_commits("acme/bench")[-1]
    assert {hashlib.sha256(public.added[name]).hexdigest() for name in large} <= set(hub.lfs)
    uploads, commits = hub.calls["lfs_upload"], hub.calls["commit"]
    assert uploads >= len(hub.lfs) > 0
    assert target.push(release).already_published
    assert (hub.calls["lfs_upload"], hub.calls["commit"]) == (uploads, commits)
