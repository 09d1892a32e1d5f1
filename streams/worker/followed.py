"""A compacted chorus topic followed by an agent of the role (both roles): `chorus.summaries`
and `chorus.recaps`, keyed and partitioned like `chorus.messages`, so Faust assigns a worker
the same partition numbers of both. What the agent makes of a record reaches the role's
tables once per checkpoint, and the record stays held until then (`Checkpoint.hold`), so the
group's committed offset never passes what the tables hold: a restarted worker goes on from
there, warm or cold, instead of reading the topic again from its beginning.

Each partition says how far it was read (`Current`), and whether it is still catching up
with what the topic held when this worker took it over (`caught_up`): a stage that must
build on the latest record (the next summary on the previous) waits for it.

A reader of the latest record of a channel keeps only its position (in a table row) and
reads the record back by it (`LatestBook`), records in a cache bounded in bytes. A stage
that builds on its channel's latest record (the next summary on the previous one) keeps what
its agent has just read as it read it (`LatestBook.read`), instead of fetching it back.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aiokafka import ConsumerRecord
from faust.types import TP as TopicPartition
from pydantic import BaseModel, ValidationError

from streams.kafka.consume import RangeReader
from streams.memory import ByteCache
from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# How often a partition still catching up is looked at.
CATCH_UP_POLL_SECONDS = 0.1

# What the agent does with each record: (key, value, partition, offset).
OnRecord = Callable[[bytes | None, bytes | None, int, int], Awaitable[None] | None]


@dataclass(frozen=True)
class Current:
    """How far a view's source has been read: `topic`'s `partition` through `offset` (None:
    no record read yet since this worker took it); `restoring` while what the partition held
    when this worker took it over is still being read."""

    topic: str
    partition: int | None
    offset: int | None
    restoring: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "read_through": self.offset,
            "restoring": self.restoring,
        }


class Followed:
    """`topic` (a Faust topic of the role's app) followed by the agent `name`."""

    def __init__(self, chorus: Runtime, topic: Any, name: str, on_record: OnRecord) -> None:
        self.chorus = chorus
        self.topic = topic
        self.name = topic.get_topic_name()
        self.on_record = on_record
        # partition -> the last offset read since this worker took it
        self.read_through: dict[int, int] = {}
        # partition -> taken over and not caught up yet
        self.catching_up: set[int] = set()
        chorus.ownership.on_moved(self.moved)

        @chorus.app.agent(topic, name=name)
        async def follow(stream: Any) -> None:
            checkpoint = chorus.checkpoint
            async for event in stream.events():
                async with checkpoint.between_batches():
                    checkpoint.hold(event)
                    record = event.message
                    await self.take(event.key, event.value, record.partition, record.offset)

    async def take(
        self, key: bytes | None, value: bytes | None, partition: int, offset: int
    ) -> None:
        """The record at `partition`@`offset`, read (what the agent does with each)."""
        self.read_through[partition] = offset
        done = self.on_record(key, value, partition, offset)
        if inspect.isawaitable(done):
            await done

    def moved(self, gone: frozenset[int], taken: frozenset[int], _: frozenset[int]) -> None:
        for partition in gone:
            self.read_through.pop(partition, None)
            self.catching_up.discard(partition)
        for partition in taken:
            self.read_through.pop(partition, None)
            self.catching_up.add(partition)
        if taken:
            self.chorus.app.add_future(self._catch_up(frozenset(taken)))

    async def _catch_up(self, partitions: frozenset[int]) -> None:
        """Until the agent's position in each partition reaches the end the partition had
        now (a record published since need not be read first)."""
        consumer = self.chorus.app.consumer
        tps = [TopicPartition(self.name, p) for p in partitions]
        try:
            ends = await consumer.highwaters(*tps)
            waiting = {tp: int(end) for tp, end in ends.items()}
            while waiting:
                for tp, end in list(waiting.items()):
                    if tp.partition not in self.catching_up:
                        del waiting[tp]
                        continue
                    position = await consumer.position(tp)
                    if end <= 0 or (position is not None and position >= end):
                        self.catching_up.discard(tp.partition)
                        del waiting[tp]
                if waiting:
                    await asyncio.sleep(CATCH_UP_POLL_SECONDS)
        except Exception:  # a rebalance under way: the next assignment starts again
            log.info("%s: catching up stopped; the next assignment starts again", self.name)

    def caught_up(self, partition: int) -> bool:
        return partition not in self.catching_up

    def current(self, partition: int | None) -> Current:
        return Current(
            self.name,
            partition,
            self.read_through.get(partition) if partition is not None else None,
            partition is None or partition in self.catching_up,
        )


R = TypeVar("R", bound=BaseModel)

# What a parsed record weighs in memory per byte of its JSON.
RECORD_OVERHEAD = 6


def covers_less(kept: int | None, new: int | None) -> bool:
    """A summary through offset `new` covers less than the one kept, through `kept`."""
    return new is not None and kept is not None and new < kept


@dataclass(frozen=True)
class Latest(Generic[R]):
    """A channel's latest record (None: the partition holds none, as read through
    `current`)."""

    record: R | None
    current: Current


class LatestBook(Generic[R]):
    """The latest record of each channel on one followed topic, read back by its position
    (`position_of(channel, partition)`: [partition, offset, ...] of the record, or None)."""

    def __init__(
        self,
        name: str,
        followed: Followed,
        position_of: Callable[[str, int], Sequence[int | None] | None],
        reader: RangeReader,
        parse: Callable[[bytes], R],
        cache: ByteCache[Any, Any],
    ) -> None:
        self.name = name
        self.followed = followed
        self.position_of = position_of
        self.reader = reader
        self.parse = parse
        self.cache = cache

    async def latest(self, channel: str, partition: int | None) -> Latest[R]:
        """The channel's latest record, read back by its position (None when the topic no
        longer has it there: compacted away or deleted)."""
        current = self.followed.current(partition)
        if partition is None:
            return Latest(None, current)
        position = self.position_of(channel, partition)
        if position is None or position[1] is None:
            return Latest(None, current)
        offset = int(position[1])
        key = (self.name, channel)
        kept = self.cache.get(key)
        value = kept[1] if kept is not None and kept[0] == offset else None
        if value is not None and not isinstance(value, bytes):
            return Latest(value, current)
        if value is None:  # not kept, or as the agent read it
            found = await self.reader.read(partition, offset, offset, _value)
            if not found:
                return Latest(None, current)
            value = found[0][1]
        try:
            record = self.parse(value)
        except ValidationError:
            return Latest(None, current)
        self.cache.put(key, (offset, record), len(value) * RECORD_OVERHEAD, partition)
        return Latest(record, current)

    def read(self, channel: str, partition: int, offset: int, value: bytes) -> None:
        """The agent read the channel's latest record, `value` at `offset`: kept as read
        (parsed when first asked for), so the next `latest` does not fetch it back from the
        topic, a request to the broker per record, one at a time."""
        self.cache.put((self.name, channel), (offset, value), len(value), partition)


def _value(record: ConsumerRecord) -> bytes | None:
    value: bytes | None = record.value
    return value
