"""A small OpenAI-compatible chat-completions server over a transformers model (and a LoRA adapter):
`python -m dareforge.teach.serve --model FOLDER [--adapter FOLDER] --name NAME --port N`.

Runs in `.venv-teach`. It serves what `dareforge evaluate` sends with the `tools` protocol: `messages` (system,
user, assistant with `tool_calls`, tool), `tools`, `temperature`, `max_tokens`, `seed`. The chat is rendered
with the same template the adapter was trained with; the reply's `<tool_call>{"name", "arguments"}</tool_call>`
blocks become `tool_calls` (arguments as JSON text, as the API has them) and the text around them `content`.
One request at a time (a 2-core CPU gains nothing from more); greedy at temperature 0, else seeded sampling.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def parse_reply(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) of a generated reply; a call whose JSON does not parse is kept as its raw text in
    `arguments` under the name `unparsed`, so the agent loop answers it with what is wrong."""
    calls = []
    for i, match in enumerate(CALL.finditer(text)):
        raw = match.group(1).strip()
        try:
            body = json.loads(raw)
            name, arguments = str(body.get("name", "")), body.get("arguments", {})
        except (ValueError, AttributeError):
            name, arguments = "unparsed", raw
        calls.append(
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    content = CALL.sub("", text).strip() if calls else text.strip()
    return (content or None), calls


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The API's messages as the training rows hold them: content text, call arguments a mapping."""
    out = []
    for m in messages:
        turn = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            turn["tool_calls"] = []
            for c in m["tool_calls"]:
                arguments = c["function"].get("arguments", "{}")
                with contextlib.suppress(ValueError):
                    arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                turn["tool_calls"].append({**c, "function": {**c["function"], "arguments": arguments}})
        if m.get("tool_call_id"):
            turn["tool_call_id"] = m["tool_call_id"]
        out.append(turn)
    return out


class Model:
    def __init__(self, args: argparse.Namespace):
        import torch

        from dareforge.teach.model import load

        torch.set_num_threads(args.threads)
        self.torch = torch
        self.name = args.name
        self.max_context = args.max_context
        self.model, self.tokenizer = load(args.model, args.template, args.device, args.adapter, args.dtype)
        self.device = args.device
        self.lock = threading.Lock()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = self.tokenizer.apply_chat_template(
            template_messages(body["messages"]),
            tools=body.get("tools") or None,
            add_generation_prompt=True,
            return_dict=True,
            return_tensors="pt",
        )["input_ids"].to(self.device)
        max_new = int(body.get("max_tokens") or body.get("max_completion_tokens") or 512)
        prompt_tokens = int(ids.shape[1])
        if prompt_tokens + max_new > self.max_context:
            raise ValueError(
                f"context length exceeded: {prompt_tokens} prompt tokens + {max_new} > {self.max_context}"
            )
        temperature = float(body.get("temperature") or 0.0)
        with self.lock, self.torch.no_grad():
            self.torch.manual_seed(int(body.get("seed") or 0))
            out = self.model.generate(
                ids,
                attention_mask=self.torch.ones_like(ids),
                max_new_tokens=max_new,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.convert_tokens_to_ids("<|im_end|>"),
            )
        new = out[0, prompt_tokens:]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        content, calls = parse_reply(text)
        finish = "tool_calls" if calls else ("length" if len(new) >= max_new else "stop")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-{time.time_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(new),
                "total_tokens": prompt_tokens + len(new),
            },
        }


def handler(model: Model) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": model.name, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                self._send(200, model.complete(body))
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})

        def log_message(self, format: str, *args: Any) -> None:
            print(format % args, flush=True)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--adapter")
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--template", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-context", type=int, default=8192)
    args = parser.parse_args()
    server = HTTPServer(("127.0.0.1", args.port), handler(Model(args)))
    print(f"serving {args.name} on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
