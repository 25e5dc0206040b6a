"""A local OpenAI-compatible HTTP server with scripted replies, for testing the real `openai` client.

It serves `POST /v1/chat/completions` and `GET /v1/models` on 127.0.0.1 (random port) from a thread, and
records every request it receives. What it answers is scripted, in this order of precedence:

1. queued faults (`fail_next`, `timeout_next`, `malformed_next`), one per request;
2. queued replies (`queue`), one per request;
3. rules (`on("substring", reply)`), the first whose substring occurs in the prompt;
4. the script (`script(fn_or_reply)`), a reply or a function of the request; the default echoes the last
   user message.

A reply is a string, a `Reply` (text, tool calls, finish reason, token counts, latency, or a raw body), or a
`Fault` (status + Retry-After, sleep past the client timeout, malformed body), so a script can fail some requests:

    with LLMServer(latency=0.05) as server:
        server.script(lambda request: "42" if "answer" in request.prompt else "no")
        server.fail_next(status=429, times=2, retry_after=0.05)
        client = openai.OpenAI(base_url=server.url, api_key="x")

Run `python -m tests.llm_server --latency 0.05` to serve from a separate process; it prints its URL.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "scripted-model"


@dataclass(frozen=True)
class Reply:
    """A successful completion. Token counts default to whitespace word counts of prompt and text (and tool
    call arguments). `tool_calls` are `{"name", "arguments"[, "id"]}` dicts, sent in the chat API's shape
    (arguments as given when a string, else as JSON text; ids `call_<serial>_<n>` unless given); the finish
    reason is then `tool_calls` unless another is given."""

    text: str | None = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency: float | None = None  # seconds before answering; None means the server's default latency
    raw: dict | None = None  # send this JSON body as-is instead of building one


@dataclass(frozen=True)
class Fault:
    """A failed request: an HTTP error status, a hang past the client timeout, or a malformed body."""

    status: int = 500
    message: str = "scripted failure"
    retry_after: float | None = None  # seconds, sent as the Retry-After header
    hang: float | None = None  # sleep this long, then answer normally (the client has given up by then)
    body: bytes | None = None  # sent with status 200 as application/json (invalid JSON, missing fields...)


@dataclass
class ChatRequest:
    """One request as the server received it."""

    body: dict[str, Any]
    headers: dict[str, str]  # names lower-cased
    received: float  # time.monotonic() when the body was read
    finished: float | None = None  # when the response was written (None while in flight or abandoned)
    outcome: str = ""  # "ok", "status 429", "hang", "malformed", ...

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def prompt(self) -> str:
        """All message texts joined by newlines (list-of-parts contents contribute their text parts)."""
        return "\n".join(_content_text(m.get("content")) for m in self.messages)

    @property
    def last_user(self) -> str:
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _content_text(message.get("content"))
        return ""

    @property
    def params(self) -> dict[str, Any]:
        """Everything but the messages: model, temperature, max_tokens, seed, response_format..."""
        return {k: v for k, v in self.body.items() if k != "messages"}


Answer = str | Reply | Fault
Script = Callable[[ChatRequest], Answer]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _words(text: str) -> int:
    return len(text.split())


class LLMServer:
    def __init__(self, latency: float = 0.0, model: str = MODEL):
        self.latency = latency
        self.model = model
        self.requests: list[ChatRequest] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._faults: deque[Fault] = deque()
        self._replies: deque[Answer] = deque()
        self._rules: list[tuple[str, Answer]] = []
        self._script: Script = lambda request: f"echo: {request.last_user}"
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._serial = 0

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self, port: int = 0) -> LLMServer:
        self._httpd = _HTTPServer(("127.0.0.1", port), _handler(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.02,), daemon=True, name="llm-server"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError(
                "the LLM test server is not running; call start() or use it as a context manager"
            )
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The base URL to give an OpenAI client (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting ------------------------------------------------------------------------------------------
    def script(self, answer: Answer | Script) -> LLMServer:
        """The fallback answer: a fixed reply, or a function of the `ChatRequest`."""
        self._script = answer if callable(answer) else (lambda request: answer)
        return self

    def on(self, contains: str, answer: Answer) -> LLMServer:
        """Answer `answer` to any request whose prompt contains `contains` (rules are tried in order)."""
        with self._lock:
            self._rules.append((contains, answer))
        return self

    def queue(self, *answers: Answer) -> LLMServer:
        """Answer the next requests with these, in order, before rules and script apply."""
        with self._lock:
            self._replies.extend(answers)
        return self

    def fail_next(
        self, status: int = 500, times: int = 1, retry_after: float | None = None, message: str | None = None
    ) -> LLMServer:
        fault = Fault(status=status, retry_after=retry_after, message=message or f"scripted HTTP {status}")
        with self._lock:
            self._faults.extend([fault] * times)
        return self

    def timeout_next(self, seconds: float = 2.0, times: int = 1) -> LLMServer:
        """Sleep `seconds` before answering the next requests (set it past the client's timeout)."""
        with self._lock:
            self._faults.extend([Fault(hang=seconds)] * times)
        return self

    def malformed_next(self, body: bytes | str = b"{not json", times: int = 1) -> LLMServer:
        """Answer 200 with this body: by default invalid JSON; `b'{"id": "x"}'` has no choices."""
        data = body.encode() if isinstance(body, str) else body
        with self._lock:
            self._faults.extend([Fault(status=200, body=data)] * times)
        return self

    def reset(self) -> LLMServer:
        """Forget recorded requests and every queued fault, reply and rule (the script is kept)."""
        with self._lock:
            self.requests.clear()
            self._faults.clear()
            self._replies.clear()
            self._rules.clear()
            self.max_in_flight = 0
        return self

    # -- observations ---------------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self.requests)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    # -- serving --------------------------------------------------------------------------------------------
    def _answer(self, request: ChatRequest) -> Answer:
        with self._lock:
            if self._faults:
                return self._faults.popleft()
            if self._replies:
                return self._replies.popleft()
            rules = list(self._rules)
        for contains, answer in rules:
            if contains in request.prompt:
                return answer
        return self._script(request)

    def _completion(self, request: ChatRequest, reply: Reply) -> dict[str, Any]:
        if reply.raw is not None:
            return reply.raw
        with self._lock:
            self._serial += 1
            serial = self._serial
        text = reply.text or ""
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.get("id", f"call_{serial}_{index}"),
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": call["arguments"]
                        if isinstance(call["arguments"], str)
                        else json.dumps(call["arguments"]),
                    },
                }
                for index, call in enumerate(reply.tool_calls)
            ]
            text += " " + " ".join(c["function"]["arguments"] for c in message["tool_calls"])
        finish_reason = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else _words(request.prompt)
        completion_tokens = reply.completion_tokens if reply.completion_tokens is not None else _words(text)
        return {
            "id": f"chatcmpl-{serial}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256  # the default backlog of 5 drops bursts of new connections


def _handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like real servers; every response has a Content-Length
        disable_nagle_algorithm = True  # else a small write can wait on a delayed ACK (~40 ms)
        wbufsize = 1 << 16  # headers and body leave in one write, at the flush

        def log_message(self, format, *args):  # quiet
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout): expected
                self.close_connection = True

        def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(obj).encode(), headers)

        def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
            kind = {429: "rate_limit_error", 401: "authentication_error"}.get(status, "invalid_request_error")
            if status >= 500:
                kind = "server_error"
            self._send_json(status, {"error": {"message": message, "type": kind, "code": None}}, headers)

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                model = {"id": server.model, "object": "model", "created": 0, "owned_by": "tests"}
                self._send_json(200, {"object": "list", "data": [model]})
            else:
                self._error(404, f"no route GET {self.path}")

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._error(404, f"no route POST {self.path}")
                return
            try:
                body = json.loads(raw)
            except json.JSONDecodeError:
                self._error(400, "request body is not JSON")
                return
            request = ChatRequest(
                body=body, headers={k.lower(): v for k, v in self.headers.items()}, received=time.monotonic()
            )
            with server._lock:
                server.requests.append(request)
                server._in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server._in_flight)
            try:
                self._serve(request)
            finally:
                with server._lock:
                    server._in_flight -= 1

        def _serve(self, request: ChatRequest) -> None:
            if request.body.get("stream"):
                request.outcome = "status 400"
                self._error(400, "the scripted server does not stream")
                request.finished = time.monotonic()
                return
            try:
                answer = server._answer(request)
            except Exception as exc:  # a broken script is a test bug: answer 500 and say which
                answer = Fault(status=500, message=f"script raised {type(exc).__name__}: {exc}")
            if isinstance(answer, str) or answer is None:
                answer = Reply(text=answer)
            if isinstance(answer, Fault):
                self._fault(request, answer)
            else:
                delay = server.latency if answer.latency is None else answer.latency
                if delay > 0:
                    time.sleep(delay)
                request.outcome = "ok"
                self._send_json(200, server._completion(request, answer))
            request.finished = time.monotonic()

        def _fault(self, request: ChatRequest, fault: Fault) -> None:
            if fault.hang is not None:
                request.outcome = "hang"
                time.sleep(fault.hang)
                self._send_json(200, server._completion(request, Reply(text="too late")))
            elif fault.body is not None:
                request.outcome = "malformed"
                self._send(200, fault.body)
            else:
                request.outcome = f"status {fault.status}"
                headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
                self._error(fault.status, fault.message, headers)

    return Handler


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Serve scripted OpenAI-compatible chat completions.")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = LLMServer(latency=args.latency).start(args.port)
    print(server.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
