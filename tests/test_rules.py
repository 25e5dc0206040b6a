import re
from collections import Counter
from datetime import datetime

import pytest

from dareforge.config import Config, SourceOverride
from dareforge.config_loader import load_config
from dareforge.crawlers.filter import filter_sources, judge_source
from dareforge.crawlers.rules import NOT_A_COMPETITION, RULES, RuleOutcome, with_needs
from dareforge.errors import ConfigError
from dareforge.families.family import QUESTIONS
from dareforge.families.registry import row_needs
from dareforge.queries import accepted_source_ids
from dareforge.schema import FilterDecision, Origin, Source, SourceFile, SourceStatus

BY_NAME = {rule.name: rule for rule in with_needs(row_needs(Config()))}
"""The rules as the pipeline hands them the families' row minimums."""
SID = "kaggle-competition.titanic-like"
UNDECODABLE_E9 = "undecodable: byte 0xe9 at offset 12"
BINARY_NULS = "binary: 64 NUL bytes in its first 64 bytes, the first at offset 0"


def make_file(name: str, size: int = 100, **overrides) -> SourceFile:
    return SourceFile(name=name, size=size, sha256="0" * 64, **overrides)


def make_source(kind: str = "competition", **overrides) -> Source:
    """A source every rule keeps; `overrides` replace fields (total_bytes follows the files unless given)."""
    files = [
        make_file("train.csv", 800, encoding="utf-8", columns=["id", "Survived"], rows=500),
        make_file("test.csv", 150, encoding="utf-8", columns=["id"], rows=100),
        make_file("sample_submission.csv", 50, encoding="utf-8", columns=["id", "Survived"], rows=100),
    ]
    fields = {
        "id": f"kaggle-{kind}.titanic-like",
        "origin": Origin.KAGGLE_COMPETITION if kind == "competition" else Origin.KAGGLE_DATASET,
        "kind": kind,
        "ref": "titanic-like",
        "title": "Predict passenger survival",
        "version": "v1",
        "files": files if kind == "competition" else files[:2],
        "target_columns": ["Survived"],
        "n_rows": 500,
        "deadline": datetime(2020, 6, 1),
        "has_leaderboard": True if kind == "competition" else None,
        "team_count": 42 if kind == "competition" else None,
        **overrides,
    }
    fields.setdefault("total_bytes", sum(f.size for f in fields["files"]))
    return Source(**fields)


def case(name: str, rule: str, kept: bool, reason: str, measured: str | None, cfg=None, **source):
    """One rule check: `source` are make_source overrides, `cfg` a Config mapping (e.g. {"rules": {...}})."""
    return pytest.param(rule, source, cfg or {}, kept, reason, measured, id=f"{rule}:{name}")


NO_MARKERS = "no non-ML markers in category, title or tags"
IMAGES = [make_file(f"images/{i}.png", 300) for i in range(3)]

