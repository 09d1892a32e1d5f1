"""A compacted chorus topic followed by a role (both roles): `chorus.summaries` and
`chorus.recaps`, keyed and partitioned like `chorus.messages`, so the records of the
channels a worker owns are on the partitions of the same numbers.

Each followed topic is read by a consumer of its own, in record batches, as the cold
restore reads the changelogs (`streams.worker.restore`): no group (it is assigned the
partitions of `chorus.messages` Faust assigns the role, `streams.worker.ownership`), and
not through Faust's consumer, whose per-record path (an event and its tasks per record) took
0.13-0.40 ms a record: the messages polled after a burst of summaries waited 75-180 ms
for it (bench/results/issue-40-investigations.md, "The wake p99 at 1,000,000 channels").

What the stage makes of a batch reaches the role's tables once per checkpoint. How far each
partition was read (the next offset to read) goes to the role's positions table, key
`read|<topic>|<partition>`, once a checkpoint that holds the effects of what was read
is durable: the checkpoint after it writes it, so the position never passes what the tables
hold, whichever table a stage writes. A restart, warm or cold, goes on from there instead of
reading the topic from its beginning; it reads again only what was read after the last
position written, a checkpoint interval or two before it stopped (the stages take a record
read twice as they took it once). A partition with no
position yet (the first start, or one from before chorus kept them) starts where the role's
consumer group had committed it, else at its beginning.

Partitions moving: at an assignment, the partitions gone and those taken over stop being
read, and a fetch made before a partition moved is dropped for that partition; once the
tables have recovered, each partition taken over is read from its position in the
recovered positions table. Each partition says how far it was read (`Current`), and
whether it is still catching up with what the topic held when this worker took it over
(`caught_up`): a stage that must build on the latest record (the next summary on the
previous) waits for it.

A record on another partition than its channel's (only a producer that does not use Kafka's
default partitioner puts one there) is logged and passed over, for every stage alike.

Costs: per record, the key's partition (murmur2, remembered for the most recent keys) and
the stage's work, applied `SLICE_RECORDS` at a time with the event loop given back between
slices; memory, what one fetch brings (CHORUS_CONSUMER_FETCH_BYTES); per assignment, one
position read per partition taken over (and one request for the group's offsets of those
that have none). Nothing is kept per channel.

A reader of the latest record of a channel keeps only its position (in a table row) and
reads the record back by it (`LatestBook`), records in a cache bounded in bytes. A stage
that builds on its channel's latest record (the next summary on the previous one) keeps what
its consumer has just read as it read it (`LatestBook.read`), instead of fetching it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import BaseModel, ValidationError

from streams.kafka.clients import admin, consumer, drop_fetched_ahead, started
from streams.kafka.consume import RangeReader
from streams.memory import ByteCache
from streams.records import key_partition
from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# How long one fetch waits for records before the assignment is looked at again.
FETCH_WAIT_MS = 200
# Records applied at once, the event loop given back between two slices: a tick's lot of
# summaries (350-400 records at 1,000,000 channels) applied at once would hold the fold.
SLICE_RECORDS = 100
# How long a follower waits after its consumer failed before it reads again.
RETRY_SECONDS = 1.0

# What the follower does with each record: (key, value, partition, offset).
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
    """`topic` (a Faust topic of the role's app) read by a consumer of its own, each record
    handed to `on_record` (see the module); `name` names it in the logs."""

    def __init__(self, chorus: Runtime, topic: Any, name: str, on_record: OnRecord) -> None:
        self.chorus = chorus
        self.name = topic.get_topic_name()
        self.agent = name
        self.on_record = on_record
        # partition -> the last offset read since this worker took it
        self.read_through: dict[int, int] = {}
        # partition -> taken over and not caught up yet
        self.catching_up: set[int] = set()
        # partition being read -> the next offset to read
        self.reading: dict[int, int] = {}
        # partitions taken over and recovered, to be read from their positions
        self.starting: set[int] = set()
        # partition -> the end it had when it was taken over (while catching up)
        self.ends: dict[int, int] = {}
        # partition -> how often it moved: a fetch from before a move is not applied
        self.moves: dict[int, int] = {}
        self.records_read = chorus.meter.followed_records.labels(self.name)
        self._changed = asyncio.Event()
        # Whether the consumer's positions are the partitions' next offsets (not after an
        # error: what it had fetched may not have been applied).
        self._sought = False
        chorus.ownership.on_moved(self.moved)
        chorus.checkpoint.on_take.append(self.taken_by_checkpoint)
        chorus.app.task(self.follow)

    def key(self, partition: int) -> str:
        """The key of `partition`'s position in the positions table: one per partition, as
        a table's changes are kept by key."""
        return f"read|{self.name}|{partition}"

    async def take(
        self, key: bytes | None, value: bytes | None, partition: int, offset: int
    ) -> None:
        """The record at `partition`@`offset`, read (what the follower does with each). One
        on another partition than its channel's is logged and passed over: the channel's
        state and config are on its own partition, never filed under another."""
        self.read_through[partition] = offset
        if partition in self.reading:
            self.reading[partition] = offset + 1
        if key:  # Kafka's partitioner hashes the key's bytes
            home = key_partition(key, self.chorus.ownership.messages_partitions())
            if partition != home:
                log.warning(
                    "ignoring the record of %r at %s@%s: the channel is on partition %s, not "
                    "partition %s (its producer does not use Kafka's default partitioner)",
                    key.decode(errors="replace"),
                    self.name,
                    offset,
                    home,
                    partition,
                )
                return
        done = self.on_record(key, value, partition, offset)
        if inspect.isawaitable(done):
            await done

    def moved(self, gone: frozenset[int], taken: frozenset[int], owned: frozenset[int]) -> None:
        """At an assignment, stop reading what moved; once the tables have recovered,
        read each partition taken over from its position."""
        if self.chorus.ownership.recovering:
            for partition in gone | taken:
                self.moves[partition] = self.moves.get(partition, 0) + 1
                for kept in (self.reading, self.read_through, self.ends):
                    kept.pop(partition, None)
                self.starting.discard(partition)
            self.catching_up -= gone
            self.catching_up |= taken
        else:
            self.starting |= (taken & owned) - self.reading.keys()
        self._changed.set()

    def taken_by_checkpoint(self) -> Callable[[], None]:
        """A checkpoint takes the changes made so far: once they are durable, each
        partition's position is where it was read to now (written by the next one)."""
        reading, moves = dict(self.reading), dict(self.moves)

        def durable() -> None:
            for partition, next_offset in reading.items():
                moved = self.moves.get(partition) != moves.get(partition)
                if moved or partition not in self.reading:
                    continue
                key = self.key(partition)  # the positions table owns where it is
                if self.chorus.positions.get(key, partition) != next_offset:
                    self.chorus.positions.set(key, next_offset, partition)

        return durable

    async def follow(self) -> None:
        """Read the partitions this worker owns until the app stops (the app's task)."""
        settings = self.chorus.settings
        kafka = consumer(
            settings,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=settings.consumer_fetch_bytes,
            fetch_max_bytes=settings.consumer_fetch_bytes,
        )
        await started(kafka, settings)
        try:
            await self.read(kafka)
        finally:
            drop_fetched_ahead(kafka)
            await kafka.stop()

    async def read(self, kafka: AIOKafkaConsumer) -> None:
        """Fetch, apply, repeat: each slice's records of the partitions that did not move
        meanwhile, between two checkpoints (`Checkpoint.between_batches`), the event loop
        given back after each."""
        app, checkpoint = self.chorus.app, self.chorus.checkpoint
        while not app.should_stop:
            try:
                await self._assign(kafka)
                if not self.reading:
                    await self._wait_for_a_change()
                    continue
                moves = dict(self.moves)
                fetched = await kafka.getmany(timeout_ms=FETCH_WAIT_MS, max_records=SLICE_RECORDS)
            except KafkaError as error:  # the broker away: the same partitions again, later
                log.warning(
                    "%s: reading %s failed (%r); again in %gs",
                    self.agent,
                    self.name,
                    error,
                    RETRY_SECONDS,
                )
                self._sought = False
                await asyncio.sleep(RETRY_SECONDS)
                continue
            async with checkpoint.between_batches():
                for tp, records in fetched.items():
                    partition = tp.partition
                    if partition not in self.reading or self.moves.get(partition) != moves.get(
                        partition
                    ):
                        continue
                    for record in records:
                        await self.take(record.key, record.value, partition, record.offset)
                    self.records_read.inc(len(records))
            await self._check_caught_up(kafka)
            if checkpoint.over_bound():
                await checkpoint.checkpoint()
            await asyncio.sleep(0)  # the fold's next batch before the next slice

    async def _wait_for_a_change(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), FETCH_WAIT_MS / 1000)
        self._changed.clear()

    async def _assign(self, kafka: AIOKafkaConsumer) -> None:
        """The consumer reads the partitions being read, each from its next offset (an
        assignment resets every position, kept partitions' too)."""
        started_now: list[int] = []
        if self.starting:
            moves = dict(self.moves)
            starts = await self.positions(sorted(self.starting))
            for partition, offset in starts.items():
                if partition in self.starting and self.moves.get(partition) == moves.get(partition):
                    self.starting.discard(partition)
                    self.reading[partition] = offset
                    started_now.append(partition)
        wanted = {TopicPartition(self.name, partition) for partition in self.reading}
        if self._sought and wanted == set(kafka.assignment()):
            return
        drop_fetched_ahead(kafka)
        kafka.assign(sorted(wanted))
        for tp in wanted:
            kafka.seek(tp, self.reading[tp.partition])
        self._sought = True
        if started_now:
            tps = [TopicPartition(self.name, partition) for partition in started_now]
            for tp, end in (await kafka.end_offsets(tps)).items():
                if tp.partition in self.reading:
                    self.ends[tp.partition] = int(end)

    async def positions(self, partitions: Sequence[int]) -> dict[int, int]:
        """Per partition, the offset to read from: its position in the positions table,
        else the group's committed offset, else 0."""
        stored = {p: self.chorus.positions.get(self.key(p), p) for p in partitions}
        missing = [p for p, found in stored.items() if found is None]
        committed = await self.committed(missing) if missing else {}
        return {
            p: int(found) if found is not None else committed.get(p, 0)
            for p, found in stored.items()
        }

    async def committed(self, partitions: Sequence[int]) -> dict[int, int]:
        """The role's group's committed offsets of `partitions` of the topic (where Faust's
        consumer read it before chorus kept positions); none when it cannot tell."""
        client = admin(self.chorus.settings)
        tps = [TopicPartition(self.name, p) for p in partitions]
        try:
            await started(client, self.chorus.settings)
            offsets = await client.list_consumer_group_offsets(
                self.chorus.app.conf.id, partitions=tps
            )
        except Exception as error:
            log.warning(
                "%s: the group's offsets of %s could not be read (%r); from 0",
                self.agent,
                self.name,
                error,
            )
            return {}
        finally:
            await client.close()
        return {tp.partition: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}

    async def _check_caught_up(self, kafka: AIOKafkaConsumer) -> None:
        for partition in list(self.catching_up):
            end = self.ends.get(partition)
            if end is None or partition not in self.reading:
                continue
            position = await kafka.position(TopicPartition(self.name, partition))
            if position >= end:
                self.catching_up.discard(partition)
                self.ends.pop(partition, None)

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
        if value is None:  # not kept, or as the follower read it
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
        """The follower read the channel's latest record, `value` at `offset`: kept as read
        (parsed when first asked for), so the next `latest` does not fetch it back from the
        topic, a request to the broker per record, one at a time."""
        self.cache.put((self.name, channel), (offset, value), len(value), partition)


def _value(record: ConsumerRecord) -> bytes | None:
    value: bytes | None = record.value
    return value
