"""streams.kafka.follow: the latest record per key of compacted topics, as the fold role
reads summaries and recaps: bounded memory, read back by position, restored on assignment,
a summary never going back (`streams.worker.latest.summary_goes_back`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiokafka import TopicPartition

from projections.recap import RecapPhase
from streams.kafka.follow import Follower, LatestBook
from streams.records import RecapRecord, SummaryRecord
from streams.settings import Settings
from streams.worker.latest import summary_goes_back

TOPIC = "t.summaries"


def summary(channel: str, last: int, text: str = "said") -> bytes:
    record = SummaryRecord(channel=channel, text=text, narrative=text, last_offset=last)
    return record.to_bytes()


class Log:
    """A fake `RangeReader`: the topic's records by (partition, offset)."""

    def __init__(self) -> None:
        self.records: dict[tuple[int, int], bytes] = {}
        self.reads: list[tuple[int, int, int]] = []

    async def read(
        self, partition: int, first: int, last: int, take: Callable[[Any], Any], limit: Any = None
    ) -> list[tuple[int, Any]]:
        self.reads.append((partition, first, last))
        found = []
        for offset in range(first, last + 1):
            value = self.records.get((partition, offset))
            if value is not None:
                found.append((offset, take(type("Record", (), {"value": value})())))
        return found


def book(kept_bytes: int = 10**9, log: Log | None = None) -> tuple[LatestBook[Any], list[int]]:
    dropped: list[int] = []
    found: LatestBook[Any] = LatestBook(
        TOPIC,
        SummaryRecord.model_validate_json,
        log,  # type: ignore[arg-type]
        goes_back=summary_goes_back,
        kept_bytes=kept_bytes,
        on_dropped=lambda: dropped.append(1),
    )
    return found, dropped


async def test_the_latest_valid_record_per_channel_and_where_it_was_read() -> None:
    latest, _ = book()
    latest.on_record("a/1", 0, 10, summary("a/1", 3, "first"))
    latest.on_record("a/1", 0, 11, summary("a/1", 7, "second"))
    latest.on_record("a/1", 0, 12, b"not json")  # ignored, logged
    latest.on_record("a/1", 0, 13, summary("a/1", 5, "older copy"))  # never goes back
    found = await latest.latest("a/1", 0)
    assert found.record is not None and found.record.text == "second"
    assert found.current.as_json() == {
        "topic": TOPIC,
        "partition": 0,
        "read_through": 13,
        "restoring": False,
    }
    latest.on_record("a/1", 0, 14, None)  # a tombstone
    assert (await latest.latest("a/1", 0)).record is None


async def test_past_the_bound_the_least_recent_record_is_dropped_and_read_back() -> None:
    log = Log()
    size = len(summary("c/0", 0))
    latest, dropped = book(kept_bytes=3 * size, log=log)
    for n in range(5):
        log.records[(0, n)] = summary(f"c/{n}", n)
        latest.on_record(f"c/{n}", 0, n, summary(f"c/{n}", n))
    assert list(latest.records) == ["c/2", "c/3", "c/4"] and len(dropped) == 2
    assert latest.size <= 3 * size and set(latest.positions) == {f"c/{n}" for n in range(5)}
    assert (await latest.latest("c/0", 0, read_back=False)).record is None  # a list's view
    assert log.reads == []
    found = await latest.latest("c/0", 0)  # read back by its position
    assert found.record is not None and found.record.last_offset == 0
    assert log.reads == [(0, 0, 0)]
    assert "c/0" in latest.records and len(latest.records) == 3  # kept again, within bound
    await latest.latest("c/0", 0)
    assert log.reads == [(0, 0, 0)]  # from memory now


async def test_a_partition_moved_away_is_forgotten() -> None:
    latest, _ = book()
    latest.on_record("a/1", 0, 1, summary("a/1", 1))
    latest.on_record("b/1", 1, 4, summary("b/1", 1))
    latest.restoring[1] = 9
    latest.keep_only({1})
    assert set(latest.positions) == {"b/1"} and (await latest.latest("a/1", 0)).record is None
    assert latest.current(1).restoring and latest.current(1).offset == 4
    assert latest.current(0).offset is None


def test_on_latest_is_told_only_of_records_that_become_the_latest() -> None:
    told: list[tuple[int | None, int]] = []
    latest: LatestBook[Any] = LatestBook(
        TOPIC,
        SummaryRecord.model_validate_json,
        None,
        goes_back=summary_goes_back,
        on_latest=lambda record, partition: told.append((record.last_offset, partition)),
    )
    latest.on_record("a/1", 2, 10, summary("a/1", 3))
    latest.on_record("a/1", 2, 11, b"not json")
    latest.on_record("a/1", 2, 12, summary("a/1", 1))  # goes back: not the latest
    latest.on_record("a/1", 2, 13, None)
    latest.on_record("a/1", 2, 14, summary("a/1", 8))
    assert told == [(3, 2), (8, 2)]


