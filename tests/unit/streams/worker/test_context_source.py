"""streams.worker.context_source: the fold role's views read summaries and recaps from the
context role, which owns them; a context role that does not answer is one error, logged
once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from projections.model import Message, MessageType
from projections.recap import RecapPhase
from streams.records import RecapRecord, SummaryRecord
from streams.settings import Settings
from streams.worker.context_source import (
    NOTHING_YET,
    ContextSource,
    ContextUnreachable,
    RecentText,
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
SUMMARY = SummaryRecord(
    channel="a/b",
    text="Billing moves.",
    narrative="Billing moves.",
    first_offset=0,
    last_offset=3,
    annotations={"digest": "x" * 100},
)


def remote(
    handler: Callable[[str, Mapping[str, str]], tuple[int, Any]], **settings: object
) -> ContextSource:
    return ContextSource(
        Settings(bootstrap_servers="x:1", **settings),  # type: ignore[arg-type]
        fetch=answering(handler),
    )


def test_the_context_url_is_this_hosts_port_plus_one_unless_set() -> None:
    assert context_url(Settings(web_port=7000)) == "http://127.0.0.1:7001"
    assert context_url(Settings(context_url="http://context:6067/")) == "http://context:6067"


def test_recent_text_round_trips_through_json_without_the_annotations() -> None:
    recent = RecentText([(3, SAID), (None, SAID)], LATEST, SUMMARY)
    read = RecentText.from_json(recent.as_json())
    assert read.messages == recent.messages and read.recap == LATEST
    assert read.summary == SUMMARY.model_copy(update={"annotations": {}})
    assert RecentText.from_json(NOTHING_YET.as_json()) == NOTHING_YET


async def test_views_are_read_with_the_token_and_unknown_channels_are_empty() -> None:
    seen: list[Mapping[str, str]] = []

    def answer(path: str, headers: Mapping[str, str]) -> tuple[int, Any]:
        seen.append(headers)
        if path == "/channels/a/b/recap":
            return 200, {"channel": "a/b", "phase": "COMPLETED"}
        if path == "/channels/a/b/recent":
            return 200, RecentText([(3, SAID)], LATEST, SUMMARY).as_json()
        if path == "/channels/a/b/summary-record":
            return 200, {"record": SUMMARY.model_dump(mode="json")}
        if path == "/channels/c/d/summary-record":
            return 200, {"record": None}
        if path == "/recaps":
            return 200, {"recaps": [{"channel": "a/b"}]}
        return 404, {"error": "unknown"}

    source = remote(answer, api_token="s3cret")
    assert await source.recap("a/b") == {"channel": "a/b", "phase": "COMPLETED"}
    assert await source.recaps() == [{"channel": "a/b"}]
    recent = await source.recent("a/b")
    assert recent.messages == [(3, SAID)] and recent.recap == LATEST
    assert recent.summary is not None and recent.summary.narrative == "Billing moves."
    assert await source.summary("a/b") == SUMMARY  # the whole record, annotations too
    assert await source.summary("c/d") is None
    assert await source.recap("c/d") is None
    assert await source.recent("c/d") == NOTHING_YET
    assert {headers["Authorization"] for headers in seen} == {"Bearer s3cret"}


async def test_a_context_role_that_does_not_answer_is_one_error_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def answer(path: str, headers: Mapping[str, str]) -> tuple[int, Any]:
        return 503, {"error": "not ready"}

    source = remote(answer)
    for _ in range(3):
        with pytest.raises(ContextUnreachable, match=r"the context role at .* did not answer"):
            await source.recent("a/b")
    assert sum("the context role" in r.getMessage() for r in caplog.records) == 1
