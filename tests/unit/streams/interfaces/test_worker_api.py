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
