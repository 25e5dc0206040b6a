"""The real kaggle client against a local server speaking the Kaggle API over HTTP."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from dareforge.cli import app
from dareforge.config import DatasetQuery
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.crawlers.kaggle import KaggleCrawler, find_credentials
from dareforge.errors import CredentialsError
from dareforge.schema import Source, SourceStatus
from tests.kaggle_server import KaggleServer

TRAIN = "id,feature,label\n1,0.5,a\n2,0.7,b\n3,0.1,a\n"
TEST = "id,feature\n4,0.2\n"
SAMPLE = "id,label\n4,a\n"


@pytest.fixture
def server(monkeypatch, tmp_path):
    monkeypatch.setenv("KAGGLE_USERNAME", "dareforge-test")
    monkeypatch.setenv("KAGGLE_KEY", "not-a-real-key")
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "kaggle-config"))
    with KaggleServer() as srv:
        kaggle = srv.kaggle
        files = {"train.csv": TRAIN, "test.csv": TEST, "sample_submission.csv": SAMPLE}
        kaggle.add_competition("tabular-one", files)
        kaggle.add_competition("tabular-two", files, deadline="2025-02-01T00:00:00Z")
        kaggle.add_competition("gated-comp", files, rules_accepted=False)
        kaggle.add_competition("golf-comp", files, title="Code Golf Championship", leaderboard=False)
        kaggle.add_dataset(
            "someone/house-prices", {"houses.csv": "sqft,rooms,price\n1000,3,250000\n1500,4,320000\n"}
        )
        yield srv


@pytest.fixture
def kaggle_ctx(ctx, server):
    cfg = ctx.config
    cfg.builtin.enabled = False
    cfg.kaggle.enabled = True
    cfg.kaggle.endpoint = server.url
    cfg.kaggle.competition_categories = ["featured"]
    cfg.kaggle.datasets = [DatasetQuery(search="house")]
    cfg.kaggle.min_request_interval_s = 0
    cfg.kaggle.backoff_s = 0.01
    cfg.rules.min_rows = 1  # the scripted tables are tiny
    return ctx


def test_lists_every_page_and_records_all_fields(kaggle_ctx, server):
    sources = {s.id: s for s in KaggleCrawler(kaggle_ctx.config.kaggle).list_sources()}
    # The server caps pages at 2 items, so four competitions take two pages: paging must follow the token.
    assert sorted(sources) == [
        "kaggle-competition.gated-comp",
        "kaggle-competition.golf-comp",
        "kaggle-competition.tabular-one",
        "kaggle-competition.tabular-two",
        "kaggle-dataset.someone--house-prices",
    ]
    one = sources["kaggle-competition.tabular-one"]
    assert one.ref == "tabular-one" and one.kind == "competition"
    assert one.evaluation_metric == "Accuracy" and one.team_count == 1234 and one.has_leaderboard
    assert one.total_bytes == len(TRAIN) + len(TEST) + len(SAMPLE)
    assert one.deadline.year == 2024
    assert sources["kaggle-competition.golf-comp"].has_leaderboard is False
    dataset = sources["kaggle-dataset.someone--house-prices"]
    assert dataset.license == "CC0: Public Domain" and dataset.last_updated.year == 2025
    assert all(h.startswith("Basic ") for h in server.kaggle.auth_headers)


def test_crawl_downloads_checksums_and_records_rules_gate(kaggle_ctx, server):
    report = crawl(kaggle_ctx)
    assert report.counts == {"downloaded": 4, "needs-rules": 1}
    records = {s.id: s for s in kaggle_ctx.store.read_records(Source)}
    gated = records["kaggle-competition.gated-comp"]
    assert gated.status == SourceStatus.NEEDS_RULES
    assert gated.rules_url == "https://www.kaggle.com/competitions/gated-comp/rules"
    one = records["kaggle-competition.tabular-one"]
    assert [f.name for f in one.files] == ["sample_submission.csv", "test.csv", "train.csv"]
    assert one.target_columns == ["label"] and one.id_column == "id"
    assert kaggle_ctx.store.verify(f"raw/{one.id}/{one.version}") == []
    # A dataset names no target: the crawl records none, and leaves it to the understand stage.
    assert records["kaggle-dataset.someone--house-prices"].target_columns == []
    assert [(e.team, e.score) for e in one.leaderboard] == [("top team", "0.98765")]
    assert records["kaggle-competition.golf-comp"].leaderboard == []

    args = ["--store", kaggle_ctx.config.store.root, "sources", "--status", "needs-rules", "--format", "json"]
    (listed,) = json.loads(CliRunner().invoke(app, args).output)
    assert listed["id"] == "kaggle-competition.gated-comp"
    assert listed["why"] == "https://www.kaggle.com/competitions/gated-comp/rules"

    filtered = filter_sources(kaggle_ctx)
    assert sorted(filtered.labels("kept")) == [
        "kaggle-competition.tabular-one",
        "kaggle-competition.tabular-two",
        "kaggle-dataset.someone--house-prices",
    ]
    why = dict(
        kaggle_ctx.store.connect()
        .sql("select source_id || ':' || rule, reason from filter_decisions where not kept")
        .fetchall()
    )
    assert (
        "accept the competition rules at https://www.kaggle.com/competitions/gated-comp/rules"
        in why["kaggle-competition.gated-comp:fetched"]
    )
    assert why["kaggle-competition.golf-comp:real-ml-task"].startswith("'Code Golf'")
    assert why["kaggle-competition.golf-comp:leaderboard"] == "no public leaderboard to compare against"


def test_recrawl_downloads_nothing_unless_kaggle_changed(kaggle_ctx, server):
    crawl(kaggle_ctx)
    downloads = sum(n for path, n in server.kaggle.calls.items() if path.startswith("/blobs/"))
    again = crawl(kaggle_ctx)
    assert again.counts == {"unchanged": 4, "needs-rules": 1}
    assert again.written == []
    assert sum(n for path, n in server.kaggle.calls.items() if path.startswith("/blobs/")) == downloads

    # Rules accepted later: only that competition is fetched. A dataset's new version is re-downloaded.
    server.kaggle.competitions["gated-comp"]["rules_accepted"] = True
    server.kaggle.add_dataset("someone/house-prices", {"houses.csv": "sqft,price\n900,200000\n"}, version=2)
    third = crawl(kaggle_ctx)
    assert third.counts == {"unchanged": 3, "downloaded": 2}
    record = {s.id: s for s in kaggle_ctx.store.read_records(Source)}["kaggle-dataset.someone--house-prices"]
    assert record.files[0].columns == ["sqft", "price"]
    # The superseded version is gone from the store; only the current one remains.
    assert {k.split("/")[2] for k in kaggle_ctx.store.list(f"raw/{record.id}")} == {
        record.version,
        "_CURRENT.json",
    }


def test_interrupted_download_resumes_with_a_range_request(kaggle_ctx, server):
    # Big enough (and incompressible enough) that the client writes a full chunk before the cut.
    rng = random.Random(0)
    big_train = "id,feature,label\n" + "".join(
        f"{i},{rng.random()},{rng.choice('ab')}\n" for i in range(120_000)
    )
    server.kaggle.add_competition("big-comp", {"train.csv": big_train, "sample_submission.csv": SAMPLE})
    blob = server.kaggle.blobs["big-comp.zip"]
    server.kaggle.cut_after["big-comp.zip"] = len(blob) - 1000
    report = crawl(kaggle_ctx)
    assert report.counts["downloaded"] == 5
    (resumed,) = server.kaggle.ranges
    assert 0 < int(resumed.removeprefix("bytes=").rstrip("-")) < len(blob)
    big = {s.id: s for s in kaggle_ctx.store.read_records(Source)}["kaggle-competition.big-comp"]
    assert kaggle_ctx.store.verify(f"raw/{big.id}/{big.version}") == []
    assert kaggle_ctx.store.read_bytes(f"raw/{big.id}/{big.version}/files/train.csv").decode() == big_train


def test_transient_errors_are_retried_and_others_are_not(kaggle_ctx, server):
    listing = "/v1/competitions.CompetitionApiService/ListCompetitions"
    server.kaggle.faults[listing] = [
        (429, "application/json", '{"code": 429, "message": "Too many requests"}'),
        (503, "text/html", "<html>Service Unavailable</html>"),
    ]
    sources = list(KaggleCrawler(kaggle_ctx.config.kaggle).list_sources())
    assert len(sources) == 5
    assert server.kaggle.calls[listing] == 4  # two failures, then two pages

    files = "/v1/competitions.CompetitionApiService/ListDataFiles"
    server.kaggle.faults[files] = [(400, "application/json", '{"code": 400, "message": "Bad request"}')]
    report = crawl(kaggle_ctx)
    assert "listing failed" not in report.outcomes
    assert report.failures == {
        "kaggle-competition.gated-comp": "list files of gated-comp: HTTP 400 Bad request"
    }
    assert report.counts["downloaded"] == 4


def test_html_error_page_fails_the_source_and_the_crawl_goes_on(kaggle_ctx, server):
    server.kaggle.faults["/blobs/tabular-one.zip"] = [(200, "text/html", "<html>Kaggle is down</html>")]
    report = crawl(kaggle_ctx)
    assert report.counts["downloaded"] == 3
    assert "not a valid zip archive" in report.failures["kaggle-competition.tabular-one"]
    # The next crawl retries it.
    assert crawl(kaggle_ctx).counts["downloaded"] == 1


def test_missing_credentials_say_how_to_fix(monkeypatch, tmp_path):
    for var in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(CredentialsError, match="KAGGLE_USERNAME and KAGGLE_KEY"):
        find_credentials({"KAGGLE_CONFIG_DIR": str(tmp_path)})
    (tmp_path / "kaggle.json").write_text("{not json")
    with pytest.raises(CredentialsError, match="not valid JSON"):
        find_credentials({"KAGGLE_CONFIG_DIR": str(tmp_path)})


def test_missing_credentials_are_a_listing_error_not_a_crash(ctx, monkeypatch, tmp_path):
    for var in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path))
    ctx.config.kaggle.enabled = True
    report = crawl(ctx, origins=["kaggle"])
    assert "Kaggle credentials not found" in report.outcomes["listing failed"]["kaggle"]
