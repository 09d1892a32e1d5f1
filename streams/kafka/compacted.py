"""The latest record per key of compacted topics, for the partitions a worker owns: read
from their beginning when it takes one over (a compacted topic holds about one record per
key), then followed, so a reader answers from memory and says how far it has read.

`LatestBook` holds one topic's: per key the position of its latest record (two integers)
and the records themselves up to `kept_bytes`; past that, the key whose record was read or
written longest ago is dropped from memory (`on_dropped`) and read back from the topic by
its position when it is asked for. `Follower` fills the books of several topics keyed and
partitioned alike (a consumer of its own, no group, nothing committed).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from pydantic import BaseModel, ValidationError

from streams.kafka.clients import consumer, started
from streams.kafka.consume import RangeReader
from streams.settings import Settings

log = logging.getLogger(__name__)

R = TypeVar("R", bound=BaseModel)

# The records a book keeps in memory by default, in encoded bytes.
LATEST_KEPT_BYTES = 64 * 1024 * 1024
# How long the follower waits for records before it looks at the assignment again.
FOLLOW_POLL_MS = 200
# After a failure (no broker), how long before the follower starts again.
FOLLOW_RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class Current:
    """How far a view's source has been read: `topic`'s `partition` through `offset` (None:
    no record read yet); `restoring` while what the partition held when this worker took it
    over is still being read."""

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


@dataclass(frozen=True)
class Latest(Generic[R]):
    """A channel's latest record (None: the partition holds none, as read through
    `current`)."""

    record: R | None
    current: Current


class LatestBook(Generic[R]):
    """The latest valid record per channel of one compacted topic, for the partitions the
    follower reads. Records change only from `on_record` (the follower, in offset order)."""

    def __init__(
        self,
        topic: str,
        parse: Callable[[bytes], R],
        reader: RangeReader | None,
        *,
        goes_back: Callable[[R, R], bool] | None = None,
        kept_bytes: int = LATEST_KEPT_BYTES,
        on_dropped: Callable[[], None] | None = None,
    ) -> None:
        self.topic = topic
        self.parse = parse
        self.reader = reader
        self.goes_back = goes_back
        self.kept_bytes = kept_bytes
        self.on_dropped = on_dropped
        # channel -> (partition, offset) of its latest record: every channel read.
        self.positions: dict[str, tuple[int, int]] = {}
        # channel -> (record, its size): the least recently read or written first.
        self.records: OrderedDict[str, tuple[R, int]] = OrderedDict()
        self.size = 0
        # partition -> the last offset read; partition -> the end to reach while restoring.
        self.read_through: dict[int, int] = {}
        self.restoring: dict[int, int] = {}

    def on_record(self, channel: str, partition: int, offset: int, value: bytes | None) -> None:
        self.read_through[partition] = offset
        if value is None:  # a tombstone: the channel has no record any more
            self._forget(channel)
            return
        try:
            record = self.parse(value)
        except ValidationError as error:
            log.warning("ignoring an invalid record on %s@%s: %s", self.topic, offset, error)
            return
        kept = self.records.get(channel)
        if kept is not None and self.goes_back is not None and self.goes_back(kept[0], record):
            return
        self._forget(channel)
        self.positions[channel] = (partition, offset)
        self._keep(channel, record, len(value))

    def _keep(self, channel: str, record: R, size: int) -> None:
        self.records[channel] = (record, size)
        self.size += size
        while self.size > self.kept_bytes and len(self.records) > 1:
            _, (_, dropped) = self.records.popitem(last=False)
            self.size -= dropped
            if self.on_dropped is not None:
                self.on_dropped()

    def _forget(self, channel: str) -> None:
        self.positions.pop(channel, None)
        kept = self.records.pop(channel, None)
        if kept is not None:
            self.size -= kept[1]

    def keep_only(self, partitions: Collection[int]) -> None:
        """Forget what is read from the partitions not in `partitions` (moved away)."""
        for channel, (partition, _) in list(self.positions.items()):
            if partition not in partitions:
                self._forget(channel)
        for gone in set(self.read_through) - set(partitions):
            del self.read_through[gone]
        for gone in set(self.restoring) - set(partitions):
            del self.restoring[gone]

    def current(self, partition: int | None) -> Current:
        return Current(
            self.topic,
            partition,
            self.read_through.get(partition) if partition is not None else None,
            partition is None or partition in self.restoring,
        )

    async def latest(self, channel: str, partition: int | None) -> Latest[R]:
        """The channel's latest record; one dropped from memory is read back by its
        position (None when the topic no longer has it there: compacted or deleted)."""
        current = self.current(partition)
        kept = self.records.get(channel)
        if kept is not None:
            self.records.move_to_end(channel)
            return Latest(kept[0], current)
        position = self.positions.get(channel)
        if position is None or self.reader is None:
            return Latest(None, current)
        found = await self.reader.read(position[0], position[1], position[1], _value)
        if not found or self.positions.get(channel) != position:
            return Latest(None, current)
        value = found[0][1]
        record = self.parse(value)
        self._keep(channel, record, len(value))
        return Latest(record, current)


def _value(record: ConsumerRecord) -> bytes | None:
    value: bytes | None = record.value
    return value


class Follower:
    """Reads the partitions `owned()` names of each book's topic (a consumer of its own, no
    group, nothing committed): from their beginning when it takes one over, then as records
    arrive; a partition no longer owned is forgotten."""

    def __init__(
        self,
        settings: Settings,
        servers: str,
        books: Mapping[str, LatestBook[Any]],
        owned: Callable[[], frozenset[int]],
    ) -> None:
        self.settings = settings
        self.servers = servers
        self.books = dict(books)
        self.owned = owned
        self.assigned: frozenset[int] = frozenset()

    async def run(self) -> None:
        """Follow until cancelled; a broker that goes away is retried, never fatal."""
        while True:
            kafka = consumer(
                self.settings,
                bootstrap_servers=self.servers,
                enable_auto_commit=False,
                group_id=None,
            )
            try:
                await started(kafka, self.settings)
                self.assigned = frozenset()
                while True:
                    await self.step(kafka)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning(
                    "reading %s stopped (%r); again in %gs",
                    ", ".join(self.books),
                    error,
                    FOLLOW_RETRY_SECONDS,
                )
                await asyncio.sleep(FOLLOW_RETRY_SECONDS)
            finally:
                await kafka.stop()

    async def step(self, kafka: AIOKafkaConsumer) -> None:
        """Follow the assignment, then read what arrived (at most FOLLOW_POLL_MS)."""
        owned = self.owned()
        if owned != self.assigned:
            await self.reassign(kafka, owned)
        if not self.assigned:
            await asyncio.sleep(FOLLOW_POLL_MS / 1000)
            return
        batches = await kafka.getmany(timeout_ms=FOLLOW_POLL_MS)
        for tp, records in batches.items():
            book = self.books[tp.topic]
            for record in records:
                key = record.key.decode(errors="replace") if record.key else ""
                book.on_record(key, tp.partition, record.offset, record.value)
        for topic, book in self.books.items():
            for partition, end in list(book.restoring.items()):
                if await kafka.position(TopicPartition(topic, partition)) >= end:
                    del book.restoring[partition]

    async def reassign(self, kafka: AIOKafkaConsumer, owned: frozenset[int]) -> None:
        """Read the newly owned partitions from their beginning; forget the others."""
        taken = owned - self.assigned
        for book in self.books.values():
            book.keep_only(owned)
        kafka.assign([TopicPartition(topic, p) for topic in self.books for p in owned])
        fresh = [TopicPartition(topic, p) for topic in self.books for p in taken]
        if fresh:
            await kafka.seek_to_beginning(*fresh)
            ends = await kafka.end_offsets(fresh)
            for tp, end in ends.items():
                if end > 0:
                    self.books[tp.topic].restoring[tp.partition] = end
        self.assigned = owned