CASES = [
    case("ok", "fetched", True, "3 files stored", "ok"),
    case(
        "needs-rules",
        "fetched",
        False,
        "accept the competition rules at https://www.kaggle.com/c/titanic-like/rules, then re-crawl",
        "needs-rules",
        status=SourceStatus.NEEDS_RULES,
        rules_url="https://www.kaggle.com/c/titanic-like/rules",
    ),
    case(
        "failed",
        "fetched",
        False,
        "crawl failed: HTTP 503: Service Unavailable",
        "failed",
        status=SourceStatus.FAILED,
        status_detail="HTTP 503: Service Unavailable",
    ),
    case("csv", "submission-csv", True, "sample submission sample_submission.csv is CSV", ".csv"),
    case(
        "json",
        "submission-csv",
        False,
        "submission format is .json (sample_submission.json), not a CSV table; name the target under "
        "sources.kaggle-competition.titanic-like.target to pose the competition's task from its train file",
        ".json",
        files=[make_file("train.csv"), make_file("sample_submission.json")],
    ),
    case(
        "missing",
        "submission-csv",
        False,
        "no sample submission among 2 files (no table holds the test file's id column and train columns the test "
        "file lacks, one row per test row); name the target under sources.kaggle-competition.titanic-like.target",
        None,
        files=[make_file("train.csv"), make_file("test.csv")],
    ),
    case("dataset", "submission-csv", True, NOT_A_COMPETITION, None, kind="dataset"),
    case(
        "over",
        "size-limit",
        False,
        "1,000 bytes exceed rules.max_total_bytes=999",
        "1000",
        cfg={"rules": {"max_total_bytes": 999}},
    ),
    case(
        "at-limit",
        "size-limit",
        True,
        "1,000 bytes within 1,000",
        "1000",
        cfg={"rules": {"max_total_bytes": 1000}},
    ),
    case(
        "code-golf",
        "real-ml-task",
        False,
        "'Code Golf' in title/tags: not an ML task",
        "Code Golf",
        title="Google Code Golf Championship",
    ),
    case(
        "simulation-tag",
        "real-ml-task",
        False,
        "'simulation' in title/tags: not an ML task",
        "simulation",
        tags=["tabular", "simulation"],
    ),
    case(
        "hackathon-no-leaderboard",
        "real-ml-task",
        False,
        "hackathon without a leaderboard",
        "Hackathon",
        title="Spring Hackathon",
        has_leaderboard=False,
    ),
    case("hackathon-leaderboard", "real-ml-task", True, NO_MARKERS, None, title="Spring Hackathon"),
    case("normal", "real-ml-task", True, NO_MARKERS, None),
    case(
        "analytics-category",
        "real-ml-task",
        False,
        "category 'Analytics' holds no ML tasks",
        "Analytics",
        category="Analytics",
    ),
    case(
        "none",
        "leaderboard",
        False,
        "no public leaderboard to compare against",
        "false",
        has_leaderboard=False,
    ),
    case("exists", "leaderboard", True, "leaderboard exists (42 teams)", "true"),
    case(
        "not-checked",
        "leaderboard",
        True,
        "leaderboard not checked (kaggle.fetch_leaderboard is off)",
        None,
        has_leaderboard=None,
    ),
    case("dataset", "leaderboard", True, NOT_A_COMPETITION, None, kind="dataset"),
    case(
        "images",
        "tabular",
        False,
        "only 10% of bytes are tables (.csv, .parquet, .tsv), under rules.min_tabular_share=50%",
        "0.100",
        files=[*IMAGES, make_file("TRAIN.CSV")],
    ),
    case("csv", "tabular", True, "100% of bytes are tables", "1.000"),
    case(
        "mostly-csv",
        "tabular",
        True,
        "70% of bytes are tables",
        "0.700",
        files=[IMAGES[0], make_file("train.parquet", 700)],
    ),
    case("no-files", "tabular", False, "no files stored to judge the modality", None, files=[]),
    case(
        "below-every-family",
        "enough-rows",
        False,
        f"19 rows, fewer than any task family needs (20 for TS-XF, TS-CF, QA, Lake: {QUESTIONS.why})",
        "19",
        n_rows=19,
    ),
    case(
        "questions-only",
        "enough-rows",
        True,
        "40 rows; too few for Class-IF (needs 100), Class-MM (needs 100), Reg-IF (needs 100), Reg-MM (needs 100)",
        "40",
        n_rows=40,
    ),
    case("every-family", "enough-rows", True, "100 rows", "100", n_rows=100),
    case("largest-file", "enough-rows", True, "500 rows", "500", n_rows=None),
    case(
        "largest-file-below",
        "enough-rows",
        False,
        "500 rows, fewer than any task family needs (501 for every family: rules.min_rows=501)",
        "500",
        cfg={"rules": {"min_rows": 501}},
        n_rows=None,
    ),
    case(
        "unknown",
        "enough-rows",
        False,
        "row count unknown: no CSV, TSV or Parquet table to count",
        None,
        n_rows=None,
        files=[make_file("train.csv")],
    ),
    case(
        "mle-bench-lite",
        "not-excluded",
        False,
        "spooky-author-identification is on an exclusion list (mle-bench-lite)",
        "spooky-author-identification",
        ref="spooky-author-identification",
    ),
    case(
        "excluded-ids",
        "not-excluded",
        False,
        f"{SID} is on an exclusion list (rules.excluded_ids)",
        SID,
        cfg={"rules": {"exclusion_lists": [], "excluded_ids": [SID]}},
    ),
    case("not-listed", "not-excluded", True, "on no exclusion list", None),
    case(
        "before-cutoff",
        "recent-enough",
        False,
        "last activity 2016-12-31 is before rules.cutoff=2017-01-01",
        "2016-12-31",
        deadline=datetime(2016, 12, 31, 23, 59),
    ),
    case(
        "updated-after-cutoff",
        "recent-enough",
        True,
        "last activity 2018-03-04 is on or after 2017-01-01",
        "2018-03-04",
        deadline=datetime(2016, 1, 1),
        last_updated=datetime(2018, 3, 4),
    ),
    case(
        "no-date",
        "recent-enough",
        False,
        "no deadline or update date known; to keep kaggle-competition sources without one, add "
        "kaggle-competition to rules.recency_exempt_origins in dareforge.yaml or set "
        """DAREFORGE_RULES__RECENCY_EXEMPT_ORIGINS='["builtin", "kaggle-competition"]'""",
        None,
        deadline=None,
    ),
    case(
        "builtin",
        "recent-enough",
        True,
        "builtin sources have no update date; exempt by rules.recency_exempt_origins",
        None,
        kind="dataset",
        origin=Origin.BUILTIN,
        deadline=None,
    ),
    case(
        "undecodable",
        "readable-tables",
        False,
        f"data/train.csv is not UTF-8 (byte 0xe9 at offset 12); set sources.{SID}.encoding (e.g. latin-1)"
        " in dareforge.yaml",
        UNDECODABLE_E9,
        files=[make_file("data/train.csv", encoding=UNDECODABLE_E9), make_file("sample_submission.csv")],
    ),
    case(
        "encoding-override",
        "readable-tables",
        True,
        "encoding set to latin-1 in dareforge.yaml",
        "latin-1",
        cfg={"sources": {SID: {"encoding": "latin-1"}}},
        files=[make_file("data/train.csv", encoding=UNDECODABLE_E9)],
    ),
    case(
        "binary-despite-encoding",
        "readable-tables",
        False,
        f"data/train.csv is not a text table (64 NUL bytes in its first 64 bytes, the first at offset 0), so no "
        f"encoding reads it; replace it at the source, name another table under sources.{SID}.table, or exclude "
        "the source with rules.excluded_ids",
        BINARY_NULS,
        cfg={"sources": {SID: {"encoding": "latin-1"}}},
        files=[make_file("data/train.csv", encoding=BINARY_NULS), make_file("sample_submission.csv")],
    ),
    case(
        "other-table-named",
        "readable-tables",
        True,
        "every table decodes as UTF-8",
        "utf-8",
        cfg={"sources": {SID: {"table": "train.csv"}}},
        files=[
            make_file("train.csv", encoding="utf-8"),
            make_file("junk.csv", encoding=BINARY_NULS),
            make_file("old.csv", encoding=UNDECODABLE_E9),
        ],
    ),
    case(
        "bom",
        "readable-tables",
        True,
        "every table decodes as UTF-8",
        "utf-8,utf-8-sig",
        files=[make_file("train.csv", encoding="utf-8-sig"), make_file("test.csv", encoding="utf-8")],
    ),
    case("no-tables", "readable-tables", True, "every table decodes as UTF-8", None, files=IMAGES),
]


