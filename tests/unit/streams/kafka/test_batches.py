"""streams.kafka.batches.publish: each partition's records in closed record batches, handed
to the producer at once, returned only once the broker acknowledged every batch; failures
logged and raised. The producer is a stand-in with aiokafka's batch interface whose batches
hold `capacity` records and settle when the test says."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka.errors import (
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
)

from streams.kafka.batches import Outbox, Published, PublishFailed, Record, Refused, publish

RECORDS: list[Record] = [(b"a", b"1", 0), (b"b", b"2", 1), (b"c", b"3", 0)]


class Batch:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: list[tuple[bytes | None, bytes | None]] = []
        self.closed = False

    def append(self, *, key: bytes | None, value: bytes | None, timestamp: None) -> object:
        if self.closed or (self.records and len(self.records) >= self.capacity):
            return None
        self.records.append((key, value))
        return object()

    def close(self) -> None:
        self.closed = True


class Metadata:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class Producer:
    def __init__(self, capacity: int = 100, unqueued_from: int | None = None) -> None:
        self.capacity = capacity
        self.sent: list[tuple[str, int, Batch]] = []
        self.futures: list[asyncio.Future[Any]] = []
        self.unqueued_from = unqueued_from

    def create_batch(self) -> Batch:
        return Batch(self.capacity)

    async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        if len(self.sent) == self.unqueued_from:
            raise KafkaTimeoutError()
        assert batch.closed  # sent at once, never lingering for more
        self.sent.append((topic, partition, batch))
        self.futures.append(asyncio.get_running_loop().create_future())
        return self.futures[-1]

    def settle(self, index: int, outcome: int | BaseException) -> None:
        if isinstance(outcome, BaseException):
            self.futures[index].set_exception(outcome)
        else:
            self.futures[index].set_result(Metadata(outcome))


async def publishing(producer: Producer, records: list[Record]) -> asyncio.Task[Any]:
    """publish() running against `producer`, once it has queued what it can."""
    task = asyncio.create_task(publish(producer, "t.events", records))
    for _ in range(5):
        await asyncio.sleep(0)
    return task


async def test_a_partitions_records_go_in_one_batch_and_each_gets_its_offset() -> None:
    producer = Producer()
    task = await publishing(producer, RECORDS)

    # One batch per partition, all queued before any acknowledgement, in order.
    assert [(t, p, b.records) for t, p, b in producer.sent] == [
        ("t.events", 0, [(b"a", b"1"), (b"c", b"3")]),
        ("t.events", 1, [(b"b", b"2")]),
    ]
    producer.settle(0, 40)
    await asyncio.sleep(0)
    assert not task.done()  # the other batch is not durable yet
    producer.settle(1, 7)
    published = await asyncio.wait_for(task, 1)
    assert published.offsets == [40, 7, 41] and published.refused == []


async def test_records_beyond_a_batchs_capacity_go_in_the_next_batch() -> None:
    producer = Producer(capacity=2)
    records: list[Record] = [(None, str(n).encode(), 3) for n in range(5)]
    task = await publishing(producer, records)
    assert [len(batch.records) for _, _, batch in producer.sent] == [2, 2, 1]
    for index, base in enumerate((10, 12, 14)):
        producer.settle(index, base)
    assert (await asyncio.wait_for(task, 1)).offsets == [10, 11, 12, 13, 14]


async def test_nothing_to_publish_sends_nothing() -> None:
    producer = Producer()
    published = await asyncio.wait_for(await publishing(producer, []), 1)
    assert producer.sent == [] and published.offsets == []


async def test_a_failed_batch_is_logged_and_raised_once_every_batch_settled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = Producer()
    task = await publishing(producer, RECORDS)

    producer.settle(1, NotLeaderForPartitionError())
    await asyncio.sleep(0)
    assert not task.done()  # the other batch is still in flight: wait for it
    producer.settle(0, 3)
    with pytest.raises(PublishFailed) as raised:
        await asyncio.wait_for(task, 1)
    assert str(raised.value).startswith(
        "1 of 3 records to t.events not acknowledged: NotLeaderForPartitionError"
    )
    assert isinstance(raised.value.__cause__, NotLeaderForPartitionError)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [str(raised.value)]


async def test_a_batch_that_cannot_be_queued_fails_the_call_after_the_queued_ones() -> None:
    producer = Producer(unqueued_from=1)
    task = await publishing(producer, RECORDS)

    assert len(producer.sent) == 1
    assert not task.done()  # the queued batch is awaited before the failure is reported
    producer.settle(0, 0)
    with pytest.raises(PublishFailed, match=r"^1 of 3 records to t\.events") as raised:
        await asyncio.wait_for(task, 1)
    assert isinstance(raised.value.__cause__, KafkaTimeoutError)


async def settle_next(producer: Producer, count: int, outcome: int | BaseException) -> None:
    """Wait until the producer has `count` batches queued, then settle the last one."""
    for _ in range(100):
        if len(producer.futures) >= count:
            break
        await asyncio.sleep(0)
    assert len(producer.futures) == count
    producer.settle(count - 1, outcome)


async def test_a_batch_too_large_for_the_topic_is_sent_again_a_record_at_a_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker judges a batch of records at once: a record refused with its batch may
    pass alone; one refused alone too is returned for the caller to report."""
    producer = Producer()
    task: asyncio.Task[Any] = await publishing(producer, RECORDS)

    producer.settle(0, MessageSizeTooLargeError())  # partition 0: records 0 and 2
    producer.settle(1, 5)
    await settle_next(producer, 3, 20)  # record 0 alone: accepted
    await settle_next(producer, 4, MessageSizeTooLargeError())  # record 2 alone: refused
    published = await asyncio.wait_for(task, 1)

    assert published.offsets == [20, 5, None]
    assert [(r.index, type(r.error)) for r in published.refused] == [(2, MessageSizeTooLargeError)]
    assert [batch.records for _, _, batch in producer.sent[2:]] == [[(b"a", b"1")], [(b"c", b"3")]]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("t.events refused a record of 1 bytes")


