"""What the interfaces read from and write to the compacted topics themselves: a channel's
latest record, the summary and recap read from there when no worker answers, and the
operator's actions (channel configuration, manual summaries)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from projections.model import utc_now
from projections.termination import parse_conditions
from streams.interfaces.worker_api import WorkerUnreachable
from streams.kafka.clients import producer, started
from streams.kafka.consume import read_topic
from streams.records import ChannelConfig, SummaryRecord, WireRecord, recap_view, summary_view
from streams.settings import Settings
from streams.topology import CHANNEL_CONFIG, RECAPS, SUMMARIES

# The views a reader gets from the compacted topics when no worker answers at all: the
# topic each reads and the view its latest record is shown as (the narrative only; the
# state part is the fold's, which only a worker renders).
LatestView = Literal["summary", "recap"]
LATEST_VIEWS: dict[
    LatestView, tuple[str, Callable[[str, dict[str, Any] | None], dict[str, Any]]]
] = {
    "summary": (SUMMARIES, summary_view),
    "recap": (RECAPS, recap_view),
}


async def latest_value(settings: Settings, topic: str, channel: str) -> dict[str, Any] | None:
    """The newest record for a channel key on a compacted topic: None when there is none or
    it was deleted (a tombstone). A value that is not a JSON object is no chorus record and
    is passed over."""
    latest = None
    async for record in read_topic(settings, settings.topic(topic), channels=[channel]):
        if record.value is None or isinstance(record.value, dict):
            latest = record.value
    return latest


async def view_or_latest(
    settings: Settings, view: LatestView, channel: str, ask: Callable[[], Awaitable[Any]]
) -> tuple[Any, str | None]:
    """The worker's answer to `ask` for the channel's `view`, and None; when no worker
    answers at all, the view of the channel's latest record on its compacted topic, and
    that topic's name. A worker that answers with an error is reported, not replaced by the
    topic."""
    try:
        return await ask(), None
    except WorkerUnreachable:
        topic, shown = LATEST_VIEWS[view]
        return shown(channel, await latest_value(settings, topic, channel)), settings.topic(topic)


async def publish(settings: Settings, topic: str, channel: str, record: WireRecord) -> None:
    kafka = producer(settings)
    await started(kafka, settings)
    try:
        await kafka.send_and_wait(
            settings.topic(topic), key=channel.encode(), value=record.to_bytes()
        )
    finally:
        await kafka.stop()


async def configure_channel(settings: Settings, channel: str, **changes: Any) -> ChannelConfig:
    """Merge `changes` (None values ignored) into the channel's current configuration."""
    current = await latest_value(settings, CHANNEL_CONFIG, channel)
    base = ChannelConfig.model_validate(current) if current else ChannelConfig(channel=channel)
    updates = {name: value for name, value in changes.items() if value is not None}
    config = ChannelConfig.model_validate(
        {**base.model_dump(exclude={"updated_at"}), **updates, "channel": channel}
    )
    parse_conditions(config.termination)  # reject unknown conditions before they are written
    await publish(settings, CHANNEL_CONFIG, channel, config)
    return config


async def set_summary(settings: Settings, channel: str, text: str, by: str) -> SummaryRecord:
    """The manual override of the narrative: new text; annotations, offsets and counts are
    kept (the state part is the fold's, rendered when a view is read)."""
    current = await latest_value(settings, SUMMARIES, channel)
    base = (
        SummaryRecord.model_validate(current)
        if current
        else SummaryRecord(channel=channel, text="")
    )
    record = base.model_copy(
        update={
            "text": text,
            "narrative": text,
            "updated_by": by,
            "updated_at": utc_now(),
        }
    )
    await publish(settings, SUMMARIES, channel, record)
    return record
