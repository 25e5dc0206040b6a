"""The workbench's routes: task list, task, source, releases, runs, release report, review form (see the package doc)."""

from __future__ import annotations

import hmac
import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any, get_args
from urllib.parse import urlencode, urlsplit

import duckdb
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from dareforge import reviews
from dareforge.browse import data
from dareforge.browse.plots import ladder_plot
from dareforge.browse.profiles import PROFILE_ROWS, FileProfile, Profiles
from dareforge.families.registry import REGISTERED, bar_of
from dareforge.publish.release_report import report_key
from dareforge.publish.source_split import SPLITS
from dareforge.schema import Difficulty, Review, SourceFile, Trajectory, Validation
from dareforge.store import Store
from dareforge.trajectories import GOLD_ENDPOINT, GOLD_KIND
from dareforge.validators.gate import ladder_rungs

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PREVIEW_LINES = 12
PREVIEW_BYTES = 8192
STEP_CHARS = 4000
"""A replayed step's text shown at most (an agent's output can be megabytes; the page says when it is cut)."""


# The time as microseconds: DuckDB hands a TIMESTAMPTZ to Python only through pytz, which is not installed.
REVIEWS_SQL = 'select * exclude ("at"), epoch_us("at") as at_us from reviews where task_id = ? order by "at" desc, id desc'


