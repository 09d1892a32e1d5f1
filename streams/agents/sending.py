"""Sending as an agent: the message an agent asks for (it names no sender: the agent is
who the server says it is), validated by the fold's rules, refused before it is sent when
the channel's writers leave the agent out, then sent and acknowledged (acks=all).

The writers come from the compacted `chorus.channel-config` topic, followed from its
beginning over every partition (`WritersBook`), so any process can check them without a
worker. The fold decides for good (`Runtime.validate`): a config written a moment before
the message may reach the fold first, or after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from pydantic_core import ValidationError

from projections.model import Message, MessageError, MessageType, utc_now
from projections.termination import parse_conditions
from projections.writers import sender_refusal, writer_refusal
from streams.errors import ChorusError
from streams.kafka.clients import consumer, started, topic_partitions
from streams.kafka.consume import read_topic
from streams.kafka.produce import (
    SentMessage,
    deliver,
    encoded,
    enum_member,
    prepare,
    started_producer,
)
from streams.memory import ByteCache
from streams.records import ChannelConfig, key_partition
from streams.settings import Settings
from streams.topology import CHANNEL_CONFIG

log = logging.getLogger(__name__)

# What an agent may give for a message; the sender is never one of them.
AGENT_FIELDS = (
    "type",
    "content",
    "target",
    "correlation_id",
    "in_reply_to",
    "deadline_seconds",
    "topic",
)
# The fields taken as they are (`type` is checked, `deadline_seconds` made a time).
TEXT_FIELDS = ("content", "target", "correlation_id", "in_reply_to", "topic")
# How long a check waits for the configs to be read from the topic's beginning.
WRITERS_READ_SECONDS = 15.0
# The writers a WritersBook keeps in memory (a channel dropped is read from the topic).
WRITERS_KEPT_BYTES = 4 * 1024 * 1024
# How long the book waits for records at a time, and after a failure.
FOLLOW_POLL_MS = 500
RETRY_SECONDS = 2.0


class WriterRefused(MessageError):
    """The channel's writers leave the sender out (`projections.writers`)."""


class WritersUnknown(ChorusError):
    """The channel configs could not be read in time: nothing is sent unchecked."""


def agent_message(agent: str, channel: str, fields: Mapping[str, Any]) -> Message:
    """The message `agent` sends to `channel` with `fields` (`AGENT_FIELDS`; a request
    without a correlation_id gets one; `deadline_seconds` is a delay from now), or
    `MessageError` with the field and the rule, as the fold words it."""
    unknown = sorted(set(fields) - set(AGENT_FIELDS))
    if unknown:
        if "sender" in unknown:
            raise MessageError("sender: not given by an agent; its identity names the sender")
        raise MessageError(
            f"unknown fields {', '.join(unknown)}; a message takes {', '.join(AGENT_FIELDS)}"
        )
    if not isinstance(fields.get("type"), str):
        raise MessageError("type: required, one of " + ", ".join(MessageType))
    record: dict[str, Any] = {
        name: fields[name] for name in TEXT_FIELDS if fields.get(name) is not None
    }
    record["type"] = enum_member(MessageType, "type", fields["type"]).value
    delay = fields.get("deadline_seconds")
    if delay is not None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or delay <= 0:
            raise MessageError(f"deadline_seconds: a number of seconds above 0, got {delay!r}")
        record["deadline"] = utc_now() + timedelta(seconds=delay)
    return prepare({**record, "channel": channel, "sender": agent})


def sent_answer(sent: SentMessage) -> dict[str, Any]:
    """What a sender is told of its message: where it landed and how to name it."""
    return {
        "id": sent.id,
        "channel": sent.channel,
        "correlation_id": sent.correlation_id,
        "partition": sent.partition,
        "offset": sent.offset,
    }


def _config(value: bytes) -> ChannelConfig:
    """A config record as the config stage reads it: one it refuses raises ValidationError
    (the book passes it over and keeps the channel's last)."""
    config = ChannelConfig.model_validate_json(value)
    try:
        parse_conditions(config.termination)
    except ValueError as error:
        raise ValidationError.from_exception_data(
            "ChannelConfig",
            [
                {
                    "type": "value_error",
                    "loc": ("termination",),
                    "input": config.termination,
                    "ctx": {"error": error},
                }
            ],
        ) from None
    return config


