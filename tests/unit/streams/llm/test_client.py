"""OpenAIChatClient against the fake chat-completions server, in this process (the fake as
a process of its own is in tests/integration)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from projections.summarise import LlmContentSummariser, LlmError, SummaryResult
from streams.llm.client import OpenAIChatClient, client_from_settings
from streams.settings import Settings
from tests.fakes.llm_server import FakeLlmServer

SECRET = "sk-test-SUPERSECRET-0123456789"

ClientFactory = Callable[..., OpenAIChatClient]


@pytest.fixture
async def server() -> AsyncIterator[FakeLlmServer]:
    async with FakeLlmServer() as fake:
        yield fake


@pytest.fixture
async def make_client(server: FakeLlmServer) -> AsyncIterator[ClientFactory]:
    made: list[OpenAIChatClient] = []

    def factory(**overrides: Any) -> OpenAIChatClient:
        options: dict[str, Any] = {
            "base_url": server.base_url,
            "model": "fake-model",
            "timeout": 5.0,
            "max_retries": 2,
            "concurrency": 4,
            "backoff_base": 0.01,
            "backoff_max": 0.05,
            **overrides,
        }
        client = OpenAIChatClient(**options)
        made.append(client)
        return client

    yield factory
    for client in made:
        await client.aclose()


USER = "New items (2):\n<items>\n[alice] Let's use Redis for the cache\n[bob] Agreed\n</items>"


async def test_ok(server: FakeLlmServer, make_client: ClientFactory) -> None:
    client = make_client(api_key=SecretStr(SECRET))
    completion = await client.complete("system prompt", USER, 64)
    assert completion.text == "Summary of 2 items: [alice] Let's use Redis; [bob] Agreed"
    assert completion.model == "fake-model"
    assert completion.prompt_tokens == (len("system prompt") + len(USER) + 3) // 4
    assert completion.completion_tokens > 0
    assert completion.latency_ms >= 0
    assert server.request_count == 1
    assert server.last_system == "system prompt"
    assert server.last_user == USER
    request = server.requests[0]
    assert request.body["max_tokens"] == 64
    assert request.body["model"] == "fake-model"
    assert request.headers["Authorization"] == f"Bearer {SECRET}"


async def test_missing_usage_is_estimated(
    server: FakeLlmServer, make_client: ClientFactory
) -> None:
    server.include_usage = False
    completion = await make_client().complete("s", USER, 64)
    assert completion.prompt_tokens == 1 + (len(USER) + 3) // 4
    assert completion.completion_tokens == (len(completion.text) + 3) // 4


async def test_500_then_ok_is_retried(server: FakeLlmServer, make_client: ClientFactory) -> None:
    server.script("error500")
    completion = await make_client().complete("s", USER, 64)
    assert completion.text.startswith("Summary of 2 items")
    assert server.request_count == 2
    assert [r.mode for r in server.requests] == ["error500", "ok"]


async def test_always_500_gives_up_after_bounded_retries(
    server: FakeLlmServer, make_client: ClientFactory
) -> None:
    server.set_mode("error500")
    with pytest.raises(LlmError, match=r"after 3 attempt.*HTTP 500"):
        await make_client(max_retries=2).complete("s", USER, 64)
    assert server.request_count == 3


async def test_no_retries_when_max_retries_is_zero(
    server: FakeLlmServer, make_client: ClientFactory
) -> None:
    server.set_mode("error500")
    with pytest.raises(LlmError):
        await make_client(max_retries=0).complete("s", USER, 64)
    assert server.request_count == 1


async def test_timeout(server: FakeLlmServer, make_client: ClientFactory) -> None:
    server.set_mode("timeout")
    client = make_client(timeout=0.2, max_retries=1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(LlmError, match="timed out"):
        await client.complete("s", USER, 64)
    assert server.request_count == 2
    assert loop.time() - started < 3


async def test_malformed_json(server: FakeLlmServer, make_client: ClientFactory) -> None:
    server.set_mode("malformed")
    with pytest.raises(LlmError, match="not JSON"):
        await make_client().complete("s", USER, 64)
    assert server.request_count == 1  # not retried


async def test_empty_output(server: FakeLlmServer, make_client: ClientFactory) -> None:
    server.set_mode("empty")
    with pytest.raises(LlmError, match="empty"):
        await make_client().complete("s", USER, 64)
    assert server.request_count == 1


async def test_other_4xx_is_not_retried(server: FakeLlmServer, make_client: ClientFactory) -> None:
    server.set_mode("error400")
    with pytest.raises(LlmError, match="HTTP 400"):
        await make_client().complete("s", USER, 64)
    assert server.request_count == 1


async def test_429_is_retried() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(429, json={"error": "slow down"})
        return httpx.Response(200, json={"choices": [{"message": {"content": "fine"}}]})

    client = OpenAIChatClient(
        "http://llm.invalid/v1", "m", backoff_base=0.01, transport=httpx.MockTransport(handler)
    )
    async with client:
        completion = await client.complete("s", "u", 8)
    assert completion.text == "fine"
    assert completion.model == "m"
    assert calls == 2


async def test_connection_errors_are_retried_then_fail() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = OpenAIChatClient(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_base=0.01)
    async with client:
        with pytest.raises(LlmError, match=r"after 2 attempt.*connection error"):
            await client.complete("s", "u", 8)


async def test_concurrency_limit_respected(
    server: FakeLlmServer, make_client: ClientFactory
) -> None:
    server.set_mode("slow", delay=0.15)
    client = make_client(concurrency=2)
    results = await asyncio.gather(*(client.complete("s", USER, 64) for _ in range(6)))
    assert len(results) == 6
    assert server.request_count == 6
    assert server.max_in_flight == 2


@pytest.mark.parametrize("mode", ["error500", "error400", "malformed", "timeout"])
async def test_api_key_never_in_error_text(
    server: FakeLlmServer,
    make_client: ClientFactory,
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    server.set_mode(mode)
    client = make_client(api_key=SecretStr(SECRET), timeout=0.2, max_retries=1)
    with caplog.at_level(logging.DEBUG), pytest.raises(LlmError) as caught:
        await client.complete("s", USER, 64)
    assert server.requests[0].headers["Authorization"] == f"Bearer {SECRET}"
    error = caught.value
    for text in (str(error), repr(error), caplog.text, repr(client), str(error.__cause__)):
        assert SECRET not in text


async def test_control_endpoint(server: FakeLlmServer, make_client: ClientFactory) -> None:
    async with httpx.AsyncClient() as http:
        control = server.base_url.removesuffix("/v1") + "/control"
        state = (await http.post(control, json={"mode": "error500", "delay": 0})).json()
        assert state["mode"] == "error500"
        with pytest.raises(LlmError):
            await make_client(max_retries=0).complete("s", USER, 64)
        state = (await http.post(control, json={"mode": "ok", "reset": True})).json()
        assert state["request_count"] == 0
        await make_client().complete("sys", USER, 64)
        state = (await http.get(control)).json()
        assert state["request_count"] == 1
        assert state["last_user"] == USER
        assert (await http.post(control, json={"mode": "nonsense"})).status_code == 400


async def test_llm_summariser_over_the_http_client(
    server: FakeLlmServer, make_client: ClientFactory
) -> None:
    llm = LlmContentSummariser(make_client(), str)
    result = await llm.summarise(["item-1", "item-2", "item-3"], SummaryResult("Prior."))
    assert result.text == "Summary of 3 items: item-1; item-2; item-3"
    assert result.annotations["tier"] == "synthesised"
    assert result.annotations["model"] == "fake-model"
    assert int(result.annotations["promptTokens"]) > 0
    assert "Current summary:\nPrior." in (server.last_user or "")


def test_client_from_settings() -> None:
    assert client_from_settings(Settings(_env_file=None, llm_base_url=None)) is None
    settings = Settings(
        _env_file=None,
        llm_base_url="http://127.0.0.1:8080/v1/",
        llm_model="primary",
        llm_api_key=SecretStr(SECRET),
        llm_timeout_seconds=7.0,
        llm_max_retries=5,
        llm_concurrency=3,
    )
    primary = client_from_settings(settings)
    assert primary is not None
    assert (primary.url, primary.model) == ("http://127.0.0.1:8080/v1/chat/completions", "primary")
    assert (primary.timeout, primary.max_retries, primary.concurrency) == (7.0, 5, 3)
    secondary = client_from_settings(settings, secondary=True)
    assert secondary is not None
    assert (secondary.base_url, secondary.model) == ("http://127.0.0.1:8080/v1", "primary")
    both = settings.model_copy(
        update={"secondary_llm_base_url": "http://other/v1", "secondary_llm_model": "small"}
    )
    secondary = client_from_settings(both, secondary=True)
    assert secondary is not None
    assert (secondary.base_url, secondary.model) == ("http://other/v1", "small")
    assert SECRET not in repr(secondary)
