"""`dareforge browse` over HTTP (Starlette's test client): filters, the task page as the agent sees it, the
private side only when asked, reviews only with the server's token from its own origin, hostile markup as text.
The real-browser walk is in tests/test_browser.py."""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest
from starlette.testclient import TestClient

from dareforge import reviews
from dareforge.browse import data, make_app
from dareforge.publish.release import Release
from dareforge.publish.release_report import write_release_report
from dareforge.run_record import RUNS
from dareforge.schema import Review, Task
from tests.browse_store import (
    GOLD_OUTPUT,
    HOSTILE_SOURCE,
    HOSTILE_TASK,
    IMG,
    RELEASE,
    RUNGS,
    SAMPLED_ERROR,
    SCRIPT,
    build_browse_store,
)

TOKEN = "test-token"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return build_browse_store(tmp_path_factory.mktemp("browse"))


@pytest.fixture(scope="module")
def public(ctx):
    return TestClient(make_app(ctx.store, token=TOKEN))


@pytest.fixture(scope="module")
def private(ctx):
    return TestClient(make_app(ctx.store, private=True, token=TOKEN))


def _ids(page: str) -> list[str]:
    return re.findall(r'class="task-link" href="/task/([0-9a-z]+)"', page)


def test_the_list_filters_by_family_verdict_check_source_and_text(ctx, public):
    tasks = [t for t in ctx.store.read_records(Task) if t.variant_of is None]
    everything = public.get("/tasks").text
    assert f"{len(tasks)} tasks" in everything
    family = sorted({t.family for t in tasks})[0]
    only = _ids(public.get("/tasks", params={"family": family}).text)
    assert sorted(only) == sorted(t.id for t in tasks if t.family == family)
    rejected = _ids(public.get("/tasks", params={"verdict": "rejected", "check": "leakage-copy"}).text)
    assert rejected == [HOSTILE_TASK]
    assert _ids(public.get("/tasks", params={"source": HOSTILE_SOURCE}).text) == [HOSTILE_TASK]
    assert _ids(public.get("/tasks", params={"q": "second line & MORE"}).text) == [HOSTILE_TASK]


def test_the_task_page_shows_the_stored_instruction_and_hides_the_private_side(ctx, public, private):
    task = next(t for t in ctx.store.read_records(Task) if t.id != HOSTILE_TASK)
    page = public.get(f"/task/{task.id}").text
    shown = re.search(r'<pre id="instruction">(.*?)</pre>', page, re.S).group(1)
    assert html.unescape(shown) == task.instruction
    assert task.public_files[0].name in page and 'id="private"' not in page
    assert all(f.name not in page for f in task.private_files)
    side = private.get(f"/task/{task.id}").text
    assert 'id="private"' in side and "leakage-copy" in side and "verdict: accepted" in side
    assert all(f.name in side for f in task.private_files)
    assert public.get("/task/nosuch").status_code == 404


def test_hostile_markup_is_text_everywhere(ctx, private):
    release = Release.load(ctx.store, RELEASE)
    urls = [
        "/tasks",
        f"/tasks?difficulty=hard&q={SCRIPT}",
        f"/task/{HOSTILE_TASK}",
        f"/source/{HOSTILE_SOURCE}",
    ]
    urls += [
        "/releases",
        f"/release/{RELEASE}/{release.version}",
        "/runs",
        f"/task/{IMG}",
        f"/source/{IMG}",
    ]
    for url in urls:
        response = private.get(url)
        missing = url.endswith(IMG)  # the not-found page names what was asked for
        assert response.status_code == (404 if missing else 200), url
        page = response.text
        assert "<script>" not in page and "<img" not in page, url
        if missing:
            assert "&lt;img" in page, url
        elif "release" not in url:
            assert "&lt;script&gt;" in page, url
        assert "script-src 'none'" in response.headers["content-security-policy"]
    task_page = private.get(f"/task/{HOSTILE_TASK}").text
    assert IMG not in task_page and IMG in html.unescape(task_page)  # shown, as text
    assert html.unescape(re.search(r'id="instruction">(.*?)</pre>', task_page, re.S).group(1)).startswith(
        f"Predict {SCRIPT}"
    )