class Workbench:
    """The state of one server: the store, whether the private side shows, the review token."""

    def __init__(self, store: Store, private: bool, token: str | None = None):
        self.store, self.private = store, private
        self.token = token or secrets.token_urlsafe(24)
        self.env = Environment(
            loader=PackageLoader("dareforge.browse", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.env.filters["details"] = details_text
        self.env.filters["clip"] = clip
        self.views = data.StoreViews(store)
        self.profiles = Profiles(store)

    def render(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        page = self.env.get_template(name).render(private=self.private, profile_rows=PROFILE_ROWS, **values)
        return HTMLResponse(page, status_code=status, headers=SECURITY_HEADERS)

    def connection(self) -> duckdb.DuckDBPyConnection:
        return self.views.connection()

    # -- pages ------------------------------------------------------------------------------------------------
    async def task_list(self, request: Request) -> Response:
        chosen = {k: (request.query_params.get(k) or None) for k in data.FILTERS}
        asked = request.query_params.get("page") or "1"
        page = max(int(asked), 1) if asked.isdigit() else 1
        con = self.connection()
        if chosen["split"] and not chosen["release"]:
            chosen["release"] = self.views.newest()  # a split is a release's: the newest one's
        listed = data.task_list(con, chosen, page)
        families = [r[0] for r in con.execute("select distinct family from tasks order by 1").fetchall()]
        released = [
            r[0] for r in con.execute("select distinct release from release_tasks order by 1").fetchall()
        ]
        kept = {k: v for k, v in chosen.items() if v}
        return self.render(
            "tasks.html",
            tasks=listed.rows,
            total=listed.total,
            page=page,
            pages=max((listed.total + data.PAGE_SIZE - 1) // data.PAGE_SIZE, 1),
            chosen=chosen,
            families=families,
            releases=released,
            tiers=(*get_args(Difficulty), data.NO_TIER),
            query=lambda **change: urlencode({**kept, **change}),
        )

    async def task_page(self, request: Request) -> Response:
        task_id = request.path_params["task_id"]
        try:
            task = reviews.load_task(self.store, task_id)
        except reviews.ReviewError as exc:
            return self.render("missing.html", 404, what=str(exc))
        con = self.connection()
        family = REGISTERED.get(task.family)
        bar = bar_of(task) if family is not None else None
        values: dict[str, Any] = {
            "task": task,
            "bar": bar,
            "public": [self._file(f"tasks/{task.id}/public/{f.name}", f) for f in task.public_files],
            "releases": con.execute(
                "select release, split from release_tasks where id = ? order by release desc", [task.id]
            ).fetchall(),
            "reviews": [_review(r) for r in _dicts(con.execute(REVIEWS_SQL, [task.id]))],
            "fingerprint": reviews.task_fingerprint(task),
            "token": self.token,
            "decisions": reviews.DECISIONS,
            "error": request.query_params.get("error"),
        }
        if self.private:
            values["private_files"] = [
                (f, self._preview(f"tasks/{task.id}/private/{f.name}")) for f in task.private_files
            ]
            findings = [
                Validation.model_validate(r)
                for r in _dicts(
                    con.execute("select * from validations where task_id = ? order by 1", [task.id])
                )
            ]
            values["findings"] = sorted(findings, key=lambda v: v.check)
            values["ladder"] = ladder_plot(ladder_rungs(findings), bar)
            values["verdict"] = con.execute(
                "select accepted, reasons from verdicts where task_id = ? limit 1", [task.id]
            ).fetchone()
            values["trajectories"] = [
                (GOLD_KIND if t.endpoint == GOLD_ENDPOINT.name else "sampled", t)
                for t in _trajectories(con, task.id)
            ]
            values["probes"] = con.execute(
                "select probe, endpoint, model, sample, outcome, score, passed, trajectory_id from probes "
                "where task_id = ? order by probe, endpoint, model, sample",
                [task.id],
            ).fetchall()
        return self.render("task.html", **values)

    async def source_page(self, request: Request) -> Response:
        source_id = request.path_params["source_id"]
        con = self.connection()
        source = con.execute(
            "select id, title, description, origin, url, license from sources where id = ? limit 1",
            [source_id],
        ).fetchone()
        if source is None:
            return self.render("missing.html", 404, what=f"no source {source_id!r} in the store")
        decisions = con.execute(
            "select rule, kept, reason, measured from filter_decisions where source_id = ? order by rule",
            [source_id],
        ).fetchall()
        framings = con.execute(
            "select framing, status, task_type, target_columns, confidence, evidence, checks, reason "
            "from framings where source_id = ? order by status, framing",
            [source_id],
        ).fetchall()
        tasks = con.execute(
            "select distinct id, family from tasks where source_id = ? and variant_of is null order by 2, 1",
            [source_id],
        ).fetchall()
        return self.render("source.html", source=source, decisions=decisions, framings=framings, tasks=tasks)

    async def release_list(self, request: Request) -> Response:
        return self.render("releases.html", releases=self.views.releases(), runs=data.runs(self.store))

    async def release_page(self, request: Request) -> Response:
        name, version = request.path_params["name"], request.path_params.get("version")
        release = self.views.release(name, version)
        if release is None:
            return self.render("missing.html", 404, what=f"no finished release {name} {version or ''}")
        return self.render(
            "release.html",
            release=release,
            splits=SPLITS,
            families=sorted({f for f, _ in release.counts}),
            report=self.store.exists(report_key(release.name, release.version)),
        )

    async def release_report(self, request: Request) -> Response:
        """The release's stored HTML report (`dareforge.publish.release_report`), under the same headers."""
        # Only a known finished version: no path from the request reaches the store.
        release = self.views.release(request.path_params["name"], request.path_params["version"])
        key = None if release is None else report_key(release.name, release.version)
        if key is None or not self.store.exists(key):
            return self.render("missing.html", 404, what="no such report: dareforge report writes one")
        return HTMLResponse(self.store.read_bytes(key), headers=SECURITY_HEADERS)

    async def run_list(self, request: Request) -> Response:
        return self.render("runs.html", runs=data.runs(self.store))

    async def post_review(self, request: Request) -> Response:
        task_id = request.path_params["task_id"]
        if not _same_origin(request):
            return Response("cross-origin review refused", status_code=403)
        form = await request.form()
        if not hmac.compare_digest(str(form.get("token", "")), self.token):
            return Response("review refused: the form's token is not this server's; reload the page", 403)
        try:
            task = reviews.load_task(self.store, task_id)
            if str(form.get("fingerprint", "")) != reviews.task_fingerprint(task):
                raise reviews.ReviewError(
                    "the task changed since this page was loaded; reload and review again"
                )
            review = reviews.new_review(
                task, str(form.get("reviewer", "")), str(form.get("decision", "")), str(form.get("note", ""))
            )
        except reviews.ReviewError as exc:
            return RedirectResponse(f"/task/{task_id}?{urlencode({'error': str(exc)})}", status_code=303)
        reviews.record(self.store, review)
        return RedirectResponse(f"/task/{task_id}#reviews", status_code=303)

    def _file(self, key: str, file: SourceFile) -> tuple[SourceFile, str, FileProfile | None]:
        return file, self._preview(key), self.profiles.of(key, file)

    def _preview(self, key: str) -> str:
        """The first lines of a stored file as text (bounded; undecodable bytes replaced)."""
        if not self.store.exists(key):
            return "(missing from the store)"
        with self.store.open(key) as fh:
            head = fh.read(PREVIEW_BYTES)
        return "\n".join(head.decode("utf-8", "replace").splitlines()[:PREVIEW_LINES])


SECURITY_HEADERS = {
    # Belt and braces behind autoescape: no inline or foreign script runs even if markup slipped through.
    "Content-Security-Policy": "default-src 'self'; script-src 'none'; object-src 'none'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def _dicts(result: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in result.description]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]


def _trajectories(con: duckdb.DuckDBPyConnection, task_id: str) -> list[Trajectory]:
    """The task's gold and sampled trajectories (probe runs are listed with the probes), gold first."""
    rows = _dicts(
        con.execute(
            "select * from (select distinct on (id) * from trajectories where task_id = ?) "
            "where id not in (select trajectory_id from probes where task_id = ?) "
            "order by endpoint <> ?, endpoint, model, sample",
            [task_id, task_id, GOLD_ENDPOINT.name],
        )
    )
    return [Trajectory.model_validate(r) for r in rows]


def _review(row: dict[str, Any]) -> Review:
    at = EPOCH + timedelta(microseconds=row.pop("at_us"))  # exact, unlike a float of seconds
    return Review.model_validate({**row, "at": at})


def _same_origin(request: Request) -> bool:
    """A browser's POST names its page's origin; it must be this server's (a missing header: no browser)."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin is None:
        return True  # not a browser; the token still has to match
    return urlsplit(origin).netloc == request.headers.get("host")


def make_app(store: Store, *, private: bool = False, token: str | None = None) -> Starlette:
    bench = Workbench(store, private, token)

    async def home(request: Request) -> Response:
        return RedirectResponse("/tasks", status_code=307)

    app = Starlette(
        routes=[
            Route("/", home),
            Route("/tasks", bench.task_list),
            Route("/task/{task_id}", bench.task_page),
            Route("/task/{task_id}/review", bench.post_review, methods=["POST"]),
            Route("/source/{source_id:path}", bench.source_page),
            Route("/releases", bench.release_list),
            Route("/release/{name}", bench.release_page),
            Route("/release/{name}/{version}", bench.release_page),
            Route("/release/{name}/{version}/report", bench.release_report),
            Route("/runs", bench.run_list),
        ]
    )
    app.state.workbench = bench
    return app


def details_text(details: str | None) -> str:
    """A finding's JSON details, pretty-printed for a <pre> (escaped by the template like any text)."""
    if not details:
        return ""
    try:
        return json.dumps(json.loads(details), indent=1)[:4000]
    except json.JSONDecodeError:
        return details[:4000]


def clip(text: str | None) -> str:
    """A replayed step's text, cut at STEP_CHARS with a note saying how much is left out."""
    if not text:
        return ""
    if len(text) <= STEP_CHARS:
        return text
    return f"{text[:STEP_CHARS]}\n... ({len(text) - STEP_CHARS} more characters)"
