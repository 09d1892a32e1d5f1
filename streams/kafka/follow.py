"""Following the partitions a worker owns of topics keyed and partitioned alike, with a
consumer of its own (no group, nothing committed): `Follower` feeds each topic's reader
(`Followed`) what arrives, from the partition's beginning when it takes one over (a
compacted topic holds about one record per key) or from its end (a log's new records).

`LatestBook` is the reader of a compacted topic: per key the position of its latest record
(two integers) and the records themselves up to `kept_bytes`; past that, the key whose
record was read or written longest ago is dropped from memory (`on_dropped`) and read back
from the topic by its position when it is asked for. A reader answers from memory and says
how far it has read (`Current`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

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


class Followed(Protocol):
    """A topic's reader, fed by the `Follower`."""

    topic: str
    # Read a partition taken over from its beginning (else from its end).
    from_beginning: bool
    # partition -> the end offset to reach before it counts as read (the follower clears it).
    restoring: dict[int, int]

    def took(self, partition: int, end: int) -> None:
        """The partition was taken over when its end offset was `end`."""
        ...

    def on_consumed(self, record: ConsumerRecord) -> None: ...

    def keep_only(self, partitions: Collection[int]) -> None:
        """Forget what was read from the partitions not in `partitions` (moved away)."""
        ...


class LatestBook(Generic[R]):
    """The latest valid record per channel of one compacted topic, for the partitions the
    follower reads. Records change only from `on_record` (the follower, in offset order)."""

    from_beginning = True

    def __init__(
        self,
        topic: str,
        parse: Callable[[bytes], R],
        reader: RangeReader | None,
        *,
        goes_back: Callable[[R, R], bool] | None = None,
        kept_bytes: int = LATEST_KEPT_BYTES,
        on_dropped: Callable[[], None] | None = None,
        on_latest: Callable[[R, int], None] | None = None,
    ) -> None:
        """`on_latest(record, partition)`: told of each record read that becomes its
        channel's latest."""
        self.topic = topic
        self.parse = parse
        self.reader = reader
        self.goes_back = goes_back
        self.kept_bytes = kept_bytes
        self.on_dropped = on_dropped
        self.on_latest = on_latest
        # channel -> (partition, offset) of its latest record: every channel read.
        self.positions: dict[str, tuple[int, int]] = {}
        # channel -> (record, its size): the least recently read or written first.
        self.records: OrderedDict[str, tuple[R, int]] = OrderedDict()
        self.size = 0
        # partition -> the last offset read; partition -> the end to reach while restoring.
        self.read_through: dict[int, int] = {}
        self.restoring: dict[int, int] = {}

    def took(self, partition: int, end: int) -> None:
        if end > 0:
            self.restoring[partition] = end

    def on_consumed(self, record: ConsumerRecord) -> None:
        key = record.key.decode(errors="replace") if record.key else ""
        self.on_record(key, record.partition, record.offset, record.value)

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
        if self.on_latest is not None:
            self.on_latest(record, partition)

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

    async def latest(
        self, channel: str, partition: int | None, *, read_back: bool = True
    ) -> Latest[R]:
        """The channel's latest record; one dropped from memory is read back by its
        position unless `read_back` is False (None when the topic no longer has it there:
        compacted or deleted)."""
        current = self.current(partition)
        kept = self.records.get(channel)
        if kept is not None:
            self.records.move_to_end(channel)
            return Latest(kept[0], current)
        position = self.positions.get(channel)
        if position is None or self.reader is None or not read_back:
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
    """Reads the partitions `owned()` names of each reader's topic: from their beginning or
    their end when it takes one over (`Followed.from_beginning`), then as records arrive;
    a partition no longer owned is forgotten."""

    def __init__(
        self,
        settings: Settings,
        servers: str,
        readers: Collection[Followed],
        owned: Callable[[], frozenset[int]],
    ) -> None:
        self.settings = settings
        self.servers = servers
        self.readers = {reader.topic: reader for reader in readers}
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
                    ", ".join(self.readers),
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
            reader = self.readers[tp.topic]
            for record in records:
                reader.on_consumed(record)
        for topic, reader in self.readers.items():
            for partition, end in list(reader.restoring.items()):
                if await kafka.position(TopicPartition(topic, partition)) >= end:
                    del reader.restoring[partition]

    async def reassign(self, kafka: AIOKafkaConsumer, owned: frozenset[int]) -> None:
        """Read the newly owned partitions from their beginning or end; forget the others;
        go on where it was in those it keeps (`assign` forgets every position)."""
        taken = owned - self.assigned
        kept = {
            tp: await kafka.position(tp)
            for tp in kafka.assignment()
            if tp.partition in owned and tp.partition in self.assigned
        }
        for reader in self.readers.values():
            reader.keep_only(owned)
        kafka.assign([TopicPartition(topic, p) for topic in self.readers for p in owned])
        for tp, position in kept.items():
            kafka.seek(tp, position)
        for starts_at_beginning in (True, False):
            fresh = [
                TopicPartition(topic, p)
                for topic, reader in self.readers.items()
                if reader.from_beginning is starts_at_beginning
                for p in taken
            ]
            if not fresh:
                continue
            if starts_at_beginning:
                await kafka.seek_to_beginning(*fresh)
            else:
                await kafka.seek_to_end(*fresh)
            for tp, end in (await kafka.end_offsets(fresh)).items():
                self.readers[tp.topic].took(tp.partition, end)
        self.assigned = owned