class FakeKafka:
    """The part of AIOKafkaConsumer the follower uses, over in-memory partitions; `assign`
    forgets every position, as aiokafka's does (a partition with none starts at its end)."""

    def __init__(self, topics: dict[str, dict[int, list[tuple[bytes, bytes | None]]]]) -> None:
        self.topics = topics
        self.assigned: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int] = {}
        self.sought: list[TopicPartition] = []

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = partitions
        self.positions = {tp: len(self.topics[tp.topic][tp.partition]) for tp in partitions}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self.sought += partitions
        for tp in partitions:
            self.positions[tp] = 0

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self.positions[tp] = len(self.topics[tp.topic][tp.partition])

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: len(self.topics[tp.topic][tp.partition]) for tp in partitions}

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]:
        found: dict[TopicPartition, list[Any]] = {}
        for tp in self.assigned:
            log = self.topics[tp.topic][tp.partition]
            start = self.positions[tp]
            taken = log[start : start + 2]  # a little at a time: restoring takes steps
            if taken:
                found[tp] = [
                    type(
                        "Record",
                        (),
                        {
                            "key": key,
                            "value": value,
                            "offset": start + n,
                            "partition": tp.partition,
                        },
                    )()
                    for n, (key, value) in enumerate(taken)
                ]
                self.positions[tp] = start + len(taken)
        return found


async def test_the_follower_restores_owned_partitions_from_the_beginning_then_follows() -> None:
    recap = RecapRecord(channel="a/1", text="t", narrative="t", phase=RecapPhase.COMPLETED)
    summaries = {
        0: [(b"a/1", summary("a/1", n)) for n in range(5)],
        1: [(b"b/1", summary("b/1", 0))],
    }
    recaps = {0: [(b"a/1", recap.to_bytes())], 1: []}
    kafka = FakeKafka({TOPIC: summaries, "t.recaps": recaps})
    summary_book, _ = book()
    recap_book: LatestBook[Any] = LatestBook("t.recaps", RecapRecord.model_validate_json, None)
    owned = {0}
    tail = Tail("t.messages")
    messages = {0: [(b"a/1", b"m0")], 1: [(b"b/1", b"m0")]}
    kafka.topics["t.messages"] = messages
    readers = [summary_book, recap_book, tail]
    follower = Follower(Settings(), "x:1", readers, lambda: frozenset(owned))

    await follower.step(kafka)  # type: ignore[arg-type]
    assert set(kafka.sought) == {TopicPartition(TOPIC, 0), TopicPartition("t.recaps", 0)}
    assert summary_book.current(0).restoring  # 2 of 5 read
    while summary_book.current(0).restoring:
        await follower.step(kafka)  # type: ignore[arg-type]
    found = await summary_book.latest("a/1", 0)
    assert found.record is not None and found.record.last_offset == 4
    assert found.current.offset == 4 and (await recap_book.latest("a/1", 0)).record == recap

    # A log's tail is read from where it was when taken over.
    assert tail.took_at == {0: 1} and tail.seen == []
    messages[0].append((b"a/1", b"m1"))
    summaries[0].append((b"a/1", summary("a/1", 9)))  # published later: followed
    await follower.step(kafka)  # type: ignore[arg-type]
    latest = (await summary_book.latest("a/1", 0)).record
    assert latest is not None and latest.last_offset == 9
    assert tail.seen == [(0, 1)]

    owned.add(1)  # a rebalance brought partition 1 too: partition 0 goes on where it was
    summaries[0].append((b"a/1", summary("a/1", 10)))
    await follower.step(kafka)  # type: ignore[arg-type]
    while summary_book.current(1).restoring:
        await follower.step(kafka)  # type: ignore[arg-type]
    kept = (await summary_book.latest("a/1", 0)).record
    assert kept is not None and kept.last_offset == 10
    assert (await summary_book.latest("b/1", 1)).record is not None

    owned.discard(0)  # then moved partition 0 away: forgotten
    await follower.step(kafka)  # type: ignore[arg-type]
    assert (await summary_book.latest("a/1", 0)).record is None
    assert tail.kept == [{0}, {0, 1}, {1}]


class Tail:
    """A reader of a log from its end (`from_beginning` False), recording what it is told."""

    from_beginning = False

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.restoring: dict[int, int] = {}
        self.took_at: dict[int, int] = {}
        self.seen: list[tuple[int, int]] = []
        self.kept: list[set[int]] = []

    def took(self, partition: int, end: int) -> None:
        self.took_at[partition] = end

    def on_consumed(self, record: Any) -> None:
        self.seen.append((record.partition, record.offset))

    def keep_only(self, partitions: Any) -> None:
        self.kept.append(set(partitions))
