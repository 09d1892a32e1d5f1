"""A followed topic (`Followed`): read by a consumer of its own from each partition's
position once its tables recovered, how far it read written a checkpoint after what it made
of it; the latest record of each channel (`LatestBook`): read back by its position, unless
the follower has just read it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError
from faust.types import TP

import streams.worker.followed as followed_module
from streams.memory import ByteCache
from streams.records import SummaryRecord
from streams.testing import OfflineProducer
from streams.worker.compose import Worker
from streams.worker.followed import Current, Followed, LatestBook
from tests.unit.streams.worker.offline import TopicRecords, offline_worker

CHANNEL = "team/plan"


class Following:
    """What a book asks of its topic's follower: how far each partition has been read."""

    def current(self, partition: int | None) -> Current:
        return Current("t.summaries", partition, 7, restoring=False)


def book(reader: TopicRecords, positions: dict[str, list[int]]) -> LatestBook[SummaryRecord]:
    def position_of(channel: str, _: int) -> list[int] | None:
        return positions.get(channel)

    cache: ByteCache[Any, Any] = ByteCache("latest", 1 << 20)
    return LatestBook(
        "summary",
        Following(),  # type: ignore[arg-type]
        position_of,
        reader,  # type: ignore[arg-type]
        SummaryRecord.model_validate_json,
        cache,
    )


async def test_a_record_the_agent_read_is_not_read_back_from_the_topic() -> None:
    """The next summary builds on the channel's latest, which the stage's follower read a
    moment before: it is kept (within the cache's bytes) instead of fetched back by its
    position, a request to the broker for each summary, one at a time."""
    record = SummaryRecord(channel=CHANNEL, text="so far", last_offset=4)
    reader = TopicRecords(CHANNEL.encode())
    reader.records[(0, 5)] = record.to_bytes()
    latest = book(reader, {CHANNEL: [0, 5, 4]})

    latest.read(CHANNEL, 0, 5, record.to_bytes())
    assert (await latest.latest(CHANNEL, 0)).record == record
    assert (await latest.latest(CHANNEL, 0)).record == record  # parsed once, then kept
    assert reader.reads == []


async def test_a_record_not_kept_or_not_the_latest_is_read_back_by_its_position() -> None:
    older = SummaryRecord(channel=CHANNEL, text="before", last_offset=1)
    newer = SummaryRecord(channel=CHANNEL, text="so far", last_offset=4)
    reader = TopicRecords(CHANNEL.encode())
    reader.records[(0, 5)] = newer.to_bytes()
    latest = book(reader, {CHANNEL: [0, 5, 4]})

    latest.read(CHANNEL, 0, 2, older.to_bytes())  # read, but the position says offset 5
    assert (await latest.latest(CHANNEL, 0)).record == newer
    assert reader.reads == [(5, 5, None)]
    latest.cache.clear()  # memory let it go (a restart, the cache's bound)
    assert (await latest.latest(CHANNEL, 0)).record == newer
    assert reader.reads == [(5, 5, None), (5, 5, None)]


