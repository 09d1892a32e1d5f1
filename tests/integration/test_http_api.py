"""The worker's HTTP API: local bind, bearer token on every view."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from streams.ops.topics import create_topics
from streams.settings import Settings
from tests.conftest import WorkerProcess

pytestmark = pytest.mark.kafka

TOKEN = "s3cret-token-for-tests"
PATHS = [
    "/channels",
    "/costs",
    "/metrics",
    "/recaps",
    "/channels/a/state",
    "/channels/a/summary",
    "/channels/a/context",
]


async def test_every_view_requires_the_bearer_token_when_one_is_set(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker(CHORUS_API_TOKEN=TOKEN)
    for path in PATHS:
        url = f"{worker.base_url}{path}"
        assert httpx.get(url, timeout=10).status_code == 401, path
        wrong = httpx.get(url, headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401, path
        right = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert right.status_code in (200, 404), (path, right.status_code)
    assert TOKEN not in worker.log_path.read_text(errors="replace")
