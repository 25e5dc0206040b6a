"""A local HTTP server that answers like the Hugging Face Hub API, for testing the real `huggingface_hub` client.

It implements only what `HfApi` sends for a dataset release (paths and JSON shapes read from the installed
huggingface_hub 2.x client):

- `POST /api/repos/create` (`{"name", "organization", "type", "visibility"}`; 409 when the repo exists);
- `GET /api/datasets/<repo>` (repo info, with `private`) and `GET .../revision/<rev>` (the same at a
  revision: asked when a commit would change nothing), `GET .../refs`, `GET .../commits/<rev>`,
  `GET .../tree/<rev>?recursive=...` (all commits are kept, so any tag's tree can be read back);
- `POST /api/validate-yaml` (README metadata check the client runs before a commit with `README.md`);
- `POST .../preupload/<rev>`: a file under 10 MiB is `regular` (its bytes go base64 in the commit payload) and
  carries the git blob oid of the same path at `<rev>`; a larger one is `lfs` and carries the sha256 of the
  same path's content (the LFS oid), so the client drops unchanged files as the Hub makes it do;
- Git LFS's basic transfer for `lfs` files: `POST /<type>/<repo>.git/info/lfs/objects/batch` answers an upload
  href per object not yet stored (none for one stored: the client skips it), `PUT` to that href stores the
  bytes once their sha256 and size match the oid. The Xet protocol is not implemented: a client talking to
  this server must set `HF_HUB_DISABLE_XET` (hf_xet, when installed, is otherwise used for `lfs` files);
- `POST .../commit/<rev>` (ndjson: header, `file`, `lfsFile` of a stored object, `deletedFile`,
  `deletedFolder`) and `POST .../tag/<rev>`.

Auth is by bearer token: `tokens` maps a token to `"write"` or `"read"`; an unknown or missing token gets 401
(as the Hub answers a bad token), a read token gets 403 on any write. Faults are scripted per endpoint name
(`create`, `info`, `refs`, `commits`, `tree`, `preupload`, `commit`, `tag`): an HTTP status, `"drop"` (close the
connection before handling) or `"lost"` (handle the request, then close without answering).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import socket
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

LFS_THRESHOLD = 10 * 1024 * 1024
GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"
REPO_PATH = re.compile(r"^/api/(?P<type>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)(?P<rest>/.*)?$")
LFS_BATCH = re.compile(
    r"^/(?:(?P<type>datasets|spaces)/)?(?P<ns>[^/]+)/(?P<name>[^/]+)\.git/info/lfs/objects/batch$"
)
LFS_OBJECT = re.compile(r"^/lfs-objects/(?P<oid>[0-9a-f]{64})$")


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    id: str
    title: str
    message: str
    parent: str | None
    tree: dict[str, bytes]
    added: dict[str, bytes]  # what the commit payload carried (file path -> bytes)
    deleted: list[str]
    date: str


@dataclass
class Repo:
    id: str
    type: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def resolve(self, rev: str) -> str | None:
        rev = unquote(rev)
        if rev in self.branches:
            return self.branches[rev]
        if rev in self.tags:
            return self.tags[rev]
        return rev if rev in self.commits else None

    def history(self, oid: str) -> list[Commit]:
        out = []
        while oid is not None:
            commit = self.commits[oid]
            out.append(commit)
            oid = commit.parent
        return out

    def add_commit(self, title: str, message: str, tree: dict[str, bytes], added, deleted) -> Commit:
        parent = self.branches.get("main")
        digest = hashlib.sha1(
            json.dumps(
                [parent, title, message, sorted((p, git_blob_oid(b)) for p, b in tree.items())]
            ).encode()
        ).hexdigest()
        commit = Commit(
            digest,
            title,
            message,
            parent,
            tree,
            added,
            deleted,
            datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        )
        self.commits[digest] = commit
        self.branches["main"] = digest
        return commit

    @property
    def head(self) -> Commit:
        return self.commits[self.branches["main"]]


class FakeHub:
    """The Hub's state plus a record of what it was sent; tests read `repos`, `requests` and `calls`."""

    def __init__(self, tokens: dict[str, str] | None = None, lfs_threshold: int = LFS_THRESHOLD):
        self.tokens = tokens if tokens is not None else {"hf_write": "write", "hf_read": "read"}
        self.lfs_threshold = lfs_threshold  # a file of this size or more goes by LFS (the Hub's is 10 MiB)
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}  # sha256 -> content: objects uploaded by LFS, shared by every repo
        self.faults: dict[str, list[int | str]] = defaultdict(list)
        self.calls: Counter = Counter()  # endpoint name -> requests received (faulted ones included)
        self.requests: list[tuple[str, str]] = []  # (method, path) in order
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def create(self, repo_id: str, private: bool, type_: str = "datasets") -> Repo:
        """A repo as the Hub makes one: an initial commit holding `.gitattributes`."""
        repo = Repo(repo_id, type_, private)
        repo.add_commit("initial commit", "", {".gitattributes": GITATTRIBUTES}, {}, [])
        self.repos[f"{type_}/{repo_id}"] = repo
        return repo

    def dataset(self, repo_id: str) -> Repo:
        return self.repos[f"datasets/{repo_id}"]

    def tree_at(self, repo_id: str, rev: str) -> dict[str, bytes]:
        repo = self.dataset(repo_id)
        return repo.commits[repo.resolve(rev)].tree

    def release_commits(self, repo_id: str) -> list[Commit]:
        """Commits made by clients (the repo's initial commit left out), oldest first."""
        return [c for c in reversed(self.dataset(repo_id).history(self.dataset(repo_id).branches["main"]))][
            1:
        ]


