"""Operator actions that write to the log: channel configuration and manual summaries."""

from __future__ import annotations

from typing import Any

from projections.model import utc_now
from projections.termination import parse_conditions
from streams.kafka.clients import producer, started
from streams.kafka.consume import read_topic
from streams.records import ChannelConfig, SummaryRecord, WireRecord
from streams.settings import Settings
from streams.topology import CHANNEL_CONFIG, SUMMARIES


async def latest_value(settings: Settings, topic: str, channel: str) -> Any | None:
    """The newest record for a channel key on a compacted topic (None when there is none)."""
    latest = None
    async for record in read_topic(settings, settings.topic(topic), channels=[channel]):
        latest = record.value
    return latest


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