def test_a_review_needs_the_token_and_this_origin(ctx, public):
    task = next(t for t in ctx.store.read_records(Task) if t.id != HOSTILE_TASK)
    form = {
        "token": TOKEN,
        "fingerprint": reviews.task_fingerprint(task),
        "reviewer": "ann",
        "decision": "needs-fix",
        "note": "unclear bar",
    }
    url = f"/task/{task.id}/review"
    assert public.post(url, data={**form, "token": "forged"}).status_code == 403
    assert public.post(url, data=form, headers={"origin": "http://evil.example"}).status_code == 403
    assert not [r for r in ctx.store.read_records(Review) if r.task_id == task.id]
    stale = public.post(url, data={**form, "fingerprint": "old"}, follow_redirects=False)
    assert stale.status_code == 303 and "task+changed" in stale.headers["location"]
    ok = public.post(url, data=form, headers={"origin": "http://testserver"}, follow_redirects=False)
    assert ok.status_code == 303
    stored = [r for r in ctx.store.read_records(Review) if r.task_id == task.id]
    assert [(r.reviewer, r.decision, r.note) for r in stored] == [("ann", "needs-fix", "unclear bar")]
    assert "unclear bar" in public.get(f"/task/{task.id}").text


def test_the_source_page_says_why(ctx, public):
    task = next(t for t in ctx.store.read_records(Task) if t.id != HOSTILE_TASK)
    page = public.get(f"/source/{task.source_id}").text
    assert "Filter decisions" in page and "Framings" in page and task.id in page


def test_the_list_filters_by_release_split_and_difficulty(ctx, public):
    release = Release.load(ctx.store, RELEASE)
    label = f"{RELEASE}@{release.version}"
    assert sorted(_ids(public.get("/tasks", params={"release": label}).text)) == sorted(release.task_ids)
    for side in ("train", "test"):
        wanted = sorted(t for t, s in release.splits.items() if s == side)
        assert sorted(_ids(public.get("/tasks", params={"release": label, "split": side}).text)) == wanted
        # A split alone is the newest release's.
        assert sorted(_ids(public.get("/tasks", params={"split": side}).text)) == wanted
    assert _ids(public.get("/tasks", params={"difficulty": "hard"}).text) == [HOSTILE_TASK]
    untiered = _ids(public.get("/tasks", params={"difficulty": data.NO_TIER}).text)
    assert HOSTILE_TASK not in untiered and len(untiered) == len(_ids(public.get("/tasks").text)) - 1
    assert _ids(public.get("/tasks", params={"release": "nosuch@1", "family": "MM"}).text) == []