class WritersBook:
    """Each channel's writers, from the compacted config topic read from its beginning over
    every partition and followed: in memory, only the channels that have writers, at most
    `WRITERS_KEPT_BYTES` of them (the least recently changed dropped first). A channel of a
    partition that dropped one is read from the topic when asked (`latest_value`), so no
    bound makes a channel look open."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.topic(CHANNEL_CONFIG)
        self.partitions: int | None = None
        self.kept: ByteCache[str, list[str]] = ByteCache(
            "writers",
            WRITERS_KEPT_BYTES,
            lambda channel, _: self.dropped.add(self._partition(channel)),
        )
        # Partitions a channel was dropped from (asked of the topic), and those still being
        # read up to where they ended when the book started.
        self.dropped: set[int] = set()
        self.restoring: dict[int, int] | None = None

    async def run(self) -> None:
        """Follow the topic until cancelled; a failure after the first read starts again
        from the beginning (retried every `RETRY_SECONDS`)."""
        while True:
            kafka = consumer(self.settings, enable_auto_commit=False, group_id=None)
            try:
                await started(kafka, self.settings)
                partitions = sorted(await topic_partitions(kafka, self.topic))
                assigned = [TopicPartition(self.topic, p) for p in partitions]
                kafka.assign(assigned)
                await kafka.seek_to_beginning(*assigned)
                ends = await kafka.end_offsets(assigned)
                self.kept.clear()
                self.dropped.clear()
                self.partitions = len(partitions)
                self.restoring = {tp.partition: end for tp, end in ends.items() if end > 0}
                while True:
                    batches = await kafka.getmany(timeout_ms=FOLLOW_POLL_MS)
                    for records in batches.values():
                        for record in records:
                            self._take(record)
                    for tp in assigned:
                        end = self.restoring.get(tp.partition)
                        if end is not None and await kafka.position(tp) >= end:
                            del self.restoring[tp.partition]
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self.partitions is None:
                    raise  # no broker, no topic: said to whoever waits for the book
                log.warning(
                    "reading %s stopped (%r); again in %gs", self.topic, error, RETRY_SECONDS
                )
                self.restoring = None
                await asyncio.sleep(RETRY_SECONDS)
            finally:
                await kafka.stop()

    def _take(self, record: ConsumerRecord) -> None:
        if not record.key:
            return
        channel = record.key.decode(errors="replace")
        if record.value is None:  # a tombstone: the channel has no config any more
            self.kept.pop(channel)
            return
        try:
            writers = _config(record.value).writers
        except ValidationError:
            return  # refused by the config stage: the channel keeps its last config
        self.kept.pop(channel)
        if writers:
            size = sum(len(writer) for writer in writers) + len(channel)
            self.kept.put(channel, writers, size)

    async def writers(self, channel: str, running: asyncio.Future[None]) -> list[str]:
        """The channel's writers as its latest config says them (empty: anyone); once the
        topic has been read to where it ended when the book started (`running`: `run`)."""
        deadline = time.monotonic() + WRITERS_READ_SECONDS
        while self.restoring is None or self._partition(channel) in self.restoring:
            if running.done():
                running.result()  # what stopped it (no broker, no topic), raised here
            if time.monotonic() > deadline:
                raise WritersUnknown(
                    f"the channel configs on {self.topic} were not read within "
                    f"{WRITERS_READ_SECONDS:g} s: who may write to {channel!r} is unknown"
                )
            await asyncio.sleep(0.05)
        kept = self.kept.get(channel)
        if kept is not None:
            return list(kept)
        if self._partition(channel) not in self.dropped:
            return []
        found = None
        async for record in read_topic(self.settings, self.topic, channels=[channel]):
            found = record.value
        try:
            return _config(orjson.dumps(found)).writers if isinstance(found, dict) else []
        except ValidationError:
            return []

    def _partition(self, channel: str) -> int:
        assert self.partitions is not None
        return key_partition(channel.encode(), self.partitions)


class AgentSender:
    """Sends agents' messages after the writers check; the producer and the book start on
    first use and stop with `stop`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.writers = WritersBook(settings)
        self._following: asyncio.Task[None] | None = None
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def _writers(self, channel: str) -> list[str]:
        if self._following is None or self._following.done():
            if self._following is not None and not self._following.cancelled():
                self._following.exception()  # answered to the caller it stopped
            self._following = asyncio.ensure_future(self.writers.run())
        return await self.writers.writers(channel, self._following)

    async def refusal(self, message: Message) -> str | None:
        """Why the channel refuses `message` from its sender (`writer_refusal`)."""
        return writer_refusal(await self._writers(message.channel), message)

    async def configure_refusal(self, agent: str, channel: str) -> str | None:
        """Why `agent` may not change the channel's config: a channel with writers is
        configured by its writers only."""
        return sender_refusal(await self._writers(channel), agent, channel)

    async def send(self, message: Message) -> SentMessage:
        """Send `message` once the writers check passed: `WriterRefused` with the reason
        when it did not, `MessageError` for a message over the size limit, before anything
        is sent."""
        refused = await self.refusal(message)
        if refused is not None:
            raise WriterRefused(refused)
        records = encoded(self.settings, [message])
        async with self._lock:
            if self._producer is None:
                self._producer = await started_producer(self.settings)
        (sent,) = await deliver(self._producer, self.settings, records)
        return sent

    async def stop(self) -> None:
        if self._following is not None:
            self._following.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._following
            self._following = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
