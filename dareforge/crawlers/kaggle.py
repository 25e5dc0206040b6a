"""Kaggle competitions and datasets through the official `kaggle` package.

Listing is cheap and incremental: a competition's version fingerprints its data-file listing (names, sizes,
creation dates) and a dataset's its version number and update time, so an unchanged source is never
downloaded again. Every API call is throttled and retried only on errors known to be transient (429, 5xx,
dropped connections, timeouts). The 403 Kaggle sends before a competition's rules are accepted becomes a
`needs-rules` status with the page to visit, not a crash.

The dict-to-`Source` functions here take Kaggle's own JSON shapes; the mirror crawler reuses them.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import requests

from dareforge.config import KaggleConfig
from dareforge.crawlers.crawler import source_id
from dareforge.errors import CredentialsError, NeedsRulesError, SourceError, TransientError
from dareforge.hashing import fingerprint
from dareforge.schema import Origin, Source, SourceStatus

log = logging.getLogger(__name__)
T = TypeVar("T")
WEB = "https://www.kaggle.com"
TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


# -- Kaggle JSON -> Source ----------------------------------------------------------------------------------
def _slug(ref: str) -> str:
    return ref.rstrip("/").split("/")[-1]


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _tag_names(tags: Any) -> list[str]:
    return sorted(
        {(t.get("name") or t.get("ref") or "") if isinstance(t, dict) else str(t) for t in tags or []} - {""}
    )


def competition_source(
    meta: dict[str, Any], files: list[dict[str, Any]], origin: Origin, leaderboard: bool | None
) -> Source:
    """A competition in the shape of the API's ApiCompetition (camelCase) plus its ApiDataFile list."""
    slug = _slug(meta["ref"])
    listing = sorted(
        (f["name"], int(f.get("totalBytes") or 0), str(f.get("creationDate") or "")) for f in files
    )
    return Source(
        id=source_id(origin.value, slug),
        origin=origin,
        kind="competition",
        ref=slug,
        title=meta.get("title") or slug,
        description=meta.get("description") or "",
        category=meta.get("category"),
        url=meta.get("url") or f"{WEB}/competitions/{slug}",
        deadline=_time(meta.get("deadline")),
        last_updated=_time(meta.get("enabledDate") or meta.get("dateCreated")),
        evaluation_metric=meta.get("evaluationMetric"),
        license=meta.get("license") or f"competition rules: {WEB}/competitions/{slug}/rules",
        total_bytes=sum(size for _, size, _ in listing),
        tags=_tag_names(meta.get("tags")),
        team_count=meta.get("teamCount"),
        has_leaderboard=leaderboard,
        accepts_submissions=not (meta.get("submissionsDisabled") or meta.get("isKernelsSubmissionsOnly")),
        version=fingerprint("competition", slug, listing),
    )


def dataset_source(meta: dict[str, Any], origin: Origin) -> Source:
    """A dataset as the API's ApiDataset or as the `dataset-metadata.json` that `kaggle datasets metadata` writes."""
    ref = meta.get("ref") or meta.get("id")
    if not ref or "/" not in str(ref):
        raise SourceError(f"dataset metadata has no 'ref' or 'id' of the form owner/name: {sorted(meta)}")
    ref = "/".join(str(ref).rstrip("/").split("/")[-2:])
    licenses = meta.get("licenses") or []
    license_name = meta.get("licenseName") or ", ".join(
        str(lic.get("name")) for lic in licenses if isinstance(lic, dict)
    )
    updated = _time(meta.get("lastUpdated"))
    return Source(
        id=source_id(origin.value, ref),
        origin=origin,
        kind="dataset",
        ref=ref,
        title=meta.get("title") or ref,
        description="\n\n".join(p for p in (meta.get("subtitle"), meta.get("description")) if p),
        category="dataset",
        url=meta.get("url") or f"{WEB}/datasets/{ref}",
        last_updated=updated,
        license=license_name or None,
        total_bytes=int(meta.get("totalBytes") or 0),
        tags=_tag_names(meta.get("tags") or meta.get("keywords")),
        version=fingerprint("dataset", ref, meta.get("currentVersionNumber"), updated),
    )