class FakeTopic:
    """A consumer of no group over a topic's records, `records[partition]` (offset, key,
    value) in offset order, as `Followed.read` uses one: an assignment resets every
    position, as aiokafka's does."""

    def __init__(self, topic: str, records: dict[int, list[tuple[int, bytes, bytes]]]) -> None:
        self.topic = topic
        self.records = records
        self.positions: dict[TopicPartition, int | None] = {}
        self._fetcher = None  # nothing fetched ahead to drop
        self.during_fetch: Callable[[], None] | None = None

    def assignment(self) -> set[TopicPartition]:
        return set(self.positions)

    def assign(self, tps: list[TopicPartition]) -> None:
        self.positions = dict.fromkeys(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    async def position(self, tp: TopicPartition) -> int:
        position = self.positions[tp]
        assert position is not None, "read before it was sought"
        return position

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {
            tp: max((o + 1 for o, _, _ in self.records.get(tp.partition, [])), default=0)
            for tp in tps
        }

    async def getmany(
        self, timeout_ms: int, max_records: int
    ) -> dict[TopicPartition, list[SimpleNamespace]]:
        await asyncio.sleep(0)
        fetched: dict[TopicPartition, list[SimpleNamespace]] = {}
        for tp, position in self.positions.items():
            assert position is not None, "read before it was sought"
            found = [r for r in self.records.get(tp.partition, []) if r[0] >= position]
            found = found[:max_records]
            if found:
                fetched[tp] = [SimpleNamespace(offset=o, key=k, value=v) for o, k, v in found]
                self.positions[tp] = found[-1][0] + 1
        if fetched and self.during_fetch is not None:
            self.during_fetch()
        return fetched


def recaps_of(worker: Worker) -> Followed:
    """The fold role's follower of chorus.recaps (its views')."""
    assert worker.views is not None
    return worker.views.recaps_followed


def channel_on(worker: Worker, partition: int) -> str:
    """A channel whose records belong on `partition` (Kafka's default partitioner)."""
    ownership = worker.runtime.ownership
    return next(
        channel
        for channel in (f"{CHANNEL}-{n}" for n in range(1_000))
        if ownership.partition_of(channel) == partition
    )


def recap_records(worker: Worker, partition: int, offsets: range) -> list[tuple[int, bytes, bytes]]:
    """Records of a channel of `partition`, at `offsets`."""
    key = channel_on(worker, partition).encode()
    return [(o, key, b"{}") for o in offsets]


async def following(followed: Followed, kafka: FakeTopic, done: Callable[[], bool]) -> None:
    """Run the follower over `kafka` until `done()` holds (or fail after many turns)."""
    reading = asyncio.create_task(followed.read(kafka))
    try:
        for _ in range(2_000):
            if done():
                return
            await asyncio.sleep(0)
        raise AssertionError("never done")
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading


async def assign(worker: Worker, partitions: set[int], *, recovered: bool) -> None:
    chorus = worker.runtime
    messages = chorus.messages.get_topic_name()
    await chorus.app.on_partitions_assigned.send({TP(messages, p) for p in partitions})
    if recovered:
        await chorus.app.on_rebalance_complete.send()


async def test_a_partition_taken_over_is_read_from_its_position_once_its_tables_recovered() -> None:
    worker = offline_worker()
    followed = recaps_of(worker)
    read: list[tuple[int, int]] = []
    followed.on_record = lambda _k, _v, partition, offset: read.append((partition, offset))
    worker.runtime.positions.set(followed.key(0), 5, 0)  # partition 0 was read up to 5
    committed: list[list[int]] = []

    async def group_offsets(partitions: Sequence[int]) -> dict[int, int]:
        committed.append(list(partitions))
        return {1: 2}  # where the role's group had read partition 1: no position yet

    followed.committed = group_offsets  # type: ignore[method-assign]
    kafka = FakeTopic(
        followed.name,
        {0: recap_records(worker, 0, range(8)), 1: recap_records(worker, 1, range(4))},
    )
    await assign(worker, {0, 1}, recovered=False)
    assert followed.reading == {} and followed.starting == set()  # not recovered yet
    assert not followed.caught_up(0) and not followed.caught_up(1)

    await worker.runtime.app.on_rebalance_complete.send()
    assert followed.starting == {0, 1}
    await following(followed, kafka, lambda: followed.caught_up(0) and followed.caught_up(1))
    assert sorted(read) == [(0, 5), (0, 6), (0, 7), (1, 2), (1, 3)]
    assert committed == [[1]]
    assert followed.current(0).offset == 7 and not followed.current(0).restoring


async def test_how_far_it_read_is_written_by_the_checkpoint_after_the_one_holding_it() -> None:
    worker = offline_worker()
    chorus = worker.runtime
    changelogs = OfflineProducer()

    async def offline() -> OfflineProducer:
        return changelogs

    chorus.checkpoint.producer = offline
    followed = recaps_of(worker)
    kafka = FakeTopic(followed.name, {0: recap_records(worker, 0, range(3))})
    chorus.positions.set(followed.key(0), 0, 0)
    await chorus.checkpoint.checkpoint()
    await assign(worker, {0}, recovered=True)
    await following(followed, kafka, lambda: followed.caught_up(0))

    def written_positions() -> list[bytes | None]:
        return [
            value
            for topic, _, records in changelogs.sent
            if "positions" in topic
            for key, value in records
            if key is not None and followed.key(0).encode() in key
        ]

    before = written_positions()
    await chorus.checkpoint.checkpoint()  # holds what the 3 records made
    assert written_positions() == before  # not yet: a position never passes the tables
    await chorus.checkpoint.checkpoint()
    assert written_positions() == [*before, b"3"]
    assert chorus.positions.get(followed.key(0), 0) == 3


async def test_a_fetch_made_before_its_partition_moved_is_not_applied() -> None:
    worker = offline_worker()
    followed = recaps_of(worker)
    read: list[tuple[int, int]] = []
    followed.on_record = lambda _k, _v, partition, offset: read.append((partition, offset))
    kafka = FakeTopic(
        followed.name,
        {0: recap_records(worker, 0, range(3)), 1: recap_records(worker, 1, range(2))},
    )

    async def from_the_start(partitions: Sequence[int]) -> dict[int, int]:
        return {}

    followed.committed = from_the_start  # type: ignore[method-assign]
    await assign(worker, {0, 1}, recovered=True)
    # Partition 1 moves away while the first fetch is under way.
    kafka.during_fetch = lambda: worker.runtime.ownership.assigned(frozenset({0}))
    only_0 = {TopicPartition(followed.name, 0)}
    await following(followed, kafka, lambda: len(read) == 3 and kafka.assignment() == only_0)
    assert read == [(0, 0), (0, 1), (0, 2)]


async def test_after_the_consumer_failed_the_partitions_are_read_again_from_where_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(followed_module, "RETRY_SECONDS", 0)
    worker = offline_worker()
    followed = recaps_of(worker)
    read: list[int] = []
    followed.on_record = lambda _k, _v, _p, offset: read.append(offset)
    worker.runtime.positions.set(followed.key(0), 0, 0)
    kafka = FakeTopic(followed.name, {0: recap_records(worker, 0, range(4))})
    fetch = kafka.getmany
    failures = [KafkaConnectionError()]

    async def failing_once(timeout_ms: int, max_records: int) -> Any:
        fetched = await fetch(timeout_ms, max_records)
        if failures:  # fetched, then lost: the consumer's position is past what was applied
            raise failures.pop()
        return fetched

    kafka.getmany = failing_once  # type: ignore[method-assign]
    await assign(worker, {0}, recovered=True)
    await following(followed, kafka, lambda: len(read) == 4)
    assert read == [0, 1, 2, 3]


async def test_a_record_on_another_partition_than_its_channels_is_logged_and_not_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only a producer that does not use Kafka's default partitioner puts a channel's
    summary or recap there. The channel's state and config are on its own partition, so
    nothing is filed under (nor read with the config of) the one it came on; the follower
    reads on past it."""
    worker = offline_worker()
    followed = recaps_of(worker)
    read: list[tuple[int, int]] = []
    followed.on_record = lambda _k, _v, partition, offset: read.append((partition, offset))
    home = worker.runtime.ownership.partition_of(CHANNEL)
    elsewhere = (home + 1) % worker.runtime.ownership.messages_partitions()
    followed.reading[elsewhere] = 4
    with caplog.at_level("WARNING"):
        await followed.take(CHANNEL.encode(), b"{}", elsewhere, 4)
    assert read == []
    assert followed.reading[elsewhere] == 5 and followed.read_through[elsewhere] == 4
    assert f"{CHANNEL!r}" in caplog.text and f"not partition {elsewhere}" in caplog.text
    await followed.take(CHANNEL.encode(), b"{}", home, 5)
    assert read == [(home, 5)]


async def test_records_are_applied_a_slice_at_a_time_the_event_loop_given_back_between() -> None:
    """A tick's lot of summaries (350-400 at 1,000,000 channels) applied at once held the
    fold role's loop, and the messages behind it, for as long as it took."""
    worker = offline_worker()
    followed = recaps_of(worker)
    turns = 0
    at_turn: list[int] = []
    followed.on_record = lambda *_: at_turn.append(turns)
    worker.runtime.positions.set(followed.key(0), 0, 0)
    kafka = FakeTopic(followed.name, {0: recap_records(worker, 0, range(250))})

    async def turning() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(turning())
    await assign(worker, {0}, recovered=True)
    await following(followed, kafka, lambda: len(at_turn) == 250)
    other.cancel()
    slices = [at_turn.count(turn) for turn in sorted(set(at_turn))]
    assert max(slices) == followed_module.SLICE_RECORDS and len(slices) == 3
