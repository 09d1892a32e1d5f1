"""Reading a topic as JSON lines, from its own consumer (no group offsets touched)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.kafka.clients import consumer, topic_partitions
from streams.settings import Settings


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: str | None
    value: Any
    timestamp_ms: int

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "key": self.key,
            "timestamp_ms": self.timestamp_ms,
            "value": self.value,
        }


def decode_value(raw: bytes | None) -> Any:
    """JSON when it is JSON, text when it is text, base64 otherwise: never drop a record."""
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


async def _reached(kafka: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
    for tp, end in ends.items():
        if await kafka.position(tp) < end:
            return False
    return True


async def read_topic(
    settings: Settings,
    topic: str,
    *,
    from_beginning: bool = True,
    channels: Collection[str] = (),
    follow: bool = False,
    idle_timeout_ms: int = 1000,
) -> AsyncIterator[Record]:
    """Yield records of `topic` (optionally only some channel keys).

    Without `follow` it stops at the end offsets seen when it started.
    """
    kafka = consumer(settings, enable_auto_commit=False, group_id=None)
    await kafka.start()
    try:
        partitions = await topic_partitions(kafka, topic)
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        kafka.assign(assigned)
        if from_beginning:
            await kafka.seek_to_beginning(*assigned)
        else:
            await kafka.seek_to_end(*assigned)
        ends = await kafka.end_offsets(assigned)
        wanted = set(channels)
        while True:
            if not follow and await _reached(kafka, ends):
                return
            batches = await kafka.getmany(timeout_ms=idle_timeout_ms)
            for tp, messages in batches.items():
                for message in messages:
                    key = message.key.decode(errors="replace") if message.key else None
                    if wanted and key not in wanted:
                        continue
                    yield Record(
                        tp.topic,
                        tp.partition,
                        message.offset,
                        key,
                        decode_value(message.value),
                        message.timestamp,
                    )
    finally:
        await kafka.stop()