# -- the client ---------------------------------------------------------------------------------------------
def find_credentials(environ: dict[str, str] | None = None) -> str:
    """Where Kaggle credentials come from; raises a CredentialsError that says how to provide them."""
    environ = dict(os.environ if environ is None else environ)
    if environ.get("KAGGLE_USERNAME") and environ.get("KAGGLE_KEY"):
        return "KAGGLE_USERNAME/KAGGLE_KEY"
    if environ.get("KAGGLE_API_TOKEN"):
        return "KAGGLE_API_TOKEN"
    config_dir = Path(environ.get("KAGGLE_CONFIG_DIR") or Path.home() / ".kaggle")
    path = config_dir / "kaggle.json"
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise CredentialsError(
                f"{path} is not valid JSON ({exc}); download a fresh token from {WEB}/settings"
            ) from exc
        if data.get("username") and data.get("key"):
            return str(path)
        raise CredentialsError(
            f"{path} lacks 'username' and 'key'; download a fresh token from {WEB}/settings"
        )
    raise CredentialsError(
        "Kaggle credentials not found: set KAGGLE_USERNAME and KAGGLE_KEY, or save the token from "
        f"{WEB}/settings (API -> Create New Token) as {path} with mode 600"
    )


def make_api(endpoint: str | None):
    """An authenticated KaggleApi; `endpoint` points it at another base URL (a proxy or a test server)."""
    from kaggle.api.kaggle_api_extended import KaggleApi

    class _Api(KaggleApi):
        def build_kaggle_client(self):
            client = super().build_kaggle_client()
            if endpoint:
                client.http_client()._endpoint = endpoint.rstrip("/")
            return client

    api = _Api()
    api.authenticate()
    return api


