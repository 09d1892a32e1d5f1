"""Stage 2: batch each channel's messages and publish running summaries to the compacted
`chorus.summaries` topic.

The agent never waits for a summariser: a due batch is handed to a task, so a slow LLM
delays neither folding nor other channels (beyond the client's concurrency limit). The
task publishes to `chorus.summaries`; the agent reads that topic too and, inside stream
iteration, records the summary and trims the batch. Tables change only from the log, so
a restarted worker recovers both from their changelogs and re-runs an unfinished batch.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from projections.model import Message, utc_now
from projections.summarise import ContentSummariser, SummaryResult, default_summariser
from projections.summarise.pending import (
    PendingBatch,
    add,
    due,
    next_batch,
    summarisable,
    trim,
)
from streams.records import ChannelConfig, SummaryRecord

if TYPE_CHECKING:
    from streams.app import Chorus

log = logging.getLogger(__name__)


def summary_view(channel: str, latest: dict[str, Any] | None) -> dict[str, Any]:
    """get_channel_summary's answer; with no summary yet: content null, annotations {}."""
    if latest is None:
        return {"channel": channel, "content": None, "annotations": {}}
    record = SummaryRecord.model_validate(latest)
    return {
        "channel": channel,
        "content": record.text,
        **record.model_dump(mode="json", exclude={"channel", "text"}),
    }


class Summariser:
    def __init__(self, chorus: Chorus, summariser: ContentSummariser[Message]) -> None:
        self.chorus = chorus
        self.settings = chorus.settings
        self.summariser = summariser
        self.pending = chorus.app.Table("summary-pending", partitions=self.settings.partitions)
        self.latest = chorus.app.Table("summary-latest", partitions=self.settings.partitions)
        # Last offset handed to a summariser and not yet seen back on the summaries topic:
        # the next batch waits for it, so it builds on the summary it follows.
        self.launched: dict[str, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def thresholds(self, channel: str) -> tuple[int, float]:
        raw = self.chorus.channel_config.get(channel)
        config = ChannelConfig.model_validate(raw) if raw else None
        return (
            (config and config.summary_after_messages) or self.settings.summary_after_messages,
            (config and config.summary_after_seconds) or self.settings.summary_after_seconds,
        )

    def covered_offset(self, channel: str) -> int:
        latest = self.latest.get(channel)
        last = latest.get("last_offset") if latest else None
        return last if last is not None else -1

    def batch_of(self, channel: str) -> PendingBatch:
        raw = self.pending.get(channel)
        return PendingBatch.model_validate(raw) if raw else PendingBatch()

    def store(self, channel: str, batch: PendingBatch) -> None:
        self.pending[channel] = batch.model_dump(mode="json")

    async def on_message(self, message: Message, partition: int, offset: int) -> None:
        if not summarisable(message):
            return
        channel = message.channel
        before = self.batch_of(channel)
        batch = add(
            before,
            message,
            offset,
            covered_offset=self.covered_offset(channel),
            max_pending=self.settings.summary_max_pending,
            now=utc_now(),
        )
        if batch is not before:
            self.store(channel, batch)
        self.maybe_launch(channel, batch, partition, utc_now())

    async def on_summary(self, value: bytes | None, partition: int) -> None:
        if value is None:
            return
        try:
            record = SummaryRecord.model_validate_json(value)
        except ValidationError as error:
            log.warning("ignoring an invalid record on the summaries topic: %s", error)
            return
        channel = record.channel
        self.latest[channel] = record.model_dump(mode="json")
        if record.last_offset is not None:
            before = self.batch_of(channel)
            batch = trim(before, record.last_offset)
            if batch is not before:
                self.store(channel, batch)
            self.maybe_launch(channel, batch, partition, utc_now())

    def maybe_launch(
        self, channel: str, batch: PendingBatch, partition: int, now: datetime
    ) -> bool:
        if self.launched.get(channel, -1) > self.covered_offset(channel):
            return False
        after_messages, after_seconds = self.thresholds(channel)
        if not due(batch, after_messages=after_messages, after_seconds=after_seconds, now=now):
            return False
        chosen = next_batch(batch, after_messages)
        self.launched[channel] = chosen.last_offset
        task = asyncio.ensure_future(
            self.summarise(channel, chosen, self.latest.get(channel), partition)
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    async def summarise(
        self,
        channel: str,
        batch: PendingBatch,
        previous_raw: dict[str, Any] | None,
        partition: int,
    ) -> None:
        try:
            record = await self.summary_of(channel, batch, previous_raw)
            await self.chorus.summaries.send(
                key=channel.encode(), value=record.to_bytes(), partition=partition
            )
        except Exception:  # the default wiring falls back itself; this guards user wiring
            log.exception("summary of %s failed; the batch stays pending", channel)
            self.launched.pop(channel, None)

    async def summary_of(
        self, channel: str, batch: PendingBatch, previous_raw: dict[str, Any] | None
    ) -> SummaryRecord:
        previous = SummaryRecord.model_validate(previous_raw) if previous_raw else None
        messages = batch.messages()
        result = await self.summariser.summarise(
            messages,
            SummaryResult(text=previous.text, annotations=previous.annotations)
            if previous
            else None,
        )
        annotations = dict(result.annotations)
        if batch.dropped:
            annotations["droppedItems"] = str(batch.dropped)
        return SummaryRecord(
            channel=channel,
            text=result.text,
            annotations=annotations,
            first_offset=batch.items[0].offset,
            last_offset=batch.last_offset,
            first_message_id=messages[0].id,
            last_message_id=messages[-1].id,
            total_messages=(previous.total_messages if previous else 0) + len(messages),
        )

    async def check_time_thresholds(self) -> None:
        """Launch batches whose time threshold passed (the message threshold fires inline)."""
        now = utc_now()
        for channel, raw in list(self.pending.items()):
            batch = PendingBatch.model_validate(raw)
            if batch.items:
                partition = self.chorus.messages_partition(channel)
                if partition is not None:
                    self.maybe_launch(channel, batch, partition, now)


def install(chorus: Chorus) -> Summariser:
    from streams.llm import client_from_settings
    from streams.metering import MeteredChatClient

    client = client_from_settings(chorus.settings)
    summariser = Summariser(
        chorus,
        default_summariser(
            MeteredChatClient(client, chorus.meter, "summary") if client else None,
            chorus.settings.summary_small_threshold,
            chorus.settings.summary_medium_threshold,
            context_tokens=chorus.settings.llm_context_tokens,
            max_tokens=chorus.settings.llm_max_tokens,
        ),
    )

    @chorus.app.agent(chorus.summaries, name="record-summaries")
    async def record_summaries(stream: Any) -> None:
        async for event in stream.events():
            await summariser.on_summary(event.value, event.message.partition)

    @chorus.app.timer(1.0, name="summary-time-thresholds")
    async def time_thresholds() -> None:
        await summariser.check_time_thresholds()

    return summariser
