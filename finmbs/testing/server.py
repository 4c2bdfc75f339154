"""A real HTTP server speaking the OpenAI API with scripted replies (tests and benchmarks).

It answers POST /v1/chat/completions and /v1/completions and GET /v1/models on 127.0.0.1.
Replies come first from a queue (`server.script(...)`), then from a handler function that sees
the request; either can return plain text, a list of texts (one per choice), or a `Reply` with an
HTTP status, a delay (for timeouts and latency), a finish reason or a raw (malformed) body.

    python -m finmbs.testing.server --port 8011 --latency 0.2   # a fixed-latency echo server
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from finmbs.verify.math import AST_LOCK


@dataclass
class Reply:
    """One scripted reply; `texts` holds one text per choice (cycled up to n)."""

    texts: list[str] = field(default_factory=lambda: ["ok"])
    finish_reasons: list[str] | None = None
    status: int = 200
    delay: float = 0.0
    raw: str | None = None
    completion_tokens: int | None = None


@dataclass
class Request:
    """What the server saw: the endpoint path and the JSON body."""

    path: str
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, str]]:
        return self.body.get("messages") or []

    @property
    def text(self) -> str:
        """The prompt, or the last user message."""
        if "prompt" in self.body:
            prompt = self.body["prompt"]
            return prompt if isinstance(prompt, str) else "\n".join(prompt)
        users = [m["content"] for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else ""

    @property
    def system(self) -> str:
        return "\n".join(m["content"] for m in self.messages if m.get("role") == "system")

    @property
    def n(self) -> int:
        return int(self.body.get("n") or 1)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def response_format(self) -> dict[str, Any] | None:
        """The output constraint the client asked for (e.g. a JSON schema), if any."""
        return self.body.get("response_format")


Handler = Callable[[Request], "Reply | str | list[str]"]


def _as_reply(value: Reply | str | list[str]) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(texts=[value])
    return Reply(texts=list(value))


def _count_tokens(text: str) -> int:
    return max(1, len(text.split()))


class ScriptedOpenAIServer:
    """An OpenAI-compatible HTTP server on 127.0.0.1 driven by a script and a handler."""

    def __init__(self, handler: Handler | None = None, latency: float = 0.0, port: int = 0):
        self.handler: Handler = handler or (lambda request: "ok")
        self.latency = latency
        self.port = port
        self.requests: list[Request] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # scripting ------------------------------------------------------------------------------
    def script(self, *replies: Reply | str | list[str]) -> None:
        """Queue replies served (in order) before the handler is consulted."""
        with self._lock:
            self._queue.extend(_as_reply(r) for r in replies)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._queue.clear()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # HTTP -----------------------------------------------------------------------------------
    async def _completion(self, http: web.Request) -> web.StreamResponse:
        try:
            body = await http.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "invalid JSON body"}}, status=400)
        request = Request(path=http.path, body=body)
        with self._lock:
            self.requests.append(request)
            queued = self._queue.popleft() if self._queue else None
        reply = queued or _as_reply(await asyncio.to_thread(self._handle, request))
        delay = reply.delay or self.latency
        if delay:
            await asyncio.sleep(delay)
        if reply.raw is not None:
            return web.Response(text=reply.raw, status=reply.status, content_type="application/json")
        if reply.status != 200:
            return web.json_response(
                {"error": {"message": f"scripted error {reply.status}", "type": "scripted", "code": reply.status}},
                status=reply.status,
            )
        return web.json_response(self._body(request, reply))

    def _handle(self, request: Request) -> Reply | str | list[str]:
        """The handler, one call at a time and never beside math-verify (see AST_LOCK)."""
        with AST_LOCK:
            return self.handler(request)

    def _body(self, request: Request, reply: Reply) -> dict[str, Any]:
        chat = request.path.endswith("chat/completions")
        texts = [reply.texts[i % len(reply.texts)] for i in range(request.n)]
        reasons = reply.finish_reasons or ["stop"]
        choices = []
        for i, text in enumerate(texts):
            reason = reasons[i % len(reasons)]
            if chat:
                choices.append({"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": reason})
            else:
                choices.append({"index": i, "text": text, "finish_reason": reason, "logprobs": None})
        completion = reply.completion_tokens or sum(_count_tokens(t) for t in texts)
        prompt_tokens = _count_tokens(json.dumps(request.messages) if chat else request.text)
        return {
            "id": f"scripted-{len(self.requests)}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            },
        }

    async def _models(self, http: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completion)
        app.router.add_post("/v1/completions", self._completion)
        app.router.add_get("/v1/models", self._models)
        return app

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    # lifecycle ------------------------------------------------------------------------------
    def start(self) -> ScriptedOpenAIServer:
        """Serve from a background thread; returns once the port is bound."""
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="scripted-openai", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("scripted OpenAI server did not start")
        return self

    def stop(self) -> None:
        if self._loop and self._runner:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(10)

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Scripted OpenAI-compatible server (echo, fixed latency).")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()

    async def serve() -> None:
        server = ScriptedOpenAIServer(latency=args.latency, port=args.port)
        await server._start()
        print(server.base_url, flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