async def test_a_retriable_failure_when_sent_alone_still_raises() -> None:
    producer = Producer()
    task: asyncio.Task[Any] = await publishing(producer, RECORDS[:1])

    producer.settle(0, MessageSizeTooLargeError())
    await settle_next(producer, 2, NotLeaderForPartitionError())
    with pytest.raises(PublishFailed, match="not acknowledged"):
        await asyncio.wait_for(task, 1)


async def test_an_outbox_sends_what_tasks_send_within_its_linger_in_one_publish() -> None:
    lots: list[list[Record]] = []

    async def publish_lot(records: Sequence[Record]) -> Published:
        lots.append(list(records))
        too_large = [i for i, (_, value, _) in enumerate(records) if value == b"v1"]
        offsets = [None if i in too_large else 10 + i for i in range(len(records))]
        return Published(offsets, [Refused(i, MessageSizeTooLargeError()) for i in too_large])

    outbox = Outbox(publish_lot, linger=0.01)
    sent = [asyncio.ensure_future(outbox.send((b"k", f"v{i}".encode(), 0))) for i in range(3)]
    done = await asyncio.gather(*sent, return_exceptions=True)
    assert lots == [[(b"k", b"v0", 0), (b"k", b"v1", 0), (b"k", b"v2", 0)]]  # one publish
    assert done[0] == 10 and done[2] == 12
    assert isinstance(done[1], MessageSizeTooLargeError)  # refused for good: its sender only
    assert await outbox.send((b"k", b"later", 1)) == 10 and len(lots) == 2  # a new lot


async def test_an_outbox_lot_that_fails_fails_every_sender_in_it() -> None:
    async def publish_lot(records: Sequence[Record]) -> Published:
        raise PublishFailed("no leader")

    outbox = Outbox(publish_lot, linger=0.0)
    sent = [asyncio.ensure_future(outbox.send((b"k", b"v", 0))) for _ in range(2)]
    done = await asyncio.gather(*sent, return_exceptions=True)
    assert [type(outcome) for outcome in done] == [PublishFailed, PublishFailed]


async def test_an_outbox_lot_at_its_bound_goes_out_at_once() -> None:
    lots: list[int] = []

    async def publish_lot(records: Sequence[Record]) -> Published:
        lots.append(len(records))
        return Published(list(range(len(records))), [])

    outbox = Outbox(publish_lot, linger=60.0, max_records=3)  # the linger never ends here
    sent = [asyncio.ensure_future(outbox.send((b"k", b"v", 0))) for _ in range(7)]
    done = await asyncio.wait_for(asyncio.gather(*sent[:6]), 5)
    assert lots == [3, 3] and done == [0, 1, 2, 0, 1, 2]  # two full lots, not one of 7
    assert not sent[6].done()  # the seventh waits for its linger
    sent[6].cancel()
