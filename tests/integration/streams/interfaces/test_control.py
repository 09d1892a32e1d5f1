"""streams.interfaces.control: the summary and recap from the compacted topics when no
worker answers; against the test broker, the latest record, channel config merges, the
manual summary keeps the state part."""

from __future__ import annotations

from typing import Any

import pytest

from streams.interfaces import control
from streams.interfaces.control import (
    configure_channel,
    latest_value,
    publish,
    set_summary,
    view_or_latest,
)
from streams.interfaces.worker_api import WorkerUnavailable, WorkerUnreachable
from streams.kafka.clients import producer, started
from streams.ops.topics import create_topics
from streams.records import RecapRecord
from streams.settings import Settings
from streams.topology import CHANNEL_CONFIG, RECAPS, SUMMARIES

RECAP = {"channel": "team/a", "text": "Done.", "phase": "COMPLETED"}


@pytest.fixture
def recaps_topic(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The recaps topic without Kafka: its latest record for team/a is RECAP."""
    read: list[tuple[str, str]] = []

    async def latest(_: Settings, topic: str, channel: str) -> dict[str, Any] | None:
        read.append((topic, channel))
        return RECAP

    monkeypatch.setattr(control, "latest_value", latest)
    return read


async def test_the_worker_s_answer_comes_first(recaps_topic: list[tuple[str, str]]) -> None:
    async def worker() -> dict[str, Any]:
        return {"channel": "team/a", "phase": "SCHEDULED"}

    found = await view_or_latest(Settings(), "recap", "team/a", worker)
    assert found == ({"channel": "team/a", "phase": "SCHEDULED"}, None)
    assert recaps_topic == []


async def test_with_no_worker_the_latest_record_is_shown_as_the_view(
    recaps_topic: list[tuple[str, str]],
) -> None:
    async def no_worker() -> dict[str, Any]:
        raise WorkerUnreachable("cannot reach the worker")

    found = await view_or_latest(Settings(topic_prefix="t."), "recap", "team/a", no_worker)
    view = {"channel": "team/a", "phase": "COMPLETED", "text": "Done.", "recap": RECAP}
    assert found == (view, "t.recaps")
    assert recaps_topic == [(RECAPS, "team/a")]


async def test_a_worker_that_answered_with_an_error_is_not_replaced_by_the_topic(
    recaps_topic: list[tuple[str, str]],
) -> None:
    async def failed() -> dict[str, Any]:
        raise WorkerUnavailable("/channels/team/a/recap: HTTP 500: the recap view failed")

    with pytest.raises(WorkerUnavailable, match="HTTP 500"):
        await view_or_latest(Settings(), "recap", "team/a", failed)
    assert recaps_topic == []


@pytest.mark.kafka
async def test_the_latest_record_passes_over_what_is_no_record_and_ends_at_a_tombstone(
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    record = RecapRecord(channel="team/d", text="Done.", phase="COMPLETED")
    await publish(chorus_settings, RECAPS, "team/d", record)
    kafka = producer(chorus_settings)
    await started(kafka, chorus_settings)
    try:
        await kafka.send_and_wait(chorus_settings.topic(RECAPS), key=b"team/d", value=b"oops")
        latest = await latest_value(chorus_settings, RECAPS, "team/d")
        assert latest is not None and latest["text"] == "Done."
        await kafka.send_and_wait(chorus_settings.topic(RECAPS), key=b"team/d", value=None)
    finally:
        await kafka.stop()
    assert await latest_value(chorus_settings, RECAPS, "team/d") is None


@pytest.mark.kafka
async def test_changes_merge_into_the_current_config(chorus_settings: Settings) -> None:
    await create_topics(chorus_settings)
    await configure_channel(chorus_settings, "team/a", summary_after_messages=5)
    config = await configure_channel(
        chorus_settings, "team/a", recap_debounce_seconds=10.0, summary_after_messages=None
    )
    assert (config.summary_after_messages, config.recap_debounce_seconds) == (5, 10.0)
    stored = await latest_value(chorus_settings, CHANNEL_CONFIG, "team/a")
    assert stored["summary_after_messages"] == 5 and stored["recap_debounce_seconds"] == 10.0


@pytest.mark.kafka
async def test_an_unknown_condition_is_refused_before_it_is_written(
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    with pytest.raises(ValueError, match="unknown termination condition"):
        await configure_channel(chorus_settings, "team/b", termination=["sometimes"])
    assert await latest_value(chorus_settings, CHANNEL_CONFIG, "team/b") is None


@pytest.mark.kafka
async def test_a_manual_summary_replaces_the_narrative(chorus_settings: Settings) -> None:
    await create_topics(chorus_settings)
    record = await set_summary(chorus_settings, "team/c", "We ship on Friday.", "user:ann")
    assert record.narrative == "We ship on Friday."
    assert record.text.startswith("We ship on Friday.")
    assert record.updated_by == "user:ann"
    stored = await latest_value(chorus_settings, SUMMARIES, "team/c")
    assert stored["narrative"] == "We ship on Friday."
