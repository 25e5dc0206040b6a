"""The workbench in a real browser: Playwright driving Debian's chromium (Playwright cannot download its own
browsers here, so it launches the system one; `make install` installs it when missing). One server and one
browser per module.

The walk: open the list, filter it, open a task, check the instruction shown equals the stored one, record a
rejection, run the gate, see the task left out with the reviewer's reason; pages holding hostile markup run no
script and grow no element from it.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time

import pytest

from dareforge.browse import make_app
from dareforge.publish.release import Release
from dareforge.schema import Task, Verdict
from dareforge.validators.gate import gate
from tests.browse_store import GOLD_OUTPUT, HOSTILE_SOURCE, HOSTILE_TASK, RELEASE, RUNGS, build_browse_store

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (make install adds it)"
)
if CHROMIUM is None:
    pytest.skip(
        "no system chromium (make install runs apt-get install chromium; Playwright cannot download browsers here)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return build_browse_store(tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def server(ctx):
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(make_app(ctx.store, private=True), log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # a readiness wait, not a speed bound
    while not srv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the browse server did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    srv.should_exit = True
    thread.join()


@pytest.fixture(scope="module")
def page(server):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser.new_page()
        browser.close()


def test_review_a_task_in_the_browser_and_the_gate_keeps_it_out(ctx, server, page):
    everything = ctx.store.read_records(Task)
    tasks = sorted((t for t in everything if t.id != HOSTILE_TASK), key=lambda t: t.id)
    family = tasks[0].family
    page.goto(f"{server}/tasks")
    assert page.locator("tr.task-row").count() == len(everything)
    page.select_option("select[name=family]", family)
    page.click("#filters button[type=submit]")
    page.wait_for_url("**/tasks?*family=*")
    shown = page.locator("a.task-link").all_text_contents()
    assert sorted(shown) == sorted(t.id for t in everything if t.family == family)

    task = next(t for t in tasks if t.id in shown)
    page.click(f"a.task-link:text-is('{task.id}')")
    page.wait_for_url(f"**/task/{task.id}")
    assert page.locator("#instruction").text_content() == task.instruction
    assert page.locator("#verdict").text_content() == "verdict: accepted"

    page.fill("input[name=reviewer]", "ann")
    page.select_option("select[name=decision]", "rejected")
    page.fill("input[name=note]", "the target leaks through the id column")
    page.click("#review-form button[type=submit]")
    page.wait_for_url(f"**/task/{task.id}#reviews")
    assert (
        "ann · rejected: the target leaks through the id column"
        in page.locator("li.review").first.text_content()
    )

    gate(ctx)
    verdict = next(v for v in ctx.store.read_records(Verdict) if v.task_id == task.id)
    assert not verdict.accepted
    page.reload()
    assert page.locator("#verdict").text_content() == "verdict: rejected"
    reason = page.locator("#reasons li").first.text_content()
    assert reason.startswith("review: rejected by ann") and reason.endswith(
        "the target leaks through the id column"
    )
    page.goto(f"{server}/tasks?verdict=rejected")
    assert task.id in page.locator("a.task-link").all_text_contents()


def test_from_a_release_to_its_tasks_and_a_replayed_trajectory(ctx, server, page):
    release = Release.load(ctx.store, RELEASE)
    page.goto(f"{server}/releases")
    page.click(f"a.release-link:text-is('{release.version}')")
    page.click("#release-tasks")
    assert sorted(page.locator("a.task-link").all_text_contents()) == sorted(release.task_ids)
    page.select_option("select[name=split]", "test")
    page.click("#filters button[type=submit]")
    page.wait_for_url("**split=test*")
    shown = page.locator("a.task-link").all_text_contents()
    assert sorted(shown) == sorted(t for t, side in release.splits.items() if side == "test")

    page.goto(f"{server}/task/{HOSTILE_TASK}")
    assert page.locator("#ladder g.rung").count() == len(RUNGS)
    gold = page.locator("details.trajectory").first
    assert not gold.locator("li.step").first.is_visible()  # folded until opened
    gold.locator("summary").click()
    assert gold.locator("li.execution pre").first.text_content() == GOLD_OUTPUT


def test_hostile_pages_run_no_script(server, page):
    for url in (
        "/tasks",
        f"/tasks?source={HOSTILE_SOURCE}",
        f"/task/{HOSTILE_TASK}",
        f"/source/{HOSTILE_SOURCE}",
        "/runs",
    ):
        page.goto(f"{server}{url}")
        assert page.evaluate("typeof window.__pwned") == "undefined", url
        # No element grew from the markup (the CSP would also stop a script, so count elements too).
        assert page.locator("script, img").count() == 0, url
    page.goto(f"{server}/task/{HOSTILE_TASK}")
    assert (
        page.locator("#instruction").text_content().startswith("Predict <script>window.__pwned = 1</script>")
    )
    assert '<img src=x onerror="window.__pwned = 2">' in page.locator("p.columns").first.text_content()