@pytest.mark.parametrize(("rule", "source", "cfg", "kept", "reason", "measured"), CASES)
def test_rule_verdict(rule, source, cfg, kept, reason, measured) -> None:
    assert BY_NAME[rule].check(make_source(**source), Config.model_validate(cfg)) == RuleOutcome(
        kept, reason, measured
    )


def test_every_rule_has_a_kept_and_a_dropped_case() -> None:
    covered = {(p.values[0], p.values[3]) for p in CASES}
    assert covered == {(rule.name, kept) for rule in RULES for kept in (True, False)}


@pytest.mark.parametrize("kind", ["competition", "dataset"])
def test_factory_source_passes_every_rule(kind: str) -> None:
    source = make_source(kind)
    assert [rule.name for rule in RULES if not rule.check(source, Config()).kept] == []


def test_excluded_ids_reason_names_the_setting_that_matched() -> None:
    config = Config.model_validate({"rules": {"excluded_ids": [SID]}})
    verdict = BY_NAME["not-excluded"].check(make_source(), config)
    assert verdict == RuleOutcome(False, f"{SID} is on an exclusion list (rules.excluded_ids)", SID)


def test_an_undated_mirror_source_is_kept_by_the_setting_its_drop_reason_names() -> None:
    undated = make_source("dataset", id="mirror.someone--plain", origin=Origin.MIRROR, deadline=None)
    dropped = BY_NAME["recent-enough"].check(undated, Config())
    assert not dropped.kept
    variable, value = re.search(r"set (DAREFORGE_\w+)='(.+)'$", dropped.reason).groups()
    assert BY_NAME["recent-enough"].check(undated, load_config(environ={variable: value})).kept


