"""The workbench's routes: task list, task page, source page, review form (see the package doc)."""

from __future__ import annotations

import hmac
import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import duckdb
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from dareforge import reviews
from dareforge.families.registry import REGISTERED, bar_of
from dareforge.schema import Review
from dareforge.store import Store

PAGE_SIZE = 50
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PREVIEW_LINES = 12
PREVIEW_BYTES = 8192
FILTERS = ("family", "verdict", "check", "source", "q")

TASK_LIST_SQL = """
select t.id, t.family, t.source_id, t.difficulty, left(t.instruction, 160) as opening,
       case when v.task_id is null then 'unjudged' when v.accepted then 'accepted' else 'rejected' end as verdict,
       coalesce(array_to_string(v.reasons, ' | '), '') as reasons
from (select distinct on (id) * from tasks where status = 'candidate' and variant_of is null) t
left join (select distinct on (task_id) * from verdicts) v on v.task_id = t.id
where (? is null or t.family = ?)
  and (? is null or t.source_id = ?)
  and (? is null or (case when v.task_id is null then 'unjudged' when v.accepted then 'accepted'
                          else 'rejected' end) = ?)
  and (? is null or len(list_filter(coalesce(v.reasons, []), lambda r: starts_with(r, ? || ':'))) > 0)
  and (? is null or contains(lower(t.instruction), lower(?)) or contains(t.id, ?))
"""


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

    def render(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        page = self.env.get_template(name).render(private=self.private, **values)
        return HTMLResponse(page, status_code=status, headers=SECURITY_HEADERS)

    def connect(self) -> duckdb.DuckDBPyConnection:
        return self.store.connect()

    # -- pages ------------------------------------------------------------------------------------------------
    async def task_list(self, request: Request) -> Response:
        chosen = {k: (request.query_params.get(k) or None) for k in FILTERS}
        asked = request.query_params.get("page") or "1"
        page = max(int(asked), 1) if asked.isdigit() else 1
        f = chosen
        params = [
            *(f["family"], f["family"]),
            *(f["source"], f["source"]),
            *(f["verdict"], f["verdict"]),
            *(f["check"], f["check"]),
            *(f["q"], f["q"], f["q"]),
        ]
        con = self.connect()
        total = con.execute(f"select count(*) from ({TASK_LIST_SQL})", params).fetchone()[0]
        rows = con.execute(
            f"{TASK_LIST_SQL} order by t.family, t.id limit {PAGE_SIZE} offset {(page - 1) * PAGE_SIZE}",
            params,
        ).fetchall()
        columns = ("id", "family", "source_id", "difficulty", "opening", "verdict", "reasons")
        families = [r[0] for r in con.execute("select distinct family from tasks order by 1").fetchall()]
        kept = {k: v for k, v in chosen.items() if v}
        return self.render(
            "tasks.html",
            tasks=[dict(zip(columns, r, strict=True)) for r in rows],
            total=total,
            page=page,
            pages=max((total + PAGE_SIZE - 1) // PAGE_SIZE, 1),
            chosen=chosen,
            families=families,
            query=lambda **change: urlencode({**kept, **change}),
        )

    async def task_page(self, request: Request) -> Response:
        task_id = request.path_params["task_id"]
        try:
            task = reviews.load_task(self.store, task_id)
        except reviews.ReviewError as exc:
            return self.render("missing.html", 404, what=str(exc))
        con = self.connect()
        family = REGISTERED.get(task.family)
        values: dict[str, Any] = {
            "task": task,
            "bar": bar_of(task) if family is not None else None,
            "public": [(f, self._preview(f"tasks/{task.id}/public/{f.name}")) for f in task.public_files],
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
            values["findings"] = con.execute(
                'select "check", score, flagged, reason, details from validations where task_id = ? order by 1',
                [task.id],
            ).fetchall()
            verdict = con.execute(
                "select accepted, reasons from verdicts where task_id = ? limit 1", [task.id]
            ).fetchone()
            values["verdict"] = verdict
        return self.render("task.html", **values)

    async def source_page(self, request: Request) -> Response:
        source_id = request.path_params["source_id"]
        con = self.connect()
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
