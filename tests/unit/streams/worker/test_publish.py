"""Runtime.publish: a batch handed to the producer at once, returned only when the broker
acknowledged all of it; failures logged and raised. The producer is a stand-in that queues
like aiokafka's (a future per record) and settles each record when the test says."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from unittest.mock import patch

import pytest
from aiokafka.errors import (
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
)
from faust.exceptions import ProducerSendError

from streams.settings import Settings
from streams.worker.runtime import PublishFailed, Record, Runtime

RECORDS: list[Record] = [(b"a", b"1", 0), (b"b", b"2", 1), (None, b"3", None)]


class Producer:
    def __init__(self, unqueued_from: int | None = None) -> None:
        self.queued: list[tuple[str, bytes | None, bytes | None, int | None]] = []
        self.futures: list[asyncio.Future[Any]] = []
        self.unqueued_from = unqueued_from

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: float | None,
        headers: Any,
    ) -> asyncio.Future[Any]:
        if len(self.queued) == self.unqueued_from:
            raise ProducerSendError("Error while sending: KafkaTimeoutError()")
        self.queued.append((topic, key, value, partition))
        self.futures.append(asyncio.get_running_loop().create_future())
        return self.futures[-1]


async def publishing(producer: Producer, records: list[Record]) -> asyncio.Task[Any]:
    """publish() running against `producer`, once it has queued what it can."""
    runtime = Runtime(Settings(store="memory://", topic_prefix="t."), broker="127.0.0.1:1")

    async def started() -> Producer:
        return producer

    with patch.object(runtime.app, "maybe_start_producer", started):
        task = asyncio.create_task(runtime.publish(runtime.driver_events, records))
        for _ in range(5):
            await asyncio.sleep(0)
    return task


async def test_a_batch_is_queued_at_once_and_returns_when_every_record_is_acknowledged() -> None:
    producer = Producer()
    task = await publishing(producer, RECORDS)

    # All queued before any acknowledgement: one round trip for the batch, not one each.
    assert producer.queued == [("t.driver-events", k, v, p) for k, v, p in RECORDS]
    for future in producer.futures[:-1]:
        future.set_result(None)
        await asyncio.sleep(0)
        assert not task.done()  # the last record is not durable yet
    producer.futures[-1].set_result(None)
    await asyncio.wait_for(task, 1)


async def test_an_empty_batch_sends_nothing() -> None:
    producer = Producer()
    await asyncio.wait_for(await publishing(producer, []), 1)
    assert producer.queued == []


async def test_a_refused_record_is_logged_and_raised_once_the_whole_batch_settled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = Producer()
    task = await publishing(producer, RECORDS)

    producer.futures[1].set_exception(NotLeaderForPartitionError())
    await asyncio.sleep(0)
    assert not task.done()  # the others are still in flight: wait for them
    producer.futures[0].set_result(None)
    producer.futures[2].set_result(None)
    with pytest.raises(PublishFailed) as raised:
        await asyncio.wait_for(task, 1)
    assert str(raised.value).startswith(
        "1 of 3 records to t.driver-events not acknowledged: NotLeaderForPartitionError"
    )
    assert isinstance(raised.value.__cause__, NotLeaderForPartitionError)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [str(raised.value)]


async def test_a_record_that_cannot_be_queued_fails_it_and_the_rest_of_the_batch() -> None:
    producer = Producer(unqueued_from=1)
    task = await publishing(producer, RECORDS)

    assert len(producer.queued) == 1
    assert not task.done()  # the queued one is awaited before the batch is reported
    producer.futures[0].set_exception(KafkaTimeoutError())
    with pytest.raises(PublishFailed, match=r"^3 of 3 records to t\.driver-events") as raised:
        await asyncio.wait_for(task, 1)
    assert isinstance(raised.value.__cause__, ProducerSendError)


async def settle_next(producer: Producer, count: int, outcome: BaseException | None) -> None:
    """Wait until the producer has `count` records queued, then settle the last one."""
    for _ in range(100):
        if len(producer.futures) >= count:
            break
        await asyncio.sleep(0)
    assert len(producer.futures) == count
    if outcome is None:
        producer.futures[-1].set_result(None)
    else:
        producer.futures[-1].set_exception(outcome)


async def test_a_record_too_large_for_the_topic_is_sent_alone_then_returned_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker judges a batch of records at once: a record refused with its batch may
    pass alone; one refused alone too is returned for the caller to report."""
    producer = Producer()
    task: asyncio.Task[Any] = await publishing(producer, RECORDS)

    producer.futures[0].set_result(None)
    producer.futures[1].set_exception(MessageSizeTooLargeError())
    producer.futures[2].set_exception(MessageSizeTooLargeError())
    await settle_next(producer, 4, None)  # record 1 alone: accepted
    await settle_next(producer, 5, MessageSizeTooLargeError())  # record 2 alone: refused
    refused = await asyncio.wait_for(task, 1)

    assert [(r.index, type(r.error)) for r in refused] == [(2, MessageSizeTooLargeError)]
    assert [q[1:] for q in producer.queued[3:]] == [RECORDS[1], RECORDS[2]]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("t.driver-events refused a record of 1 bytes")


async def test_a_retriable_failure_when_sent_alone_still_raises() -> None:
    producer = Producer()
    task: asyncio.Task[Any] = await publishing(producer, RECORDS[:1])

    producer.futures[0].set_exception(MessageSizeTooLargeError())
    await settle_next(producer, 2, NotLeaderForPartitionError())
    with pytest.raises(PublishFailed, match="not acknowledged"):
        await asyncio.wait_for(task, 1)
