"""The LLM client: the real `openai` client over real HTTP against the scripted server in tests/llm_server.py."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

from dareforge.config import EndpointConfig, LLMConfig
from dareforge.errors import CredentialsError
from dareforge.llm import (
    ChatResult,
    LLMClient,
    LLMError,
    RateLimiter,
    cache_path,
    clients_from_config,
    gather_chats,
)
from dareforge.store import Store
from tests.llm_server import Fault, LLMServer, Reply

HELLO = [{"role": "user", "content": "hello there"}]


def ask(text: str) -> list[dict]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


@pytest.fixture
def server():
    with LLMServer() as srv:
        yield srv


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(str(tmp_path / "store"))


@pytest.fixture
def make_client(server, store):
    def make(store=store, run_id=None, **overrides) -> LLMClient:
        fields = {"name": "local", "base_url": server.url, "model": "test-model", "backoff_s": 0.001}
        return LLMClient(EndpointConfig(**{**fields, **overrides}), store, run_id)

    return make


def test_plain_completion_with_token_counts(server, make_client, store):
    server.script(lambda request: Reply("forty-two", prompt_tokens=11, completion_tokens=3))
    result = make_client().complete(ask("the answer?"), max_tokens=20, seed=7)
    assert result == ChatResult(
        text="forty-two",
        finish_reason="stop",
        prompt_tokens=11,
        completion_tokens=3,
        attempts=1,
        key=result.key,
    )
    assert result.ok and not result.cached
    (request,) = server.requests
    assert request.body["model"] == "test-model"
    assert request.messages == ask("the answer?")
    assert request.params | {"temperature": 0.0, "max_tokens": 20, "seed": 7} == request.params
    entry = store.read_json(cache_path("local", result.key))
    assert entry["result"]["text"] == "forty-two"
    assert entry["request"]["messages"] == ask("the answer?")
    assert entry["response"]["usage"]["prompt_tokens"] == 11


def test_scripting_rules_queue_and_default_echo(server, make_client):
    server.on("capital", "Paris").queue("first", Reply("second", finish_reason="length"))
    client = make_client(store=None)
    assert client.complete(ask("anything")).text == "first"
    second = client.complete(ask("anything"))
    assert (second.text, second.finish_reason) == ("second", "length")
    assert client.complete(ask("the capital of France")).text == "Paris"
    assert client.complete(ask("ping")).text == "echo: ping"
    assert [r.outcome for r in server.requests] == ["ok"] * 4


def test_429_retried_honouring_retry_after(server, make_client, caplog):
    server.fail_next(status=429, retry_after=0.3)
    client = make_client()
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="dareforge.llm"):
        result = client.complete(HELLO)
    assert result.ok and result.text == "echo: hello there"
    assert result.attempts == 2 and server.count == 2
    assert time.monotonic() - start >= 0.3  # Retry-After, not the 1 ms backoff
    (line,) = [r.getMessage() for r in caplog.records]
    assert "HTTP 429" in line and "retry 1/4" in line and "Retry-After" in line
    assert client.usage.retries == 1 and client.usage.requests == 2


def test_500_retried_with_backoff(server, make_client):
    server.fail_next(status=500, times=2)
    result = make_client().complete(HELLO)
    assert result.ok and result.attempts == 3
    assert [r.outcome for r in server.requests] == ["status 500", "status 500", "ok"]


def test_exhausted_transient_error_is_returned_and_not_cached(server, make_client):
    server.fail_next(status=503, times=2)
    client = make_client(max_retries=1)
    failed = client.complete(HELLO)
    assert failed.error_kind == "server" and "HTTP 503" in failed.error and "gave up after 2" in failed.error
    again = client.complete(HELLO)  # the next run tries again instead of replaying the outage
    assert again.ok and not again.cached and server.count == 3


def test_retry_after_longer_than_the_cap_is_not_waited_for(server, make_client):
    server.fail_next(status=429, retry_after=3600)
    result = make_client().complete(HELLO)
    assert result.error_kind == "rate_limit" and "3600" in result.error and result.attempts == 1


def test_timeout_retried_then_success(server, make_client):
    server.timeout_next(seconds=1.5)
    result = make_client(timeout_s=0.3).complete(HELLO)
    assert result.ok and result.attempts == 2 and result.text == "echo: hello there"
    assert server.requests[0].outcome == "hang"


def test_connection_error_retried_then_returned(make_client):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = make_client(base_url=f"http://127.0.0.1:{port}/v1", max_retries=2)
    result = client.complete(HELLO)
    assert result.error_kind == "connection" and result.attempts == 3
    assert client.usage.requests == 3 and client.usage.errors == 1


def test_400_not_retried_returned_and_cached(server, make_client):
    server.fail_next(status=400, message="context length exceeded")
    client = make_client()
    result = client.complete(HELLO)
    assert result.error == "HTTP 400: context length exceeded"
    assert result.error_kind == "bad_request" and result.attempts == 1 and server.count == 1
    replay = client.complete(HELLO)  # a rejection is a property of the request: replayed from the cache
    assert replay.cached and replay.error == result.error and server.count == 1


@pytest.mark.parametrize("status", [401, 404])
def test_auth_and_not_found_are_not_retried_nor_cached(server, make_client, status):
    server.fail_next(status=status)
    client = make_client()
    result = client.complete(HELLO)
    assert result.attempts == 1 and result.error_kind == {401: "auth", 404: "not_found"}[status]
    assert client.complete(HELLO).ok and server.count == 2  # fixed config -> fresh request


@pytest.mark.parametrize(
    ("body", "says"),
    [(b"{not json", "not JSON"), (b'{"id": "x", "object": "chat.completion"}', "no choices")],
)
def test_malformed_body_is_an_error_not_a_crash(server, make_client, body, says):
    server.malformed_next(body)
    client = make_client()
    result = client.complete(HELLO)
    assert result.error_kind == "malformed" and says in result.error and result.attempts == 1
    assert client.complete(HELLO).cached and server.count == 1


def test_cache_hit_makes_no_request(server, make_client, store):
    first = make_client().complete(HELLO, temperature=0.7, n_sample=2)
    server.script("a different answer")
    second = make_client().complete(HELLO, temperature=0.7, n_sample=2)  # a new client, same store
    assert server.count == 1
    assert second.cached and second.text == first.text == "echo: hello there" and second.attempts == 0
    assert second.key == first.key
    assert store.exists(cache_path("local", first.key))


def test_any_parameter_or_sample_index_misses_the_cache(server, make_client):
    client = make_client()
    variants = [
        {},
        {"temperature": 0.5},
        {"max_tokens": 10},
        {"seed": 1},
        {"response_format": {"type": "json_object"}},
        {"n_sample": 1},
        {"extra_body": {"top_k": 5}},
        {"tools": TOOLS},
        {"tools": TOOLS, "tool_choice": "auto"},
    ]
    keys = {client.complete(HELLO, **params).key for params in variants}
    assert len(keys) == len(variants) == server.count
    assert server.requests[-1].body["tools"] == TOOLS and server.requests[-1].body["tool_choice"] == "auto"
    assert server.requests[6].body.get("top_k") == 5  # extra_body reaches the server
    assert server.requests[4].body["response_format"] == {"type": "json_object"}
    assert "n_sample" not in server.requests[5].body  # a cache-key dimension only
    client.complete(ask("hello there"))  # other messages
    make_client(model="other-model").complete(HELLO)
    assert server.count == len(variants) + 2
    assert client.usage.cache_hits == 0


TOOLS = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]


def test_tool_calls_are_read_with_their_raw_arguments_and_cached(server, make_client, store):
    calls = (
        {"name": "python", "arguments": '{"code": "print(1)"}', "id": "call_a"},
        {"name": "python", "arguments": '{"code": "print(2'},  # malformed: kept as sent
        {"name": "submit", "arguments": {"message": "done"}},  # an object, as some servers send
    )
    server.script(lambda request: Reply(text=None, tool_calls=calls) if "tools" in request.body else "plain")
    result = make_client().complete(HELLO, tools=TOOLS)
    assert result.ok and result.text == "" and result.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("python", '{"code": "print(1)"}'),
        ("python", '{"code": "print(2'),
        ("submit", '{"message": "done"}'),
    ]
    assert result.tool_calls[0].id == "call_a" and len({c.id for c in result.tool_calls}) == 3
    again = make_client().complete(HELLO, tools=TOOLS)
    assert again.cached and again.tool_calls == result.tool_calls and server.count == 1
    plain = make_client().complete(HELLO)  # without tools: another request, keyed as before tools existed
    assert (plain.text, plain.tool_calls, server.count) == ("plain", [], 2)
    assert "tools" not in store.read_json(cache_path("local", plain.key))["request"]["params"]


def test_a_call_without_a_function_is_kept_and_ids_are_made_unique(server, make_client):
    body = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "x", "oops": 1}, {"id": "x", "function": {"name": "python"}}],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    server.script(Reply(raw=body))
    result = make_client(store=None).complete(HELLO, tools=TOOLS)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("x", "", '{"id": "x", "oops": 1}'),
        ("call_1", "python", ""),
    ]
    server.script(Reply(raw={"choices": [{"message": {"role": "assistant", "tool_calls": "python"}}]}))
    bad = make_client(store=None).complete(HELLO, tools=TOOLS)
    assert bad.error_kind == "malformed" and "tool_calls is str" in bad.error


def test_samples_are_distinct_entries(server, make_client):
    counter = iter(range(100))
    server.script(lambda request: f"sample {next(counter)}")
    client = make_client()
    samples = asyncio.run(client.sample(HELLO, 3, temperature=1.0))
    assert sorted(s.text for s in samples) == ["sample 0", "sample 1", "sample 2"]
    again = asyncio.run(client.sample(HELLO, 3, temperature=1.0))
    assert [s.text for s in again] == [s.text for s in samples] and all(s.cached for s in again)


def test_no_store_means_no_cache(server, make_client):
    client = make_client(store=None)
    client.complete(HELLO)
    assert not client.complete(HELLO).cached and server.count == 2


def test_identical_concurrent_calls_make_one_request(server, make_client):
    server.latency = 0.1
    client = make_client()
    results = client.complete_many([HELLO] * 5)
    assert server.count == 1 and sum(r.cached for r in results) == 4
    assert {r.text for r in results} == {"echo: hello there"}


def test_concurrency_bound(server, make_client):
    server.latency = 0.1
    client = make_client(max_concurrency=3)
    results = client.complete_many([ask(f"q{i}") for i in range(12)])
    assert [r.text for r in results] == [f"echo: q{i}" for i in range(12)]  # input order kept
    assert server.max_in_flight == 3


def test_requests_per_minute_spacing(server, make_client):
    client = make_client(requests_per_minute=1200, max_concurrency=8)  # one request per 50 ms
    started = time.monotonic()  # the server runs in this process: its `received` is on the same clock
    client.complete_many([ask(f"q{i}") for i in range(6)])
    received = sorted(r.received for r in server.requests)
    # Request k is sent at its slot, k x 50 ms after the first; it may arrive later (a new connection's
    # set-up delays one and not the next, so gaps between arrivals say little), never sooner.
    assert all(at - started >= 0.05 * k - 0.005 for k, at in enumerate(received)), [
        round(at - started, 3) for at in received
    ]


def test_rate_limiter_schedule():
    limiter = RateLimiter(per_minute=600)
    waits = [limiter.reserve() for _ in range(4)]
    assert waits[0] == 0 and waits[3] == pytest.approx(0.3, abs=0.01)
    with pytest.raises(LLMError):
        RateLimiter(per_minute=0)


def test_usage_totals_written_per_run(server, make_client, store):
    server.script(lambda request: Reply("ok", prompt_tokens=10, completion_tokens=2))
    client = make_client(run_id="run-1")
    client.complete(ask("a"))
    client.complete(ask("a"))  # hit: no tokens spent
    server.fail_next(status=429, retry_after=0.01)
    client.complete(ask("b"))
    server.fail_next(status=400)
    client.complete(ask("c"))
    expected = {
        "endpoint": "local",
        "model": "test-model",
        "calls": 4,
        "requests": 4,
        "retries": 1,
        "cache_hits": 1,
        "errors": 1,
        "prompt_tokens": 20,
        "completion_tokens": 4,
    }
    assert client.usage.model_dump() == expected
    other = make_client(run_id="run-1", name="judge")

    async def judge():
        async with other:  # leaving the block writes usage, merged with the other endpoint's
            await other.chat(ask("d"))

    client.write_usage()
    asyncio.run(judge())
    written = store.read_json("runs/run-1/llm-usage.json")
    assert written["endpoints"]["local"] == expected
    assert written["endpoints"]["judge"]["calls"] == 1
    assert written["totals"]["calls"] == 5 and written["totals"]["prompt_tokens"] == 30


def test_error_budget(server, make_client):
    server.script(lambda request: Fault(status=400) if "bad" in request.prompt else "fine")
    client = make_client()
    prompts = [ask("bad 1"), ask("good"), ask("bad 2")]
    results = asyncio.run(gather_chats(client, prompts, max_error_share=0.7))
    assert [r.ok for r in results] == [False, True, False]
    with pytest.raises(LLMError, match="2/3 chats failed"):
        asyncio.run(gather_chats(client, prompts, max_error_share=0.5))


def test_api_key_from_env_and_cache_hits_need_none(server, make_client, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "sk-test")
    assert make_client(api_key_env="TEST_LLM_KEY").complete(HELLO).ok
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"
    monkeypatch.delenv("TEST_LLM_KEY")
    keyless = make_client(api_key_env="TEST_LLM_KEY")
    assert keyless.complete(HELLO).cached  # replaying the cache offline needs no credentials
    with pytest.raises(CredentialsError, match="TEST_LLM_KEY"):
        keyless.complete(ask("new question"))


def test_unreadable_cache_entry_is_a_miss(server, make_client, store):
    client = make_client()
    key = client.complete(HELLO).key
    store.write_bytes(cache_path("local", key), b"{truncated")
    assert not client.complete(HELLO).cached and server.count == 2
    assert client.complete(HELLO).cached


def test_sync_helper_refuses_a_running_loop(make_client):
    client = make_client()

    async def inside():
        client.complete(HELLO)

    with pytest.raises(LLMError, match=r"await client\.chat"):
        asyncio.run(inside())


def test_clients_from_config(server, store):
    endpoint = EndpointConfig(name="a", base_url=server.url, model="m")
    clients = clients_from_config(LLMConfig(endpoints=[endpoint], cache=False), store, "r")
    assert list(clients) == ["a"] and not clients["a"].caching
    with pytest.raises(LLMError, match="plain folder name"):
        LLMClient(EndpointConfig(name="a/b", base_url=server.url, model="m"), store)


def test_models_route(server):
    import openai

    models = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0).models.list()
    assert [m.id for m in models.data] == ["scripted-model"]
    assert server.count == 0  # only chat completions are recorded
