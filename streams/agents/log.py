"""Reading a topic by position, for what an agent asks of the log as it is now: a channel's
messages after a cursor (the worker's agent API) or the one message a driver event is about
(the MCP server's answers).

One consumer of its own (no group, nothing committed), one read at a time. A read asks
only for records that are there, so the broker holds none of its fetches (`FETCH_WAIT_MS`
0: with aiokafka's default a read's offset requests and fetches each waited behind a fetch
held up to half a second; measured 2 ms instead of 12 ms at 10 ms, 100 ms at 100 ms), and
nothing stays assigned between reads (no fetch goes on at a partition's end).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from projections.model import LogPosition, Message, MessageError, decode_message
from streams.kafka.clients import bootstrap_servers, consumer, started
from streams.settings import Settings

T = TypeVar("T")

FETCH_WAIT_MS = 0
# A read that gets no record for this long stops (records deleted under it).
READ_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class Read(Generic[T]):
    """What a read found: (offset, what `take` made of the record) in log order, the last
    offset it read (`next`: the cursor to go on from) and the partition's end offset."""

    found: list[tuple[int, T]]
    next: int
    end: int


class PositionReader:
    """Reads records of one topic's partitions after a position."""

    def __init__(self, settings: Settings, topic: str, servers: str | None = None) -> None:
        self.settings = settings
        self.topic = topic
        self.servers = servers
        self._kafka: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def read(
        self,
        partition: int,
        after: int | None,
        take: Callable[[ConsumerRecord], T | None],
        *,
        scan: int,
        limit: int,
    ) -> Read[T]:
        """What `take` makes of the records after offset `after` (from the partition's start
        when None) that it takes (not None), at most `limit` of them, reading at most `scan`
        records."""
        async with self._lock:
            kafka = await self._started()
            tp = TopicPartition(self.topic, partition)
            kafka.assign([tp])
            try:
                begin = (await kafka.beginning_offsets([tp]))[tp]
                end = (await kafka.end_offsets([tp]))[tp]
                first = max(begin, after + 1 if after is not None else begin)
                last = min(end - 1, first + scan - 1)
                reached = first - 1 if after is None or after < first else after
                found: list[tuple[int, T]] = []
                if first <= last:
                    kafka.seek(tp, first)
                while reached < last and len(found) < limit:
                    batch = await kafka.getmany(tp, timeout_ms=READ_TIMEOUT_MS)
                    records = batch.get(tp, [])
                    if not records:
                        break
                    for record in records:
                        if record.offset > last or len(found) >= limit:
                            break
                        reached = record.offset
                        taken = take(record)
                        if taken is not None:
                            found.append((record.offset, taken))
                return Read(found, reached, end)
            finally:
                kafka.assign([])

    async def _started(self) -> AIOKafkaConsumer:
        if self._kafka is None:
            kafka = consumer(
                self.settings,
                bootstrap_servers=self.servers or bootstrap_servers(self.settings),
                enable_auto_commit=False,
                group_id=None,
                fetch_max_wait_ms=FETCH_WAIT_MS,
            )
            await started(kafka, self.settings)
            self._kafka = kafka
        return self._kafka

    async def stop(self) -> None:
        if self._kafka is not None:
            await self._kafka.stop()
            self._kafka = None


def logged_message(record: ConsumerRecord, settings: Settings) -> Message | None:
    """The channel message a record of chorus.messages holds, decoded as the fold decodes it
    (its position standing in for a missing id or time); None when it is not one."""
    position = LogPosition(record.partition, record.offset, record.timestamp)
    try:
        return decode_message(record.value, settings.max_message_bytes, position)
    except MessageError:
        return None
