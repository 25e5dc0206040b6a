"""`dareforge browse` over HTTP (Starlette's test client): filters, the task page as the agent sees it, the
private side only when asked, reviews only with the server's token from its own origin, hostile markup as text.
The real-browser walk is in tests/test_browser.py."""

from __future__ import annotations

import html
import re

import pytest
from starlette.testclient import TestClient

from dareforge import reviews
from dareforge.browse import make_app
from dareforge.schema import Review, Task
from tests.browse_store import HOSTILE_SOURCE, HOSTILE_TASK, IMG, SCRIPT, build_browse_store

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


def test_hostile_markup_is_text_everywhere(private):
    for url in ("/tasks", f"/task/{HOSTILE_TASK}", f"/source/{HOSTILE_SOURCE}"):
        response = private.get(url)
        assert response.status_code == 200
        page = response.text
        assert "<script>" not in page and "<img" not in page, url
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