def _handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output clean
            pass

        # -- plumbing ---------------------------------------------------------------------------------------
        def _send(self, status: int, payload, headers: dict[str, str] | None = None):
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str, code: str | None = None):
            headers = {"X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            self._send(status, {"error": message}, headers)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":  # a streamed LFS upload
                parts = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(parts)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _drop(self):
            """Close the connection without (or instead of) an answer: the client sees it close."""
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        def _auth(self, write: bool) -> bool:
            header = self.headers.get("Authorization", "")
            token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else None
            scope = hub.tokens.get(token) if token else None
            if scope is None:
                self._error(401, "Invalid credentials in Authorization header")
                return False
            if write and scope != "write":
                self._error(
                    403, "You don't have the rights to write to this namespace: the token is read-only"
                )
                return False
            return True

        def _route(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            body = self._body() if method in {"POST", "PUT"} else b""
            path = url.path
            if path == "/api/repos/create":
                name, args = "create", ()
            elif m := LFS_BATCH.match(path):
                name, args = "lfs_batch", (f"{m['type'] or 'models'}/{m['ns']}/{m['name']}",)
            elif (m := LFS_OBJECT.match(path)) and method == "PUT":
                name, args = "lfs_upload", (m["oid"],)
            elif path == "/api/validate-yaml":
                name, args = "validate", ()
            elif m := REPO_PATH.match(path):
                rest = m["rest"] or ""
                name = rest.split("/")[1] if rest else "info"
                if name not in {"info", "revision", "refs", "commits", "tree", "preupload", "commit", "tag"}:
                    return self._error(404, f"no route {method} {path}")
                args = (
                    f"{m['type']}/{m['ns']}/{m['name']}",
                    rest.split("/", 2)[2] if rest.count("/") > 1 else "",
                )
            else:
                return self._error(404, f"no route {method} {path}")
            with hub.lock:
                hub.calls[name] += 1
                hub.requests.append((method, path))
                fault = hub.faults[name].pop(0) if hub.faults[name] else None
            if fault == "drop":
                return self._drop()
            if isinstance(fault, int):
                return self._error(fault, f"scripted fault {fault}")
            if fault == "lost":
                self.wfile = io.BytesIO()  # handled, but the answer goes nowhere
            with hub.lock:
                getattr(self, f"_{name}")(body, query, *args)
            if fault == "lost":
                self._drop()

        def do_GET(self):
            self._route("GET")

        def do_POST(self):
            self._route("POST")

        def do_PUT(self):
            self._route("PUT")

        # -- endpoints ----------------------------------------------------------------------------------------
        def _repo(self, key: str, write: bool) -> Repo | None:
            if not self._auth(write):
                return None
            repo = hub.repos.get(key)
            if repo is None:
                self._error(404, "Repository not found", "RepoNotFound")
            return repo

        def _create(self, body: bytes, query):
            if not self._auth(write=True):
                return
            payload = json.loads(body)
            repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else None
            type_ = f"{payload.get('type') or 'model'}s"
            if repo_id is None:
                return self._error(400, "organization (namespace) is required by this fake")
            url = f"{hub.url}/{type_}/{repo_id}" if type_ != "models" else f"{hub.url}/{repo_id}"
            if f"{type_}/{repo_id}" in hub.repos:
                return self._send(409, {"error": "You already created this repo", "url": url})
            hub.create(repo_id, payload.get("visibility") == "private", type_)
            self._send(200, {"url": url, "name": repo_id, "id": repo_id})

        def _validate(self, body: bytes, query):
            content = json.loads(body)["content"]
            errors = []
            if content.startswith("---\n"):
                try:
                    meta = yaml.safe_load(content[4:].split("\n---\n", 1)[0])
                    if not isinstance(meta, dict):
                        errors.append({"message": "metadata must be a YAML mapping"})
                except yaml.YAMLError as err:
                    errors.append({"message": f"invalid YAML: {err}"})
            self._send(400 if errors else 200, {"errors": errors, "warnings": []})

        def _info(self, body, query, key, rest):
            if repo := self._repo(key, write=False):
                self._send(200, {"id": repo.id, "private": repo.private, "sha": repo.branches["main"]})

        def _revision(self, body, query, key, rest):
            """Repo info at a revision: what the client asks when a commit would change nothing."""
            if repo := self._repo(key, write=False):
                if (oid := repo.resolve(rest)) is None:
                    return self._error(404, f"revision {rest} not found", "RevisionNotFound")
                self._send(200, {"id": repo.id, "private": repo.private, "sha": oid})

        def _refs(self, body, query, key, rest):
            if repo := self._repo(key, write=False):

                def ref(name, kind, oid):
                    return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": oid}

                self._send(
                    200,
                    {
                        "branches": [ref(n, "heads", o) for n, o in repo.branches.items()],
                        "converts": [],
                        "tags": [ref(n, "tags", o) for n, o in repo.tags.items()],
                    },
                )

        def _commits(self, body, query, key, rest):
            if repo := self._repo(key, write=False):
                oid = repo.resolve(rest)
                if oid is None:
                    return self._error(404, "Revision not found", "RevisionNotFound")
                self._send(
                    200,
                    [
                        {
                            "id": c.id,
                            "title": c.title,
                            "message": c.message,
                            "authors": [{"user": "dareforge-bot"}],
                            "date": c.date,
                        }
                        for c in repo.history(oid)
                    ],
                )

        def _tree(self, body, query, key, rest):
            if repo := self._repo(key, write=False):
                rev, _, sub = rest.partition("/")
                oid = repo.resolve(rev)
                if oid is None:
                    return self._error(404, "Revision not found", "RevisionNotFound")
                if sub:
                    return self._error(400, "this fake lists the whole tree only")
                recursive = query.get("recursive", "false").lower() in {"true", "1"}
                entries, folders = [], set()
                for path, data in sorted(repo.commits[oid].tree.items()):
                    parts = path.split("/")
                    if len(parts) > 1:
                        folders.add(parts[0])
                        if recursive:
                            folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
                    if recursive or len(parts) == 1:
                        entries.append(
                            {"type": "file", "path": path, "size": len(data), "oid": git_blob_oid(data)}
                        )
                entries += [
                    {"type": "directory", "path": f, "oid": "0" * 40, "size": 0} for f in sorted(folders)
                ]
                self._send(200, entries)

        def _preupload(self, body, query, key, rest):
            if repo := self._repo(key, write=True):
                oid = repo.resolve(rest)
                if oid is None:
                    return self._error(404, "Revision not found", "RevisionNotFound")
                tree = repo.commits[oid].tree
                files = []
                for f in json.loads(body)["files"]:
                    base64.b64decode(f["sample"], validate=True)
                    current = tree.get(f["path"])
                    lfs = f["size"] >= hub.lfs_threshold
                    oid = None
                    if current is not None:
                        oid = hashlib.sha256(current).hexdigest() if lfs else git_blob_oid(current)
                    files.append(
                        {
                            "path": f["path"],
                            "uploadMode": "lfs" if lfs else "regular",
                            "shouldIgnore": False,
                            "oid": oid,
                        }
                    )
                self._send(200, {"files": files, "commitOid": oid})

        def _commit(self, body, query, key, rest):
            repo = self._repo(key, write=True)
            if repo is None:
                return
            if unquote(rest) != "main":
                return self._error(400, "this fake commits to main only")
            if not self.headers.get("Content-Type", "").startswith("application/x-ndjson"):
                return self._error(400, "commit payload must be ndjson")
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            header = lines[0]
            if header["key"] != "header" or not header["value"].get("summary"):
                return self._error(400, "first ndjson line must be the commit header")
            if (parent := header["value"].get("parentCommit")) and parent != repo.branches["main"]:
                return self._error(412, "A commit has happened since. Please refresh and try again.")
            tree = dict(repo.head.tree)
            added, deleted = {}, []
            for line in lines[1:]:
                value = line["value"]
                if line["key"] == "file":
                    if value.get("encoding") != "base64":
                        return self._error(400, "file content must be base64")
                    data = base64.b64decode(value["content"])
                    if len(data) >= hub.lfs_threshold:
                        return self._error(400, f"{value['path']} must go through LFS")
                    tree[value["path"]] = added[value["path"]] = data
                elif line["key"] == "lfsFile":
                    data = hub.lfs.get(value["oid"])
                    if value.get("algo") != "sha256" or data is None or len(data) != value["size"]:
                        return self._error(
                            422, f"{value['path']}: LFS object {value['oid']} was not uploaded"
                        )
                    tree[value["path"]] = added[value["path"]] = data
                elif line["key"] == "deletedFile":
                    if value["path"] not in tree:
                        return self._error(404, "A file with this name doesn't exist", "EntryNotFound")
                    del tree[value["path"]]
                    deleted.append(value["path"])
                elif line["key"] == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    gone = [p for p in tree if p.startswith(prefix)]
                    for p in gone:
                        del tree[p]
                    deleted += gone
                else:
                    return self._error(400, f"this fake does not implement {line['key']!r}")
            commit = repo.add_commit(
                header["value"]["summary"], header["value"].get("description", ""), tree, added, deleted
            )
            prefix = "" if repo.type == "models" else f"/{repo.type}"
            self._send(
                200,
                {
                    "success": True,
                    "commitOid": commit.id,
                    "commitUrl": f"{hub.url}{prefix}/{repo.id}/commit/{commit.id}",
                    "pullRequestUrl": None,
                },
            )

        def _lfs_batch(self, body, query, key):
            if self._repo(key, write=True) is None:
                return
            request = json.loads(body)
            if request.get("operation") != "upload" or "basic" not in request.get("transfers", ["basic"]):
                return self._error(400, "this fake implements LFS uploads by the basic transfer only")
            objects = []
            for obj in request["objects"]:
                entry = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
                if obj["oid"] not in hub.lfs:
                    entry["actions"] = {
                        "upload": {"href": f"{hub.url}/lfs-objects/{obj['oid']}", "expires_in": 3600}
                    }
                objects.append(entry)
            self._send(200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

        def _lfs_upload(self, body, query, oid):
            if hashlib.sha256(body).hexdigest() != oid:
                return self._error(400, f"the uploaded bytes do not hash to {oid}")
            hub.lfs[oid] = body
            self._send(200, {})

        def _tag(self, body, query, key, rest):
            if repo := self._repo(key, write=True):
                oid = repo.resolve(rest)
                if oid is None:
                    return self._error(404, "Revision not found", "RevisionNotFound")
                tag = json.loads(body)["tag"]
                if tag in repo.tags:
                    return self._error(409, f"Tag {tag} already exists")
                repo.tags[tag] = oid
                self._send(200, {})

    return Handler