class KaggleCrawler:
    name = "kaggle"

    def __init__(self, config: KaggleConfig, api: Any = None, sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self._api = api
        self._sleep = sleep
        self._last_call = 0.0

    @property
    def api(self):
        if self._api is None:
            find_credentials()
            self._api = make_api(self.config.endpoint)
        return self._api

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Throttle, then call; retry only transient failures, with exponential backoff."""
        for attempt in range(self.config.max_retries + 1):
            wait = self.config.min_request_interval_s - (time.monotonic() - self._last_call)
            if wait > 0:
                self._sleep(wait)
            self._last_call = time.monotonic()
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                error = classify(what, exc)
                if not isinstance(error, TransientError) or attempt == self.config.max_retries:
                    raise error from exc
                delay = self.config.backoff_s * 2**attempt
                log.warning(
                    "%s: %s; retry %d/%d in %.1fs", what, error, attempt + 1, self.config.max_retries, delay
                )
                self._sleep(delay)
        raise AssertionError("unreachable")

    # -- listing --------------------------------------------------------------------------------------------
    def list_sources(self) -> Iterator[Source]:
        seen: set[str] = set()
        for category in self.config.competition_categories:
            for comp in self._pages(
                f"list competitions ({category})",
                lambda token, category=category: self.api.competitions_list(
                    category=category,
                    search=self.config.competition_search,
                    page_size=self.config.page_size,
                    page_token=token,
                ),
                "competitions",
            ):
                slug = _slug(comp["ref"])
                if slug not in seen:
                    seen.add(slug)
                    yield self._competition(comp)
        for query in self.config.datasets:
            for ds in self._pages(
                f"list datasets ({query.search or query.tag_ids or 'all'})",
                lambda token, q=query: self.api.dataset_list_with_response(
                    sort_by=q.sort_by,
                    file_type=q.file_type,
                    license_name=q.license_name,
                    tag_ids=q.tag_ids,
                    search=q.search,
                    max_size=q.max_size_bytes,
                    page_size=self.config.page_size,
                    page_token=token,
                ),
                "datasets",
            ):
                source = dataset_source(ds, Origin.KAGGLE_DATASET)
                if source.ref not in seen:
                    seen.add(source.ref)
                    yield source

    def _pages(self, what: str, fetch: Callable[[str | None], Any], field: str) -> Iterator[dict[str, Any]]:
        token: str | None = None
        for _ in range(self.config.max_pages):
            response = self.call(what, fetch, token)
            body = type(response).to_dict(response)
            yield from body.get(field) or []
            token = body.get("nextPageToken")
            if not token:
                return
        log.warning("%s: stopped after kaggle.max_pages=%d pages", what, self.config.max_pages)

    def _competition(self, comp: dict[str, Any]) -> Source:
        slug = _slug(comp["ref"])
        try:
            files = list(
                self._pages(
                    f"list files of {slug}",
                    lambda token: self.api.competition_list_files(slug, page_token=token, page_size=200),
                    "files",
                )
            )
        except SourceError as exc:
            # One competition's broken listing fails that competition only; the crawl records it and goes on.
            failed = competition_source(comp, [], Origin.KAGGLE_COMPETITION, None)
            return failed.model_copy(update={"status": SourceStatus.FAILED, "status_detail": str(exc)})
        return competition_source(comp, files, Origin.KAGGLE_COMPETITION, self._has_leaderboard(slug))

    def _has_leaderboard(self, slug: str) -> bool | None:
        if not self.config.fetch_leaderboard:
            return None
        try:
            rows = self.call(
                f"leaderboard of {slug}", self.api.competition_leaderboard_view, slug, page_size=1
            )
        except SourceError:
            return False
        return bool(rows)

    # -- download -------------------------------------------------------------------------------------------
    def download(self, source: Source, dest: Path) -> dict[str, Any]:
        dest.mkdir(parents=True, exist_ok=True)
        fetch = (
            self.api.competition_download_files
            if source.kind == "competition"
            else self.api.dataset_download_files
        )
        chatter = io.StringIO()
        # The client prints URLs and progress to stdout even when quiet; keep our own output readable.
        with contextlib.redirect_stdout(chatter):
            self.call(f"download {source.ref}", fetch, source.ref, path=str(dest), quiet=True)
        log.debug("%s: kaggle client said: %s", source.id, chatter.getvalue().strip())
        if source.kind == "competition" and source.has_leaderboard:
            return {"leaderboard": self._leaderboard(source.ref)}
        return {}

    def _leaderboard(self, slug: str) -> list[dict[str, Any]]:
        with contextlib.redirect_stdout(io.StringIO()):
            rows = self.call(
                f"leaderboard of {slug}",
                self.api.competition_leaderboard_view,
                slug,
                page_size=self.config.leaderboard_rows,
            )
        entries = [type(row).to_dict(row) for row in rows or []]
        return [
            {
                "team": e.get("teamName", ""),
                "score": str(e.get("score", "")),
                "submitted": e.get("submissionDate"),
            }
            for e in entries
        ]


def classify(what: str, exc: Exception) -> Exception:
    """Turn a client exception into TransientError (retry), NeedsRulesError, CredentialsError or SourceError."""
    if isinstance(exc, TransientError | SourceError | CredentialsError):
        return exc
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        status = exc.response.status_code
        message = _error_message(exc.response) or str(exc)
        if status in TRANSIENT_STATUS:
            return TransientError(f"{what}: HTTP {status} {message}")
        if status == 401:
            return CredentialsError(
                f"{what}: Kaggle rejected the credentials (401); create a new API token at {WEB}/settings"
            )
        if status == 403 and "rules" in message.lower():
            slug = what.split()[-1]
            url = f"{WEB}/competitions/{slug}/rules"
            return NeedsRulesError(f"{what}: {message}; accept the rules at {url}, then re-crawl", url)
        return SourceError(f"{what}: HTTP {status} {message}")
    if isinstance(exc, requests.ConnectionError | requests.Timeout):
        return TransientError(f"{what}: {type(exc).__name__}: {exc}")
    if isinstance(exc, json.JSONDecodeError | ValueError):
        return SourceError(
            f"{what}: Kaggle answered with something that is not the expected JSON ({exc}); "
            "check the API status and any proxy in between"
        )
    return SourceError(f"{what}: {type(exc).__name__}: {exc}")


def _error_message(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        return (
            text[:200] if text and not text.lstrip().startswith("<") else f"(an HTML page, {len(text)} bytes)"
        )
    return str(body.get("message") or body.get("error") or "") if isinstance(body, dict) else str(body)[:200]