def test_unknown_exclusion_list_is_a_config_error() -> None:
    config = Config.model_validate({"rules": {"exclusion_lists": ["mle-bench-lite", "nope"]}})
    with pytest.raises(ConfigError) as raised:
        BY_NAME["not-excluded"].check(make_source(), config)
    assert str(raised.value) == (
        "rules.exclusion_lists names unknown list 'nope'; known lists: ['mle-bench-lite']"
    )


def test_judge_decides_every_rule_in_order_under_one_fingerprint(ctx) -> None:
    source = make_source(version="v7")
    decisions = judge_source(source, ctx)
    assert [d.rule for d in decisions] == [rule.name for rule in RULES]
    assert all(isinstance(d, FilterDecision) and d.kept for d in decisions)
    assert {(d.source_id, d.source_version) for d in decisions} == {(SID, "v7")}
    (fingerprint,) = {d.rules_fingerprint for d in decisions}

    ctx.config.rules.min_rows = 1000
    stricter = judge_source(source, ctx)
    assert {d.rules_fingerprint for d in stricter} == {ctx.config.fingerprint("rules", "sources")}
    assert stricter[0].rules_fingerprint != fingerprint
    assert [d.rule for d in stricter if not d.kept] == ["enough-rows"]

    ctx.config.sources[SID] = SourceOverride(encoding="latin-1")
    assert judge_source(source, ctx)[0].rules_fingerprint not in {fingerprint, stricter[0].rules_fingerprint}


def test_filter_sources_stores_every_decision_once(ctx) -> None:
    sources = [
        make_source(id="kaggle-competition.good"),
        make_source(
            id="kaggle-competition.json-no-target",
            files=[make_file("train.csv", rows=500), make_file("sample_submission.json")],
            target_columns=[],
        ),
        make_source(id="kaggle-competition.old", deadline=datetime(2015, 1, 1)),
        make_source("dataset", id="kaggle-dataset.good"),
    ]
    for source in sources:
        ctx.store.write_records(source.id, [source])

    report = filter_sources(ctx)
    assert report.labels("kept") == ["kaggle-competition.good", "kaggle-dataset.good"]
    assert report.labels("dropped") == ["kaggle-competition.json-no-target", "kaggle-competition.old"]
    # A missing target is no filter's business any more: the understand stage decides it from the data.
    assert report.counts == Counter({"submission-csv": 1, "recent-enough": 1})
    assert report.written == sorted(ctx.store.table_key("filter_decisions", s.id) for s in sources)
    assert accepted_source_ids(ctx) == report.labels("kept")

    assert filter_sources(ctx).written == []
    rows = (
        ctx.store.connect()
        .sql("select rule, count(*) from filter_decisions where not kept group by rule order by rule")
        .fetchall()
    )
    assert rows == [("recent-enough", 1), ("submission-csv", 1)]
