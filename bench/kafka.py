"""What the bench does on Kafka, all through the product's client factory
(`streams.kafka.clients`): produce, follow a topic, and count what was written."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from streams.kafka.clients import admin, consumer, producer, started
from streams.settings import Settings

# Offsets of every partition of some topics: {topic: {partition: offset}}.
Offsets = dict[str, dict[int, int]]
FETCH_BYTES = 8 * 1024 * 1024


def reader(settings: Settings, **options: int) -> AIOKafkaConsumer:
    """A consumer of its own: no group, nothing committed."""
    return consumer(
        settings,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=FETCH_BYTES,
        **options,
    )


async def produce(
    settings: Settings, topic: str, records: Sequence[tuple[bytes, bytes]]
) -> list[tuple[int, int]]:
    """Send (key, value) records as chorus's producers do (acks=all, idempotent); where each
    landed, (partition, offset), in order."""
    kafka = await started(producer(settings, linger_ms=5, max_batch_size=256 * 1024), settings)
    try:
        landed: list[tuple[int, int]] = []
        for start in range(0, len(records), 5000):
            sent = [
                await kafka.send(topic, key=key, value=value)
                for key, value in records[start : start + 5000]
            ]
            landed += [(meta.partition, meta.offset) for meta in await asyncio.gather(*sent)]
        return landed
    finally:
        await kafka.stop()


async def all_topics(settings: Settings) -> list[str]:
    client = await started(admin(settings), settings)
    try:
        return sorted(await client.list_topics())
    finally:
        await client.close()


async def partitions_of(kafka: AIOKafkaConsumer, topics: Sequence[str]) -> list[TopicPartition]:
    cluster = await kafka._client.fetch_all_metadata()
    return [
        TopicPartition(topic, partition)
        for topic in topics
        for partition in sorted(cluster.partitions_for_topic(topic) or ())
    ]


@asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[AIOKafkaConsumer]:
    kafka = await started(reader(settings), settings)
    try:
        yield kafka
    finally:
        await kafka.stop()


async def end_offsets(kafka: AIOKafkaConsumer, topics: Sequence[str]) -> Offsets:
    partitions = await partitions_of(kafka, topics)
    found: Offsets = {topic: {} for topic in topics}
    if not partitions:  # none of the topics exists
        return found
    ends = await kafka.end_offsets(partitions)
    for tp, offset in ends.items():
        found[tp.topic][tp.partition] = offset
    return found


async def send_paced(
    settings: Settings,
    topic: str,
    records: Sequence[tuple[str, bytes, bytes]],
    rate: float,
    on_tick: Callable[[float], None] | None = None,
) -> dict[str, float]:
    """Send (id, key, value) records at `rate` a second, in ticks of 10 ms, each as soon as
    it is due (linger 0); id -> when it was handed to the producer (epoch seconds).
    `on_tick(seconds since the first send)` runs before each tick."""
    kafka = await started(producer(settings, linger_ms=0), settings)
    sent: dict[str, float] = {}
    try:
        per_tick = max(1, round(rate / 100))
        pending = []
        start = time.perf_counter()
        for first in range(0, len(records), per_tick):
            delay = start + first / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if on_tick is not None:
                on_tick(time.perf_counter() - start)
            for message_id, key, value in records[first : first + per_tick]:
                sent[message_id] = time.time()
                pending.append(await kafka.send(topic, key=key, value=value))
        await asyncio.gather(*pending)
    finally:
        await kafka.stop()
    return sent


async def record_bytes(settings: Settings, before: Offsets, after: Offsets) -> dict[str, int]:
    """Key and value bytes of the records written between two snapshots, by topic (records
    the broker's cleaner has already compacted away are not counted)."""
    windows = {
        TopicPartition(topic, partition): (before.get(topic, {}).get(partition, 0), end)
        for topic, ends in after.items()
        for partition, end in ends.items()
    }
    windows = {tp: (start, end) for tp, (start, end) in windows.items() if end > start}
    written = dict.fromkeys(after, 0)
    if not windows:
        return written
    async with opened(settings) as kafka:
        kafka.assign(list(windows))
        for tp, (start, _) in windows.items():
            kafka.seek(tp, start)
        pending = set(windows)
        while pending:
            batches = await kafka.getmany(*pending, timeout_ms=1000)
            for tp, records in batches.items():
                end = windows[tp][1]
                written[tp.topic] += sum(
                    len(r.key or b"") + len(r.value or b"") for r in records if r.offset < end
                )
            for tp in list(pending):  # positions move past compacted gaps too
                if await kafka.position(tp) >= windows[tp][1]:
                    pending.discard(tp)
    return written


class Follower:
    """Hands every record of `topic` written after `start` (or since the topic's beginning)
    to `take(record, arrival time)`, until `stop`; `async with` does both.

    `max_wait_ms`: how long the broker holds a fetch while the topic has nothing new (a
    record that arrives ends the wait at once). Short by default, for the wake clock; a
    reader whose fetches must not weigh on the broker's figures waits longer: at 10 ms an
    idle reader sends a hundred fetches a second."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        take: Callable[[ConsumerRecord[bytes, bytes], float], None],
        from_beginning: bool = False,
        max_wait_ms: int = 10,
    ) -> None:
        self.max_wait_ms = max_wait_ms
        self.settings = settings
        self.topic = topic
        self.take = take
        self.from_beginning = from_beginning
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Follower:
        kafka = await started(
            reader(self.settings, fetch_max_wait_ms=self.max_wait_ms), self.settings
        )
        partitions = await partitions_of(kafka, [self.topic])
        kafka.assign(partitions)
        if self.from_beginning:
            await kafka.seek_to_beginning(*partitions)
        else:
            for tp, end in (await kafka.end_offsets(partitions)).items():
                kafka.seek(tp, end)
        self.task = asyncio.create_task(self.read(kafka))
        return self

    async def read(self, kafka: AIOKafkaConsumer) -> None:
        try:
            while not self.stopping.is_set():
                batches = await kafka.getmany(timeout_ms=50)
                arrived = time.time()
                for records in batches.values():
                    for record in records:
                        self.take(record, arrived)
        finally:
            await kafka.stop()

    async def stop(self) -> None:
        self.stopping.set()
        if self.task is not None:
            await self.task

    async def __aenter__(self) -> Follower:
        return await self.start()

    async def __aexit__(self, *_: object) -> None:
        await self.stop()
