"""The one LLM client (probe, agent, judge): an OpenAI-compatible endpoint behind a cache, limits and retries.

- Concurrency: at most `max_concurrency` requests in flight per client (per event loop).
- Rate: requests are spaced at least `60 / requests_per_minute` seconds apart (every HTTP attempt counts,
  retries included), shared by every loop and thread using the client.
- Retries: only transient failures (429, 5xx, 408, timeouts, connection errors), with exponential backoff from
  `backoff_s` (x 2 per attempt, capped at 60 s, plus jitter), or the server's `Retry-After` when it sends one
  (a server asking for more than 120 s is not retried), one log line per retry. Anything else (400,
  401, 403, 404, 422, a body that is not a chat completion) is returned at once as `ChatResult(error=...)`.
- Cache: every final answer whose outcome is a property of the request is stored: successes, request
  rejections (400/413/422...) and malformed responses, so a re-run returns the same thing without a request.
  Not stored: auth and not-found errors (fix the config, re-run) and transient errors that exhausted their
  retries (the next run should try again).
- Usage: per-client totals of calls, HTTP requests, retries, cache hits, errors and tokens (`client.usage`),
  written to `runs/<run_id>/llm-usage.json` by `write_usage()` or on leaving `async with client`.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import openai
from pydantic import BaseModel, ConfigDict

from dareforge.config import EndpointConfig, LLMConfig
from dareforge.errors import CredentialsError, DareforgeError
from dareforge.llm.cache import cache_key, read_entry, request_identity, write_entry
from dareforge.schema import ToolCall
from dareforge.store import Store

log = logging.getLogger("dareforge.llm")

MAX_BACKOFF_S = 60.0
MAX_RETRY_AFTER_S = 120.0  # a server asking for a longer wait (a daily quota) is not retried
USAGE_FILE = "llm-usage.json"

# Error kinds. Transient ones are retried; CACHED_ERRORS are stored like answers.
TRANSIENT_ERRORS = frozenset({"rate_limit", "server", "timeout", "connection"})
CACHED_ERRORS = frozenset({"bad_request", "malformed"})


class LLMError(DareforgeError):
    """An LLM batch exceeded its error budget, or the client was used in a way it cannot serve."""


class ChatResult(BaseModel):
    """One chat completion, or the error that ended it. `attempts` counts HTTP requests made by this call
    (0 for a cache hit); token counts are None when the server sent no usage. `tool_calls` are the reply's
    calls as sent (arguments unparsed: what they mean is the caller's business, malformed or not)."""

    model_config = ConfigDict(frozen=True)

    text: str = ""
    tool_calls: list[ToolCall] = []
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False
    error: str | None = None
    error_kind: str | None = None
    attempts: int = 0
    key: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


class Usage(BaseModel):
    """Totals for one endpoint. Tokens count fresh responses only (cache hits cost nothing)."""

    endpoint: str
    model: str
    calls: int = 0
    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class _Outcome:
    """How one HTTP attempt ended."""

    result: ChatResult | None = None  # a parsed answer (ok or malformed)
    response: Any = None  # the raw response JSON, kept in the cache entry
    kind: str | None = None
    message: str = ""
    retry_after: float | None = None


class RateLimiter:
    """Spaces acquisitions `60 / per_minute` seconds apart; thread-safe, so every loop shares one schedule."""

    def __init__(self, per_minute: float):
        if per_minute <= 0:
            raise LLMError(f"requests_per_minute must be positive, got {per_minute}; unset it for no limit")
        self.interval = 60.0 / per_minute
        self._next = 0.0
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take the next slot; returns how long to wait for it."""
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self.interval
            return slot - now

    async def wait(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)


@dataclass
class _LoopState:
    """What cannot cross event loops: the HTTP connection pool, the concurrency bound, per-key locks."""

    semaphore: asyncio.Semaphore
    api: openai.AsyncOpenAI | None = None  # made at the first request, so cache hits need no API key
    key_locks: dict[str, list] = field(default_factory=dict)  # key -> [asyncio.Lock, users]


def _retry_after(headers: Any) -> float | None:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date), None when absent."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            pass
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            parsed = email.utils.parsedate_to_datetime(value)
            return max(0.0, parsed.timestamp() - time.time())
    return None


def _status_kind(status: int) -> str:
    if status == 429:
        return "rate_limit"
    if status >= 500:
        return "server"
    if status == 408:
        return "timeout"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    return "bad_request"


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return str(message)[:500]
    return str(exc.message)[:500]


def _parse(text: str) -> _Outcome:
    """A raw response body -> a ChatResult, or a 'malformed' outcome naming what is wrong."""
    try:
        data = json.loads(text)
    except ValueError:
        return _Outcome(kind="malformed", message=f"response body is not JSON: {text[:200]!r}", response=text)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        detail = data.get("error") if isinstance(data, dict) and "error" in data else text[:200]
        return _Outcome(kind="malformed", message=f"response has no choices: {detail!r}", response=data)
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return _Outcome(kind="malformed", message="response choice has no message", response=data)
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return _Outcome(
            kind="malformed", message=f"message content is {type(content).__name__}", response=data
        )
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return _Outcome(kind="malformed", message=f"tool_calls is {type(calls).__name__}", response=data)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
    result = ChatResult(
        text=content or "",
        tool_calls=_tool_calls(calls or []),
        finish_reason=choices[0].get("finish_reason"),
        prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else None,
        completion_tokens=completion_tokens if isinstance(completion_tokens, int) else None,
    )
    return _Outcome(result=result, response=data)


def _tool_calls(calls: list[Any]) -> list[ToolCall]:
    """The calls of a reply with their raw arguments. A call the server sent without a function name or with
    arguments as an object (some servers do) is kept, not dropped: its text is what a format error must show.
    Missing or repeated ids get `call_<n>`, since every call needs its own id for its answer."""
    found: list[ToolCall] = []
    seen: set[str] = set()
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            name, arguments = function.get("name"), function.get("arguments")
        else:
            name, arguments = None, call
        if not isinstance(arguments, str):
            arguments = "" if arguments is None else json.dumps(arguments, ensure_ascii=False)
        call_id = call.get("id") if isinstance(call, dict) else None
        if not isinstance(call_id, str) or not call_id or call_id in seen:
            call_id = f"call_{index}"
        seen.add(call_id)
        found.append(ToolCall(id=call_id, name=name if isinstance(name, str) else "", arguments=arguments))
    return found


class LLMClient:
    """The client for one endpoint. Use `await chat(...)` in async code, `complete(...)` outside it."""

    def __init__(
        self, endpoint: EndpointConfig, store: Store | None, run_id: str | None = None, *, cache: bool = True
    ):
        if not endpoint.name or "/" in endpoint.name or endpoint.name.startswith("."):
            raise LLMError(f"endpoint name {endpoint.name!r} must be a plain folder name (it keys the cache)")
        if endpoint.max_concurrency < 1:
            raise LLMError(f"endpoint {endpoint.name}: max_concurrency must be at least 1")
        self.endpoint = endpoint
        self.store = store
        self.run_id = run_id
        self.caching = cache and store is not None
        self._limiter = RateLimiter(endpoint.requests_per_minute) if endpoint.requests_per_minute else None
        self._usage = Usage(endpoint=endpoint.name, model=endpoint.model)
        self._usage_lock = threading.Lock()
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )
        self._states_lock = threading.Lock()

    # -- public API -----------------------------------------------------------------------------------------
    @property
    def usage(self) -> Usage:
        """A snapshot of this client's totals."""
        with self._usage_lock:
            return self._usage.model_copy()

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
        response_format: dict[str, Any] | None = None,
        n_sample: int = 0,
        extra_body: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> ChatResult:
        """One completion. `n_sample` only keys the cache: K samples of one prompt at temperature > 0 are
        `n_sample=0..K-1` (pass distinct seeds too if the server honours `seed`). `extra_body` carries
        provider-specific parameters; `tools` and `tool_choice` are the chat API's; like every parameter they
        are part of the cache key."""
        params: dict[str, Any] = {
            "temperature": float(temperature),
            "max_tokens": max_tokens,
            "seed": seed,
            "response_format": response_format,
            "extra_body": extra_body,
        }
        # Only when given: requests without tools keep the cache keys they always had.
        params.update({k: v for k, v in (("tools", tools), ("tool_choice", tool_choice)) if v is not None})
        identity = request_identity(self.endpoint.base_url, self.endpoint.model, messages, params, n_sample)
        key = cache_key(identity)
        self._count(calls=1)
        if not self.caching:
            result, _ = await self._request(key, messages, params)
            self._count(errors=int(not result.ok))
            return result
        state = self._state()
        async with self._key_lock(state, key):  # identical concurrent calls: one request, the rest hit
            entry = await self._on_store(read_entry, self.store, self.endpoint.name, key)
            if entry is not None:
                result = ChatResult.model_validate(
                    {**entry["result"], "cached": True, "attempts": 0, "key": key}
                )
                self._count(cache_hits=1, errors=int(not result.ok))
                return result
            result, response = await self._request(key, messages, params)
            self._count(errors=int(not result.ok))
            if result.ok or result.error_kind in CACHED_ERRORS:
                entry = {
                    "key": key,
                    "endpoint": self.endpoint.name,
                    "request": identity,
                    "result": result.model_dump(exclude={"cached", "key"}),
                    "response": response,
                    "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                }
                await self._on_store(write_entry, self.store, self.endpoint.name, key, entry)
            return result

    async def sample(self, messages: list[dict[str, Any]], k: int, **params: Any) -> list[ChatResult]:
        """K samples of one prompt (`n_sample` 0..k-1), concurrently; give a temperature above 0."""
        return list(await asyncio.gather(*(self.chat(messages, n_sample=i, **params) for i in range(k))))

    def complete(self, messages: list[dict[str, Any]], **params: Any) -> ChatResult:
        """`chat` for callers outside asyncio (blocks; not allowed inside a running event loop)."""
        return self._run(self.chat(messages, **params))

    def complete_many(self, message_lists: Sequence[list[dict[str, Any]]], **params: Any) -> list[ChatResult]:
        """`gather_chats` for callers outside asyncio."""
        return self._run(gather_chats(self, message_lists, **params))

    def write_usage(self) -> str:
        """Merge this endpoint's totals into `runs/<run_id>/llm-usage.json`; returns the key written."""
        if self.store is None or not self.run_id:
            raise LLMError(f"endpoint {self.endpoint.name}: writing usage needs a store and a run_id")
        return write_usage(self.store, self.run_id, [self])

    async def aclose(self) -> None:
        """Close this event loop's connections (other loops' close when those loops are collected)."""
        loop = asyncio.get_running_loop()
        with self._states_lock:
            state = self._states.pop(loop, None)
        if state is not None and state.api is not None:
            await state.api.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
        # A run that asked nothing (every episode reused) leaves no usage file behind: re-runs write nothing.
        if self.store is not None and self.run_id and self.usage.calls:
            await asyncio.to_thread(self.write_usage)

    # -- internals ------------------------------------------------------------------------------------------
    def _count(self, **deltas: int) -> None:
        with self._usage_lock:
            for name, delta in deltas.items():
                setattr(self._usage, name, getattr(self._usage, name) + delta)

    def _api_key(self) -> str:
        env = self.endpoint.api_key_env
        if not env:
            return "not-needed"
        value = os.environ.get(env)
        if not value:
            raise CredentialsError(
                f"endpoint {self.endpoint.name}: environment variable {env} is empty or unset; export the API "
                f"key there, or drop api_key_env for a server that needs none"
            )
        return value

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        with self._states_lock:
            state = self._states.get(loop)
            if state is None:
                state = _LoopState(semaphore=asyncio.Semaphore(self.endpoint.max_concurrency))
                self._states[loop] = state
            return state

    def _api(self, state: _LoopState) -> openai.AsyncOpenAI:
        if state.api is None:
            state.api = openai.AsyncOpenAI(
                base_url=self.endpoint.base_url,
                api_key=self._api_key(),
                max_retries=0,  # retries are ours: classified, logged, counted
                timeout=self.endpoint.timeout_s,
            )
        return state.api

    async def _on_store(self, call: Callable[..., Any], *args: Any) -> Any:
        """A cache read or write: in place on a local store (one small file, about a millisecond; two hops to a
        thread and back cost ~10 ms a call in a busy engine), in a thread on a remote one."""
        if self.store.is_local:
            return call(*args)
        return await asyncio.to_thread(call, *args)

    @contextlib.asynccontextmanager
    async def _key_lock(self, state: _LoopState, key: str) -> AsyncIterator[None]:
        entry = state.key_locks.get(key)
        if entry is None:
            entry = state.key_locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del state.key_locks[key]

    async def _request(
        self, key: str, messages: list[dict[str, Any]], params: dict[str, Any]
    ) -> tuple[ChatResult, Any]:
        """Send the request, retrying transient failures; returns the final result and the raw response."""
        state = self._state()
        api = self._api(state)
        kwargs: dict[str, Any] = {"model": self.endpoint.model, "messages": messages}
        kwargs.update({k: v for k, v in params.items() if v is not None})
        budget = self.endpoint.max_retries + 1
        attempt = 0
        while True:
            attempt += 1
            async with state.semaphore:
                if self._limiter is not None:
                    await self._limiter.wait()
                self._count(requests=1)
                outcome = await self._attempt(api, kwargs)
            if outcome.result is not None:
                result = outcome.result.model_copy(update={"attempts": attempt, "key": key})
                self._count(
                    prompt_tokens=result.prompt_tokens or 0, completion_tokens=result.completion_tokens or 0
                )
                return result, outcome.response
            kind, why = outcome.kind or "unknown", outcome.message
            retry_after = outcome.retry_after
            if kind in TRANSIENT_ERRORS and retry_after is not None and retry_after > MAX_RETRY_AFTER_S:
                why = f"{why} (Retry-After {retry_after:.0f}s is longer than {MAX_RETRY_AFTER_S:.0f}s)"
            elif kind in TRANSIENT_ERRORS and attempt < budget:
                backoff = min(self.endpoint.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S)
                backoff *= random.uniform(1, 1.25)  # jitter: requests that failed together come back apart
                delay = retry_after if retry_after is not None else backoff
                source = "Retry-After" if retry_after is not None else "backoff"
                log.warning(
                    "llm %s: %s; retry %d/%d in %.2fs (%s)",
                    self.endpoint.name,
                    why,
                    attempt,
                    budget - 1,
                    delay,
                    source,
                )
                self._count(retries=1)
                await asyncio.sleep(delay)
                continue
            elif kind in TRANSIENT_ERRORS:
                why = f"{why} (gave up after {attempt} attempts)"
            result = ChatResult(error=why, error_kind=kind, attempts=attempt, key=key)
            return result, outcome.response

    async def _attempt(self, api: openai.AsyncOpenAI, kwargs: dict[str, Any]) -> _Outcome:
        try:
            raw = await api.chat.completions.with_raw_response.create(**kwargs)
            text = raw.http_response.text
        except openai.APIStatusError as exc:
            kind = _status_kind(exc.status_code)
            body = exc.body if isinstance(exc.body, dict | list | str) else None
            return _Outcome(
                kind=kind,
                message=f"HTTP {exc.status_code}: {_error_message(exc)}",
                retry_after=_retry_after(exc.response.headers),
                response=body,
            )
        except openai.APITimeoutError:
            return _Outcome(kind="timeout", message=f"no response within {self.endpoint.timeout_s:g}s")
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            return _Outcome(kind="connection", message=f"connection failed: {type(cause).__name__}: {cause}")
        except openai.APIError as exc:  # any other client-side failure: not retried, not cached
            return _Outcome(kind="client", message=f"{type(exc).__name__}: {exc}")
        return _parse(text)

    def _run(self, coroutine: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coroutine.close()
            raise LLMError("complete() blocks; inside a running event loop use `await client.chat(...)`")

        async def run_and_close() -> Any:
            try:
                return await coroutine
            finally:
                await self.aclose()

        return asyncio.run(run_and_close())


async def gather_chats(
    client: LLMClient,
    message_lists: Sequence[list[dict[str, Any]]],
    *,
    max_error_share: float | None = None,
    **params: Any,
) -> list[ChatResult]:
    """Run many chats concurrently (the client bounds concurrency and rate); results keep the input order.

    With `max_error_share`, raise `LLMError` when a larger share of the results are errors (an error budget).
    """
    results = list(await asyncio.gather(*(client.chat(m, **params) for m in message_lists)))
    failed = [r for r in results if not r.ok]
    if max_error_share is not None and results and len(failed) / len(results) > max_error_share:
        examples = "; ".join(sorted({r.error or "" for r in failed})[:3])
        raise LLMError(
            f"endpoint {client.endpoint.name}: {len(failed)}/{len(results)} chats failed, over the error budget "
            f"of {max_error_share:.0%} (e.g. {examples}); check the endpoint or raise the budget"
        )
    return results


def clients_from_config(
    llm: LLMConfig, store: Store | None, run_id: str | None = None
) -> dict[str, LLMClient]:
    """One client per configured endpoint, by name; `llm.cache` turns the request cache on or off."""
    return {e.name: LLMClient(e, store, run_id, cache=llm.cache) for e in llm.endpoints}


def write_usage(store: Store, run_id: str, clients: Sequence[LLMClient]) -> str:
    """Merge the clients' totals into `runs/<run_id>/llm-usage.json` (one entry per endpoint name)."""
    key = f"runs/{run_id}/{USAGE_FILE}"
    current: dict[str, Any] = {}
    if store.exists(key):
        with contextlib.suppress(ValueError):
            current = store.read_json(key)
    endpoints = dict(current.get("endpoints", {})) if isinstance(current, dict) else {}
    for client in clients:
        endpoints[client.endpoint.name] = client.usage.model_dump()
    totals = {
        name: sum(e.get(name, 0) for e in endpoints.values())
        for name in (
            "calls",
            "requests",
            "retries",
            "cache_hits",
            "errors",
            "prompt_tokens",
            "completion_tokens",
        )
    }
    store.write_json(key, {"run_id": run_id, "endpoints": endpoints, "totals": totals})
    return key
