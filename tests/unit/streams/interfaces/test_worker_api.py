"""The worker API client waits (boundedly) for a worker that is not ready yet."""

from __future__ import annotations

import httpx
import pytest

from streams.interfaces.worker_api import WorkerApi, WorkerUnavailable
from streams.settings import Settings


def not_ready_then_ready(not_ready: int) -> tuple[httpx.MockTransport, list[str]]:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) <= not_ready:
            return httpx.Response(
                503, json={"error": "not ready: rebalancing"}, headers={"Retry-After": "0.1"}
            )
        return httpx.Response(200, json={"channels": ["a/b"]})

    return httpx.MockTransport(handle), calls


async def test_a_503_is_retried_as_retry_after_asks() -> None:
    transport, calls = not_ready_then_ready(2)
    async with WorkerApi(Settings(), transport=transport) as api:
        assert await api.channels() == ["a/b"]
    assert calls == ["/channels"] * 3


async def test_a_worker_that_stays_unready_is_reported_in_one_line() -> None:
    transport, calls = not_ready_then_ready(10**6)
    async with WorkerApi(Settings(), patience=0.35, transport=transport) as api:
        with pytest.raises(WorkerUnavailable) as raised:
            await api.channels()
    message = str(raised.value)
    assert "still not ready after 0.35 s" in message and "rebalancing" in message
    assert "\n" not in message and 2 <= len(calls) <= 5


async def test_costs_are_both_roles_each_asked_by_the_client_itself() -> None:
    """The fold role reports its own process's costs only (it calls no other role): the
    client adds the context role's, from its web server on CHORUS_WEB_PORT + 1."""
    settings = Settings(web_port=7000)
    row = {"purpose": "recap", "model": "tiny", "calls": 1}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.port == settings.context_web_port:
            return httpx.Response(200, json={"llm": [row]})
        return httpx.Response(200, json={"llm": []})

    async with WorkerApi(settings, transport=httpx.MockTransport(handle)) as api:
        assert await api.costs() == {"llm": [row]}

    def context_down(request: httpx.Request) -> httpx.Response:
        if request.url.port == settings.context_web_port:
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json={"llm": []})

    async with WorkerApi(settings, transport=httpx.MockTransport(context_down)) as api:
        assert await api.costs() == {"llm": []}


async def test_a_500_is_raised_at_once_with_the_worker_s_reason() -> None:
    calls: list[str] = []
    reason = "the recap view of channel 'a/b' failed: KeyError('overview')"

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(500, json={"error": reason})

    async with WorkerApi(Settings(), transport=httpx.MockTransport(handle)) as api:
        with pytest.raises(WorkerUnavailable) as raised:
            await api.recap("a/b")
    assert str(raised.value) == f"/channels/a/b/recap: HTTP 500: {reason}"
    assert calls == ["/channels/a/b/recap"]


async def test_the_api_token_is_sent_as_the_worker_expects_it() -> None:
    sent: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("Authorization"))
        return httpx.Response(200, json={"channels": []})

    settings = Settings(api_token="s3cret")
    async with WorkerApi(settings, transport=httpx.MockTransport(handle)) as api:
        await api.channels()
    async with WorkerApi(Settings(api_token=None), transport=httpx.MockTransport(handle)) as api:
        await api.channels()
    assert sent == ["Bearer s3cret", None]
