"""Reading a topic as JSON lines, from its own consumer (no group offsets touched)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from streams.kafka.clients import consumer, drop_fetched_ahead, started, topic_partitions
from streams.settings import Settings

T = TypeVar("T")


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
    await started(kafka, settings)
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


class RangeReader:
    """Reads offset ranges of one topic's partitions on demand: what the worker's stages use
    to get back message bodies from the log instead of keeping a copy of their own.

    One consumer of its own (no group, nothing committed), started on first use; one read at
    a time. A read stops at `last`, at the partition's end, or after `timeout_seconds`
    without a record, so it cannot hang on a partition that ends early.
    """

    def __init__(
        self, settings: Settings, topic: str, servers: str, timeout_seconds: float = 10.0
    ) -> None:
        self.settings = settings
        self.topic = topic
        self.servers = servers
        self.timeout_ms = int(timeout_seconds * 1000)
        self._kafka: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def read(
        self,
        partition: int,
        first: int,
        last: int,
        take: Callable[[ConsumerRecord], T | None],
        limit: int | None = None,
    ) -> list[tuple[int, T]]:
        """(offset, what `take` made of it) for the records at offsets `first`..`last` that
        it takes (not None), in offset order; at most `limit` of them (it stops there)."""
        async with self._lock:
            kafka = await self._started()
            tp = TopicPartition(self.topic, partition)
            drop_fetched_ahead(kafka)
            kafka.assign([tp])
            kafka.seek(tp, first)
            end = (await kafka.end_offsets([tp]))[tp]
            found: list[tuple[int, T]] = []
            while await kafka.position(tp) <= min(last, end - 1):
                batches = await kafka.getmany(tp, timeout_ms=self.timeout_ms)
                records = batches.get(tp, [])
                if not records:
                    break
                for record in records:
                    taken = take(record) if record.offset <= last else None
                    if taken is not None:
                        found.append((record.offset, taken))
                        if limit is not None and len(found) >= limit:
                            return found
            return found

    async def end_offsets(self, partitions: Collection[int]) -> dict[int, int]:
        """partition -> its end offset (the offset the next record will have)."""
        async with self._lock:
            kafka = await self._started()
            tps = [TopicPartition(self.topic, p) for p in partitions]
            return {tp.partition: end for tp, end in (await kafka.end_offsets(tps)).items()}

    async def _started(self) -> AIOKafkaConsumer:
        if self._kafka is None:
            kafka = consumer(
                self.settings,
                bootstrap_servers=self.servers,
                enable_auto_commit=False,
                group_id=None,
            )
            await started(kafka, self.settings)
            self._kafka = kafka
        return self._kafka

    async def stop(self) -> None:
        async with self._lock:
            if self._kafka is not None:
                drop_fetched_ahead(self._kafka)
                await self._kafka.stop()
                self._kafka = None