def test_pages_are_cut_in_sql_and_walk_the_whole_list(ctx, public, monkeypatch):
    everything = _ids(public.get("/tasks").text)
    monkeypatch.setattr(data, "PAGE_SIZE", 2)
    first = public.get("/tasks").text
    pages = -(-len(everything) // 2)
    assert f"{len(everything)} tasks · page 1 of {pages}" in first
    walked = []
    for n in range(1, pages + 1):
        walked += _ids(public.get("/tasks", params={"page": n}).text)
    assert walked == everything
    past = public.get("/tasks", params={"page": pages + 3}).text
    assert _ids(past) == [] and f"{len(everything)} tasks" in past
    assert f'rel="last" href="/tasks?page={pages}"' in first


def test_releases_and_runs_link_to_their_tasks(ctx, public):
    release = Release.load(ctx.store, RELEASE)
    listed = public.get("/releases").text
    assert f'href="/release/{RELEASE}/{release.version}"' in listed
    page = public.get(f"/release/{RELEASE}/{release.version}").text
    assert public.get(f"/release/{RELEASE}").text == page  # the newest version
    label = f"{RELEASE}%40{release.version}"
    assert f'href="/tasks?release={label}"' in page
    families = {t.family for t in release.tasks()}
    for family in families:
        for side in ("train", "test"):
            n = sum(1 for t in release.tasks() if t.family == family and release.splits[t.id] == side)
            link = f'href="/tasks?release={label}&amp;family={family}&amp;split={side}">{n}</a>'
            assert link in page
    assert public.get(f"/release/{RELEASE}/1999.01.01").status_code == 404
    assert public.get("/release/no.such/1").status_code == 404
    runs = public.get("/runs").text
    (key,) = ctx.store.list(RUNS)
    assert ctx.store.read_json(key)["started"] in runs and f"failed on {html.escape(SCRIPT)}" in runs


def test_the_release_report_is_served_and_links_back(ctx, public):
    release = Release.load(ctx.store, RELEASE)
    url = f"/release/{RELEASE}/{release.version}/report"
    assert public.get(url).status_code == 404  # not written yet
    write_release_report(ctx, RELEASE)
    served = public.get(url)
    assert served.status_code == 200 and "script-src 'none'" in served.headers["content-security-policy"]
    linked = re.findall(r"href='http://127\.0\.0\.1:8765(/task/[0-9a-z]+)'", served.text)
    assert linked and all(public.get(path).status_code == 200 for path in linked)
    assert f'href="{url}"' in public.get(f"/release/{RELEASE}/{release.version}").text


def test_public_files_are_profiled_as_prepare_would(ctx, public):
    task = next(t for t in ctx.store.read_records(Task) if t.id != HOSTILE_TASK and t.variant_of is None)
    page = public.get(f"/task/{task.id}").text
    tables = re.findall(r'<table class="profile">(.*?)</table>', page, re.S)
    csvs = [f for f in task.public_files if f.name.endswith(".csv")]
    assert len(tables) == len(csvs) > 0
    for f, table in zip(csvs, tables, strict=True):
        frame = pd.read_csv(ctx.store.local_path(f"tasks/{task.id}/public/{f.name}"))
        rows = [
            [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row)]
            for row in re.findall(r"<tr><td>.*?</tr>", table, re.S)
        ]
        assert [r[0] for r in rows] == list(frame.columns)
        for name, kind, _, missing, distinct, low, high in rows:
            column = frame[name]
            assert missing == f"{column.isna().mean() * 100:.1f}%"
            assert abs(int(distinct) - column.nunique()) <= max(
                1, column.nunique() // 20
            )  # approximate count
            if kind == "numeric":
                assert float(low) == column.min() and float(high) == column.max()


def test_the_private_side_plots_the_ladder_and_replays_trajectories(public, private):
    page = private.get(f"/task/{HOSTILE_TASK}").text
    svg = re.search(r'<svg id="ladder".*?</svg>', page, re.S).group(0)
    titles = [html.unescape(t).split(": ")[0] for t in re.findall(r"<title>(.*?)</title>", svg)]
    assert titles == [r["name"] for r in RUNGS]  # the whole name; the label is cut to fit its column
    labels = re.findall(r'text-anchor="end">(.*?)</text>', svg)
    assert html.unescape(labels[0]) == SCRIPT[:25] + "…" and labels[1:] == [r["name"] for r in RUNGS[1:]]
    dots = [float(x) for x in re.findall(r'<circle cx="([0-9.]+)"', svg)]
    assert dots == sorted(dots)  # the rungs' scores rise, and so do their dots
    bars = re.findall(r'<line x1="([0-9.]+)" y1="([0-9.]+)" x2="([0-9.]+)" y2="\2" stroke="#246"', svg)
    assert all(float(a) <= d <= float(b) for (a, _, b), d in zip(bars, dots, strict=True))
    trajectories = re.findall(r'<details class="trajectory".*?</details>', page, re.S)
    assert len(trajectories) == 2 and trajectories[0].count('<li class="step') == 3
    assert "<summary>gold · gold/" in trajectories[0] and "<summary>sampled · local/" in trajectories[1]
    assert GOLD_OUTPUT in html.unescape(trajectories[0]) and SAMPLED_ERROR in html.unescape(trajectories[1])
    probes = re.search(r'<table id="probes">.*?</table>', page, re.S).group(0)
    assert "no-data" in probes and f"prober {IMG}" in html.unescape(probes) and "0.1200" in probes
    shown = public.get(f"/task/{HOSTILE_TASK}").text
    assert "ladder" not in shown and "trajectory" not in shown and "probes" not in shown
