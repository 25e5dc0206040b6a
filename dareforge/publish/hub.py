"""Hub target: push a finished release version to two Hugging Face dataset repos.

`HubTarget(namespace).publish(release)` puts the public half (`release.prefix`) in `<namespace>/<name>` and the
private half (`release.private_prefix`: answers, scores, specs) in `<namespace>/<name>-private`, created
private; it refuses to push to a `-private` repo that is not private. Repos are created when missing.

Each half of a version ends in ONE commit on `main` titled `dareforge release <name>@<version>` with the
manifest's sha256 in the description, then tagged `v<version>`: it holds `manifest.json` and deletes the files
of an older version that this one does not list, so the tree at the tag is exactly the version. Every file the
manifest lists is read from the store and checked against the manifest's sha256 before anything is sent. A
small version's files all go in that commit; a large one's (a whole-catalog release: 10,000 tasks, tens of
thousands of files, gigabytes) go first in part commits of at most `commit_bytes` and `commit_files` each,
titled `... (part i/n)`, because the client holds a commit's payload in memory (small files go inline,
base64) and the Hub takes large commits badly. The private half goes first, so a public version never exists
without its answers.

An SFT or RL export (`dareforge.exports`) has one public part and goes to `<namespace>/<name>` the same way,
titled `dareforge sft export <name>@<version>` (or `rl export`).

Idempotent: a repo whose tag `v<version>` exists is left alone ("already published"), after checking that the
tagged commit carries this manifest's sha256 (another build of the same version is an error: versions are
immutable). A commit made by a run that died before tagging is found by its title and sha and tagged, not
made again; part commits sent again send nothing (the Hub's preupload oids let the client drop unchanged
files, and a commit left empty is skipped).

Transient failures (HTTP 408/429/5xx, dropped connections, timeouts) are retried with exponential backoff
(`backoff_s`, doubling, `max_retries` times), one log line each; every step checks the Hub's state first, so a
retry never makes a second commit. Any other failure raises `HubPublishError` at once with the status, the repo
and the fix. Nothing in the store is ever written.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

from dareforge import __version__
from dareforge.errors import DareforgeError
from dareforge.publish.targets import Publishable, _copy_version
from dareforge.publish.versions import MANIFEST, Part
from dareforge.scratch import temp_root

log = logging.getLogger(__name__)

REPO_TYPE = "dataset"
KEEP = frozenset({".gitattributes"})  # the Hub's own file in every new repo
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
T = TypeVar("T")


class HubPublishError(DareforgeError):
    """A push to the Hub failed for a reason a person has to fix (or the Hub stayed down through the retries)."""

    def __init__(self, message: str, *, status: int | None = None, repo: str | None = None):
        super().__init__(message)
        self.status = status
        self.repo = repo


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection and timeout errors of whichever HTTP stack huggingface_hub uses (httpx2, httpx or requests)."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        import httpx2

        errors.append(httpx2.TransportError)
    except ImportError:
        pass
    try:
        import httpx

        errors.append(httpx.TransportError)
    except ImportError:
        pass
    try:
        import requests

        errors += [requests.ConnectionError, requests.Timeout]
    except ImportError:
        pass
    return tuple(errors)


TRANSPORT_ERRORS = _transport_errors()


def _status(err: BaseException) -> int | None:
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None)


def _transient(err: BaseException) -> str | None:
    """Why `err` is worth retrying, or None when it is not."""
    if isinstance(err, HfHubHTTPError):
        status = _status(err)
        return f"HTTP {status}" if status in TRANSIENT_STATUS else None
    if isinstance(err, TRANSPORT_ERRORS):
        return f"{type(err).__name__}: {err}".splitlines()[0]
    return None


@dataclass
class RepoPush:
    """What happened to one repo."""

    repo_id: str
    url: str
    private: bool
    status: str  # "published" or "already published"
    commit: str  # the commit the tag points at
    attempts: int = 1


@dataclass
class HubPush:
    name: str
    version: str
    tag: str
    repos: list[RepoPush] = field(default_factory=list)

    @property
    def urls(self) -> dict[str, str]:
        """`{"public": url, "private": url}`."""
        return {("private" if r.private else "public"): r.url for r in self.repos}

    @property
    def already_published(self) -> bool:
        return all(r.status == "already published" for r in self.repos)


def _manifest_sha(release: Publishable, part: Part) -> str:
    """What a Hub commit's message names a build by: the sha256 of the part's manifest.json."""
    return hashlib.sha256(release.store.read_bytes(f"{part.prefix}/{MANIFEST}")).hexdigest()


@dataclass
class _Half:
    name: str  # the repo name in the namespace
    private: bool
    folder: Path  # the staged copy: manifest files + manifest.json
    manifest: dict[str, Any]
    manifest_sha: str

    @property
    def paths(self) -> list[str]:
        return [*(e["name"] for e in self.manifest["files"]), MANIFEST]


@dataclass
class HubTarget:
    """Publishes to `<namespace>/<name>` and `<namespace>/<name>-private` on the Hub (or `endpoint`)."""

    namespace: str
    token: str | None = None  # None: HF_TOKEN, then huggingface_hub's own lookup (saved login)
    endpoint: str | None = None  # None: HF_ENDPOINT or https://huggingface.co
    max_retries: int = 4
    backoff_s: float = 2.0
    # File bytes per commit: the client holds about 4x a commit's inline bytes (base64, JSON, joined).
    commit_bytes: int = 64 * 2**20
    commit_files: int = 2_000  # files per commit

    def __post_init__(self) -> None:
        if not self.namespace or "/" in self.namespace:
            raise HubPublishError(
                f"Hub namespace {self.namespace!r} must be one user or organization name, without '/'"
            )
        if self.max_retries < 0 or self.backoff_s < 0:
            raise HubPublishError("max_retries and backoff_s must be >= 0")
        if self.commit_bytes < 1 or self.commit_files < 1:
            raise HubPublishError("commit_bytes and commit_files must be >= 1")
        self.api = HfApi(
            endpoint=self.endpoint, token=self.token, library_name="dareforge", library_version=__version__
        )

    def repo_id(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def repo_url(self, repo_id: str) -> str:
        return f"{self.api.endpoint.rstrip('/')}/datasets/{repo_id}"

    def publish(self, release: Publishable) -> str:
        """Push `release` (every part); returns the public repo's URL (`push` returns all and what happened)."""
        return self.push(release).urls["public"]

    def push(self, release: Publishable) -> HubPush:
        if self.token is None and not get_token():
            raise HubPublishError(
                f"no Hugging Face token: set HF_TOKEN to a token with write access to {self.namespace!r} "
                "(or run `hf auth login`, or pass HubTarget(token=...))"
            )
        tag = f"v{release.version}"
        result = HubPush(release.name, release.version, tag)
        result.repos = self._published(release, tag) or []
        if not result.repos:
            with tempfile.TemporaryDirectory(prefix="dareforge-hub-", dir=temp_root()) as tmp:
                # Stage (and checksum) every part before sending anything: a damaged release sends nothing.
                root = Path(tmp)
                halves = [
                    self._stage(release, part, root / f"part-{i}") for i, part in enumerate(release.parts())
                ]
                for half in halves:
                    result.repos.append(self._push_half(release, half, tag))
        for r in result.repos:
            log.info("hub: %s %s %s: %s (%s)", r.repo_id, tag, r.status, r.url, r.commit[:12])
        return result

    # -- internals --------------------------------------------------------------------------------------------
    def _published(self, release: Publishable, tag: str) -> list[RepoPush] | None:
        """Every part's repo when each already holds this build under `tag`, else None: asked before staging,
        which copies and checksums the whole version (4.6 GB for the whole catalog) only to send nothing."""
        repos = []
        for part in release.parts():
            repo_id = self.repo_id(part.name)
            manifest_sha = _manifest_sha(release, part)

            def tagged(
                repo_id: str = repo_id, part: Part = part, manifest_sha: str = manifest_sha
            ) -> str | None:
                try:
                    info = self.api.repo_info(repo_id, repo_type=REPO_TYPE)
                except RepositoryNotFoundError:
                    return None
                if part.private and info.private is not True:
                    return None  # the full push says why that is refused
                return self._tagged_commit(repo_id, tag, manifest_sha)

            commit, attempts = self._retrying(repo_id, tagged)
            if commit is None:
                return None
            repos.append(
                RepoPush(repo_id, self.repo_url(repo_id), part.private, "already published", commit, attempts)
            )
        return repos

    def _tagged_commit(self, repo_id: str, tag: str, manifest_sha: str) -> str | None:
        """The commit `tag` points at when it is this build's (its message holds `manifest_sha`), None when the
        repo has no such tag; a tag of another build is an error (versions are immutable)."""
        refs = self.api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
        if not any(t.name == tag for t in refs.tags):
            return None
        tagged = self.api.list_repo_commits(repo_id, repo_type=REPO_TYPE, revision=tag)[0]
        if manifest_sha not in f"{tagged.title}\n{tagged.message}":
            raise HubPublishError(
                f"{repo_id} tag {tag} points at commit {tagged.commit_id[:12]} ({tagged.title!r}), which is not "
                f"this build (manifest sha256 {manifest_sha[:12]}); versions are immutable, so delete that "
                "tag on the Hub by hand if it is stale",
                repo=repo_id,
            )
        return tagged.commit_id

    @staticmethod
    def _stage(release: Publishable, part: Part, dest: Path) -> _Half:
        manifest_sha = _manifest_sha(release, part)
        _copy_version(release.store, part.prefix, part.manifest, dest)
        return _Half(part.name, part.private, dest, part.manifest, manifest_sha)

    def _push_half(self, release: Publishable, half: _Half, tag: str) -> RepoPush:
        repo_id = self.repo_id(half.name)
        title = f"dareforge {release.kind} {release.name}@{release.version}"
        description = (
            f"manifest.json sha256: {half.manifest_sha}\n"
            f"{len(half.manifest['files'])} files; content fingerprint {half.manifest.get('content_fingerprint')}\n"
        )
        done: dict[str, Any] = {}

        def attempt() -> str:
            return self._ensure_version(repo_id, half, tag, title, description, done)

        commit, attempts = self._retrying(repo_id, attempt)
        status = "published" if done.get("changed") else "already published"
        return RepoPush(repo_id, self.repo_url(repo_id), half.private, status, commit, attempts)

    def _ensure_version(
        self, repo_id: str, half: _Half, tag: str, title: str, description: str, done: dict[str, Any]
    ) -> str:
        """One pass of the push; every step looks at the Hub first, so running it again is safe."""
        api = self.api
        try:
            info = api.repo_info(repo_id, repo_type=REPO_TYPE)
        except RepositoryNotFoundError:
            # Asking first keeps create_repo off its "exists but no create right" path (401/403), which
            # cannot parse a non-default endpoint's URL in huggingface_hub 2.x.
            api.create_repo(repo_id, repo_type=REPO_TYPE, private=half.private, exist_ok=True)
            info = api.repo_info(repo_id, repo_type=REPO_TYPE) if half.private else None
        if half.private and (info is None or info.private is not True):
            raise HubPublishError(
                f"{repo_id} exists and is public; it would hold the answers of the release. Make it private "
                "on the Hub (Settings -> visibility) or publish under another namespace",
                repo=repo_id,
            )
        tagged = self._tagged_commit(repo_id, tag, half.manifest_sha)
        if tagged is not None:
            return tagged
        commit = next(
            (
                c.commit_id
                for c in api.list_repo_commits(repo_id, repo_type=REPO_TYPE)
                if c.title == title and half.manifest_sha in c.message
            ),
            None,
        )
        if commit is None:
            wanted = set(half.paths)
            stale = [
                p
                for p in api.list_repo_files(repo_id, repo_type=REPO_TYPE)
                if p not in wanted and p not in KEEP
            ]
            *parts, last = self._batches(half)
            for i, paths in enumerate(parts, start=1):
                api.create_commit(
                    repo_id,
                    self._adds(half, paths),
                    commit_message=f"{title} (part {i}/{len(parts) + 1})",
                    commit_description=description,
                    repo_type=REPO_TYPE,
                )
            operations: list[Any] = [CommitOperationDelete(path_in_repo=p) for p in sorted(stale)]
            commit = api.create_commit(
                repo_id,
                operations + self._adds(half, last),
                commit_message=title,
                commit_description=description,
                repo_type=REPO_TYPE,
            ).oid
            done["changed"] = True
            log.info(
                "hub: %s: committed %d files in %d commit(s) (%d stale removed) as %s",
                repo_id,
                len(half.paths),
                len(parts) + 1,
                len(stale),
                commit[:12],
            )
        else:
            log.info("hub: %s: found untagged commit %s of this build; tagging it", repo_id, commit[:12])
        api.create_tag(
            repo_id, repo_type=REPO_TYPE, tag=tag, revision=commit, tag_message=title, exist_ok=True
        )
        done["changed"] = True
        return commit

    def _batches(self, half: _Half) -> list[list[str]]:
        """The half's paths in commits of at most `commit_bytes` (a larger file alone) and `commit_files` each;
        `manifest.json`, the last path, is in the last one."""
        batches: list[list[str]] = [[]]
        size = 0
        for path in half.paths:
            n = (half.folder / path).stat().st_size
            if batches[-1] and (size + n > self.commit_bytes or len(batches[-1]) >= self.commit_files):
                batches.append([])
                size = 0
            batches[-1].append(path)
            size += n
        return batches

    @staticmethod
    def _adds(half: _Half, paths: list[str]) -> list[Any]:
        return [CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(half.folder / p)) for p in paths]

    def _retrying(self, repo_id: str, fn: Callable[[], T]) -> tuple[T, int]:
        for attempt in range(self.max_retries + 1):
            try:
                return fn(), attempt + 1
            except DareforgeError:
                raise
            except (HfHubHTTPError, OfflineModeIsEnabled, ValueError, *TRANSPORT_ERRORS) as err:
                reason = _transient(err)
                if reason is None:
                    raise self._fatal(err, repo_id) from err
                if attempt == self.max_retries:
                    raise HubPublishError(
                        f"the Hub kept failing for {repo_id} ({reason}) after {attempt + 1} attempts; nothing "
                        "local was changed, so run the publish again later (it resumes where it stopped)",
                        status=_status(err),
                        repo=repo_id,
                    ) from err
                delay = self.backoff_s * 2**attempt
                log.warning(
                    "hub: %s: %s; retry %d/%d in %.3gs", repo_id, reason, attempt + 1, self.max_retries, delay
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _fatal(self, err: BaseException, repo_id: str) -> HubPublishError:
        if isinstance(err, OfflineModeIsEnabled):
            return HubPublishError(
                f"cannot publish {repo_id}: huggingface_hub is in offline mode; unset HF_HUB_OFFLINE",
                repo=repo_id,
            )
        status = _status(err)
        server = (getattr(err, "server_message", None) or str(err)).strip().splitlines()
        detail = f" (Hub said: {server[0]})" if server else ""
        write = f"set HF_TOKEN to a token with write access to {self.namespace!r}"
        fix = {
            401: f"the token was rejected; {write}",
            403: f"the token may not write to {self.namespace!r}; {write} (a write token of a member of the org)",
            404: f"check the namespace {self.namespace!r}, the endpoint {self.api.endpoint} and that the token's "
            "user can see the repo",
            409: "the repo changed meanwhile (or a tag or repo name clashes); run the publish again",
            412: "the repo changed meanwhile; run the publish again",
        }.get(status or 0, "see the Hub's message; nothing local was changed")
        where = f"HTTP {status}" if status else type(err).__name__
        return HubPublishError(
            f"publishing {repo_id} failed with {where}{detail}: {fix}", status=status, repo=repo_id
        )
