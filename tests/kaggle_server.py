"""A local HTTP server that answers like the Kaggle API, for testing the real `kaggle` client at its boundary.

Responses are built with the kaggle package's own request/response models (kagglesdk), so their shapes are
the ones the client parses in production. Faults are scripted per path: HTTP status codes, HTML error pages,
and the 403 Kaggle sends before a competition's rules are accepted.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from collections import Counter, defaultdict
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kagglesdk.competitions.types.competition_api_service import (
    ApiCompetition,
    ApiDataFile,
    ApiGetLeaderboardResponse,
    ApiLeaderboardSubmission,
    ApiListCompetitionsResponse,
    ApiListDataFilesResponse,
)
from kagglesdk.datasets.types.dataset_api_service import ApiDataset, ApiListDatasetsResponse

RULES_403 = "You must accept this competition's rules before you'll be able to download files."
LAST_MODIFIED = "Wed, 01 Oct 2025 12:00:00 GMT"


def _dt(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None)


def make_zip(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in sorted(members.items()):
            info = zipfile.ZipInfo(name, date_time=(2025, 1, 1, 0, 0, 0))
            zf.writestr(info, text)
    return buffer.getvalue()


class ScriptedKaggle:
    """Holds the catalog the server answers with; tests mutate it to simulate Kaggle changing over time."""

    def __init__(self):
        self.competitions: dict[str, dict] = {}
        self.datasets: dict[str, dict] = {}
        self.blobs: dict[str, bytes] = {}
        self.faults: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
        self.calls: Counter = Counter()
        self.auth_headers: list[str] = []
        self.cut_after: dict[str, int] = {}  # blob name -> bytes to send before dropping the connection, once
        self.ranges: list[str] = []

    def add_competition(
        self, slug: str, files: dict[str, str], rules_accepted=True, leaderboard=True, **meta
    ):
        comp = ApiCompetition()
        comp.ref = f"https://www.kaggle.com/competitions/{slug}"
        comp.title = meta.pop("title", slug.replace("-", " ").title())
        comp.description = meta.pop("description", f"Predict things in {slug}.")
        comp.category = meta.pop("category", "Featured")
        comp.deadline = _dt(meta.pop("deadline", "2024-06-01T23:59:00Z"))
        comp.team_count = meta.pop("team_count", 1234)
        comp.evaluation_metric = meta.pop("evaluation_metric", "Accuracy")
        for key, value in meta.items():
            setattr(comp, key, value)
        self.competitions[slug] = {
            "model": comp,
            "files": files,
            "rules_accepted": rules_accepted,
            "leaderboard": leaderboard,
        }
        self.blobs[f"{slug}.zip"] = make_zip(files)

    def add_dataset(self, ref: str, files: dict[str, str], version: int = 1, **meta):
        ds = ApiDataset()
        ds.ref = ref
        ds.title = meta.pop("title", ref.split("/")[1].replace("-", " ").title())
        ds.subtitle = meta.pop("subtitle", "A dataset")
        ds.total_bytes = sum(len(v) for v in files.values())
        ds.last_updated = _dt(meta.pop("last_updated", "2025-03-01T10:00:00Z"))
        ds.license_name = meta.pop("license_name", "CC0: Public Domain")
        ds.current_version_number = version
        self.datasets[ref] = {"model": ds, "files": files}
        self.blobs[f"{ref.split('/')[1]}.zip"] = make_zip(files)


def _body(model_cls, **fields) -> bytes:
    obj = model_cls()
    for key, value in fields.items():
        setattr(obj, key, value)
    return obj.to_json().encode()


class Handler(BaseHTTPRequestHandler):
    kaggle: ScriptedKaggle
    page_size_cap = 2

    def log_message(self, *args):  # keep test output clean
        pass

    def _send(self, status: int, body: bytes, content_type="application/json", headers=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _fault(self) -> bool:
        faults = self.kaggle.faults.get(self.path)
        if faults:
            status, content_type, body = faults.pop(0)
            self._send(status, body.encode(), content_type)
            return True
        return False

    def do_POST(self):
        kaggle = self.kaggle
        kaggle.calls[self.path] += 1
        kaggle.auth_headers.append(self.headers.get("Authorization", ""))
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        if not self.headers.get("Authorization"):
            return self._send(401, b'{"code": 401, "message": "Unauthenticated"}')
        if self._fault():
            return None
        method = self.path.rsplit("/", 1)[-1]
        handler = getattr(self, f"_{method}", None)
        if handler is None:
            return self._send(404, json.dumps({"code": 404, "message": f"no {method}"}).encode())
        return handler(request)

    def _page(self, items: list, request: dict) -> tuple[list, str]:
        start = int(request.get("pageToken") or 0)
        size = min(int(request.get("pageSize") or 20), self.page_size_cap)
        token = str(start + size) if start + size < len(items) else ""
        return items[start : start + size], token

    def _ListCompetitions(self, request):
        items, token = self._page([c["model"] for _, c in sorted(self.kaggle.competitions.items())], request)
        self._send(200, _body(ApiListCompetitionsResponse, competitions=items, next_page_token=token))

    def _ListDataFiles(self, request):
        comp = self.kaggle.competitions[request["competitionName"]]
        files = []
        for name, text in sorted(comp["files"].items()):
            f = ApiDataFile()
            f.name, f.total_bytes, f.creation_date = name, len(text), _dt("2024-01-01T00:00:00Z")
            files.append(f)
        items, token = self._page(files, request)
        self._send(200, _body(ApiListDataFilesResponse, files=items, next_page_token=token))

    def _GetLeaderboard(self, request):
        comp = self.kaggle.competitions[request["competitionName"]]
        rows = []
        if comp["leaderboard"]:
            row = ApiLeaderboardSubmission()
            row.team_id, row.team_name, row.score = 1, "top team", "0.98765"
            rows.append(row)
        self._send(200, _body(ApiGetLeaderboardResponse, submissions=rows))

    def _DownloadDataFiles(self, request):
        slug = request["competitionName"]
        if not self.kaggle.competitions[slug]["rules_accepted"]:
            return self._send(403, json.dumps({"code": 403, "message": RULES_403}).encode())
        return self._send(302, b"", headers={"Location": f"/blobs/{slug}.zip"})

    def _ListDatasets(self, request):
        items, token = self._page([d["model"] for _, d in sorted(self.kaggle.datasets.items())], request)
        self._send(200, _body(ApiListDatasetsResponse, datasets=items, next_page_token=token))

    def _DownloadDataset(self, request):
        return self._send(302, b"", headers={"Location": f"/blobs/{request['datasetSlug']}.zip"})

    def do_GET(self):
        self.kaggle.calls[self.path] += 1
        if self._fault():
            return None
        name = self.path.removeprefix("/blobs/")
        blob = self.kaggle.blobs.get(name)
        if blob is None:
            return self._send(404, b"not found", "text/plain")
        headers = {
            "Accept-Ranges": "bytes",
            "Last-Modified": LAST_MODIFIED,
            "ETag": f'"{hashlib.sha256(blob).hexdigest()[:16]}"',
        }
        range_header = self.headers.get("Range")
        if name in self.kaggle.cut_after:
            cut = self.kaggle.cut_after.pop(name)
            self.send_response(200)
            for key, value in {
                **headers,
                "Content-Type": "application/zip",
                "Content-Length": str(len(blob)),
            }.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(blob[:cut])
            self.wfile.flush()
            self.close_connection = True
            return None
        if range_header:
            self.kaggle.ranges.append(range_header)
            start = int(range_header.removeprefix("bytes=").split("-")[0])
            headers["Content-Range"] = f"bytes {start}-{len(blob) - 1}/{len(blob)}"
            return self._send(206, blob[start:], "application/zip", headers)
        return self._send(200, blob, "application/zip", headers)


class KaggleServer:
    def __init__(self):
        self.kaggle = ScriptedKaggle()
        handler = type("BoundHandler", (Handler,), {"kaggle": self.kaggle})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> KaggleServer:
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
