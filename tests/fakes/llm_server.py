"""A local fake of an OpenAI-compatible chat-completions server.

In tests:

    async with FakeLlmServer() as server:
        client = OpenAIChatClient(server.base_url, "fake-model")
        server.set_mode("error500")          # or POST /control
        server.script("error500", "ok")      # the next requests' modes, then back to `mode`

As a process (prints the base URL, runs until interrupted):

    python -m tests.fakes.llm_server --port 8080 --delay 2 [--mode ok]

Endpoints: `POST /v1/chat/completions` (also `/chat/completions`), `POST /control` with
any of {"mode", "delay", "script": [...], "include_usage", "reset": true}, `GET /control`
for the state and counters, `GET /health`.

Modes: `ok` (a deterministic reply), `slow` (ok after `delay`, or after `slow_delay` when
`delay` is 0), `error500`, `error400` (echoes the Authorization header back, as some providers do),
`timeout` (holds the request until the server stops), `malformed` (200 with a non-JSON
body), `empty` (200 with empty content). `delay` is added before every response.

The reply is `Summary of N items: <first words of each item>`, N from the prompt's
`New items (N):` line (else its line count), with `usage` estimated at four chars a token.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

MODES = ("ok", "slow", "error500", "error400", "timeout", "malformed", "empty")
_NEW_ITEMS = re.compile(r"New items \((\d+)\):")


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    headers: dict[str, str]
    system: str = ""
    user: str = ""
    mode: str = "ok"


@dataclass
class _State:
    mode: str = "ok"
    delay: float = 0.0
    slow_delay: float = 2.0
    include_usage: bool = True
    script: list[str] = field(default_factory=list)


def build_reply(user: str) -> str:
    """Deterministic: `Summary of N items: ...` from the items in the user prompt."""
    lines = [line.strip() for line in user.splitlines()]
    if "<items>" in lines and "</items>" in lines:
        start = lines.index("<items>") + 1
        end = len(lines) - 1 - lines[::-1].index("</items>")
        items = [line for line in lines[start:end] if line]
    else:
        items = [line for line in lines if line]
    match = _NEW_ITEMS.search(user)
    count = int(match.group(1)) if match else len(items)
    gist = "; ".join(" ".join(item.split()[:4]) for item in items[:5])
    return f"Summary of {count} items: {gist}" if gist else f"Summary of {count} items."


class FakeLlmServer:
    def __init__(
        self,
        mode: str = "ok",
        delay: float = 0.0,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        slow_delay: float = 2.0,
        include_usage: bool = True,
        model: str = "fake-model",
    ) -> None:
        _check_mode(mode)
        self.host = host
        self.port = port
        self.model = model
        self._state = _State(mode, delay, slow_delay, include_usage)
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self._chat)
        self.app.router.add_post("/chat/completions", self._chat)
        self.app.router.add_post("/control", self._control_post)
        self.app.router.add_get("/control", self._control_get)
        self.app.router.add_get("/health", self._health)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> FakeLlmServer:
        self._closing.clear()
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        for address in self._runner.addresses:
            if isinstance(address, tuple) and len(address) >= 2:
                self.port = int(address[1])
                break
        return self

    async def stop(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLlmServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- control ---------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self._state.mode

    @property
    def include_usage(self) -> bool:
        return self._state.include_usage

    @include_usage.setter
    def include_usage(self, value: bool) -> None:
        self._state.include_usage = value

    @property
    def request_count(self) -> int:
        return len(self.requests)

    @property
    def last_system(self) -> str | None:
        return self.requests[-1].system if self.requests else None

    @property
    def last_user(self) -> str | None:
        return self.requests[-1].user if self.requests else None

    def set_mode(self, mode: str, delay: float | None = None) -> None:
        _check_mode(mode)
        self._state.mode = mode
        if delay is not None:
            self._state.delay = delay

    def script(self, *modes: str) -> None:
        """The modes of the next requests, in order; then the current mode again."""
        for mode in modes:
            _check_mode(mode)
        self._state.script.extend(modes)

    def reset(self) -> None:
        self.requests.clear()
        self.max_in_flight = self.in_flight
        self._state.script.clear()

    def _snapshot(self) -> dict[str, Any]:
        return {
            "mode": self._state.mode,
            "delay": self._state.delay,
            "script": list(self._state.script),
            "include_usage": self._state.include_usage,
            "request_count": self.request_count,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "last_system": self.last_system,
            "last_user": self.last_user,
        }

    async def _control_post(self, request: web.Request) -> web.Response:
        try:
            data = await request.json()
            if not isinstance(data, dict):
                raise ValueError("body must be a JSON object")
            if data.get("reset"):
                self.reset()
            if "mode" in data:
                self.set_mode(str(data["mode"]))
            if "delay" in data:
                self._state.delay = float(data["delay"])
            if "include_usage" in data:
                self._state.include_usage = bool(data["include_usage"])
            if "script" in data:
                self.script(*[str(m) for m in data["script"]])
        except ValueError as error:
            return web.json_response({"error": str(error)}, status=400)
        return web.json_response(self._snapshot())

    async def _control_get(self, request: web.Request) -> web.Response:
        return web.json_response(self._snapshot())

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    # -- chat ------------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        mode = self._state.script.pop(0) if self._state.script else self._state.mode
        try:
            body = await request.json()
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        recorded = RecordedRequest(body=body, headers=dict(request.headers), mode=mode)
        for message in body.get("messages") or []:
            if isinstance(message, dict) and message.get("role") == "system":
                recorded.system = str(message.get("content", ""))
            elif isinstance(message, dict) and message.get("role") == "user":
                recorded.user = str(message.get("content", ""))
        self.requests.append(recorded)

        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            delay = self._state.delay
            if mode == "slow":
                delay = delay or self._state.slow_delay
            if mode == "timeout":
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), timeout=600)
                return web.json_response({"error": "server closing"}, status=503)
            if delay > 0:
                await asyncio.sleep(delay)
            return self._respond(mode, recorded)
        finally:
            self.in_flight -= 1

    def _respond(self, mode: str, recorded: RecordedRequest) -> web.Response:
        if mode == "error500":
            return web.json_response({"error": {"message": "internal error"}}, status=500)
        if mode == "error400":
            auth = recorded.headers.get("Authorization", "")
            message = f"bad request; you sent Authorization: {auth}"
            return web.json_response({"error": {"message": message}}, status=400)
        if mode == "malformed":
            return web.Response(
                text='{"choices": [ this is not json', content_type="application/json"
            )
        text = "" if mode == "empty" else build_reply(recorded.user)
        max_tokens = recorded.body.get("max_tokens")
        if isinstance(max_tokens, int) and max_tokens > 0:
            text = text[: max_tokens * 4]
        payload: dict[str, Any] = {
            "id": f"chatcmpl-fake-{self.request_count}",
            "object": "chat.completion",
            "model": str(recorded.body.get("model") or self.model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
        if self._state.include_usage:
            prompt_tokens = (len(recorded.system) + len(recorded.user) + 3) // 4
            payload["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": (len(text) + 3) // 4,
                "total_tokens": prompt_tokens + (len(text) + 3) // 4,
            }
        return web.json_response(payload)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")


async def _serve(args: argparse.Namespace) -> None:
    server = FakeLlmServer(args.mode, args.delay, host=args.host, port=args.port)
    await server.start()
    print(f"fake LLM server listening on {server.base_url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--mode", default="ok", choices=MODES)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each reply")
    asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
