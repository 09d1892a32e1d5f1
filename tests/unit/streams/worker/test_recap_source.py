"""streams.worker.recap_source: the fold role's views read recaps from the context role,
which owns them; a context role that does not answer is one error, logged once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from projections.model import Message, MessageType
from projections.recap import RecapPhase
from streams.records import RecapRecord
from streams.settings import Settings
from streams.worker.recap_source import (
    EMPTY_WINDOW,
    ContextUnreachable,
    RecapWindow,
    RemoteRecaps,
    context_url,
)
from tests.conftest import answering

SAID = Message(
    channel="a/b",
    sender="ann",
    type=MessageType.STATUS,
    content="Migrating the billing tables…",
    created_at=datetime(2026, 6, 1, tzinfo=UTC),
)
LATEST = RecapRecord(
    channel="a/b", text="They migrate billing.", phase=RecapPhase.COMPLETED, covered_offset=3
)


def remote(
    handler: Callable[[str, Mapping[str, str]], tuple[int, Any]], **settings: object
) -> RemoteRecaps:
    return RemoteRecaps(
        Settings(bootstrap_servers="x:1", **settings),  # type: ignore[arg-type]
        fetch=answering(handler),
    )


def test_the_context_url_is_this_hosts_port_plus_one_unless_set() -> None:
    assert context_url(Settings(web_port=7000)) == "http://127.0.0.1:7001"
    assert context_url(Settings(context_url="http://context:6067/")) == "http://context:6067"


def test_a_window_round_trips_through_json() -> None:
    window = RecapWindow([(3, SAID), (None, SAID)], LATEST)
    assert RecapWindow.from_json(window.as_json()) == window
    assert RecapWindow.from_json(EMPTY_WINDOW.as_json()) == EMPTY_WINDOW


async def test_views_and_windows_are_read_with_the_token_and_unknown_ones_are_empty() -> None:
    seen: list[Mapping[str, str]] = []

    def answer(path: str, headers: Mapping[str, str]) -> tuple[int, Any]:
        seen.append(headers)
        if path == "/channels/a/b/recap":
            return 200, {"channel": "a/b", "phase": "COMPLETED"}
        if path == "/channels/a/b/window":
            return 200, RecapWindow([(3, SAID)], LATEST).as_json()
        if path == "/recaps":
            return 200, {"recaps": [{"channel": "a/b"}]}
        return 404, {"error": "unknown"}

    recaps = remote(answer, api_token="s3cret")
    assert await recaps.view("a/b") == {"channel": "a/b", "phase": "COMPLETED"}
    assert await recaps.views() == [{"channel": "a/b"}]
    window = await recaps.window("a/b")
    assert window.messages == [(3, SAID)] and window.latest == LATEST
    assert await recaps.view("c/d") is None
    assert await recaps.window("c/d") == EMPTY_WINDOW
    assert {headers["Authorization"] for headers in seen} == {"Bearer s3cret"}


async def test_a_context_role_that_does_not_answer_is_one_error_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def answer(path: str, headers: Mapping[str, str]) -> tuple[int, Any]:
        return 503, {"error": "not ready"}

    recaps = remote(answer)
    for _ in range(3):
        with pytest.raises(ContextUnreachable, match=r"the context role at .* did not answer"):
            await recaps.window("a/b")
    assert sum("the context role" in r.getMessage() for r in caplog.records) == 1
