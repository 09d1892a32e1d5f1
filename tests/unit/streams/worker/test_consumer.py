"""streams.worker.consumer: a role's consumer hands a fetch to the conductor in lots, each in
one task, in order, with Faust's rules for records read before and for gaps; a suspension of
the flow (a rebalance) stops the delivery where it is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from streams.worker.consumer import RECORDS_PER_LOT, ChorusTransport, LotDeliveryConsumer
from tests.unit.streams.worker.offline import offline_worker

PARTITION = TP("offline.chorus.messages", 0)


def consumer_of(callback: Callable[[Any], Awaitable[None]]) -> LotDeliveryConsumer:
    app = offline_worker().runtime.app
    assert isinstance(app.transport, ChorusTransport)
    consumer = app.transport.create_consumer(
        callback=callback,
        on_partitions_revoked=lambda revoked: None,
        on_partitions_assigned=lambda assigned: None,
    )
    assert isinstance(consumer, LotDeliveryConsumer)
    return consumer


def fetches(
    consumer: LotDeliveryConsumer, *offsets: list[int]
) -> tuple[SimpleNamespace, list[int]]:
    """Make `consumer` fetch `offsets` (one list per fetch) of PARTITION, then stop its
    fetcher; the fetcher, and the number of races (`wait_first`) run."""
    fetcher = SimpleNamespace(_stopped=asyncio.Event(), closed=False)
    pending = list(offsets)
    races: list[int] = []

    async def getmany(timeout: float) -> AsyncIterator[tuple[TP, Any]]:
        if not pending:
            fetcher._stopped.set()
            return
        try:
            for offset in pending.pop(0):
                yield (
                    PARTITION,
                    SimpleNamespace(offset=offset, topic=PARTITION.topic, key=b"", value=b""),
                )
        except GeneratorExit:
            fetcher.closed = True
            raise

    original = consumer.wait_first

    async def wait_first(*coros: Any, **kwargs: Any) -> Any:
        races.append(len(coros))
        return await original(*coros, **kwargs)

    consumer.getmany = getmany
    consumer.wait_first = wait_first
    return fetcher, races


async def test_a_fetch_is_delivered_in_order_a_race_per_lot_not_records_read_before() -> None:
    delivered: list[int] = []

    async def deliver(message: Any) -> None:
        delivered.append(message.offset)

    consumer = consumer_of(deliver)
    consumer._read_offset[PARTITION] = 5  # delivered through 5 before
    first = [3, 4, *range(6, 6 + 2 * RECORDS_PER_LOT + 10)]
    fetcher, races = fetches(consumer, first, [first[-1] + 1])
    await consumer._drain_messages(fetcher)
    assert delivered == [*first[2:], first[-1] + 1]
    assert len(races) == 3 + 1  # one per lot of each fetch, not one per record
    assert consumer._read_offset[PARTITION] == first[-1] + 1


async def test_a_jump_past_the_read_offset_is_a_gap_for_the_commits() -> None:
    async def deliver(message: Any) -> None:
        return None

    consumer = consumer_of(deliver)
    consumer.app.topics.acks_enabled_for = lambda topic: True
    gaps: list[tuple[TP, int, int]] = []

    async def add_gap(tp: TP, first: int, last: int) -> None:
        gaps.append((tp, first, last))

    consumer._add_gap = add_gap
    consumer._read_offset[PARTITION] = 5
    fetcher, _ = fetches(consumer, [6, 9])
    await consumer._drain_messages(fetcher)
    assert gaps == [(PARTITION, 7, 9)]


async def test_a_suspended_flow_stops_the_delivery_where_it_is() -> None:
    delivered: list[int] = []
    blocked = asyncio.Event()
    cancelled: list[int] = []

    async def deliver(message: Any) -> None:
        if message.offset == 2:  # blocked, as behind stopped flow control
            blocked.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(message.offset)
                raise
        delivered.append(message.offset)

    consumer = consumer_of(deliver)
    fetcher, _ = fetches(consumer, list(range(1, 2 * RECORDS_PER_LOT + 1)))
    draining = asyncio.ensure_future(consumer._drain_messages(fetcher))
    await blocked.wait()
    consumer.suspend_flow.set()  # a rebalance begins
    await asyncio.wait_for(draining, timeout=5)
    assert delivered == [1]
    assert cancelled == [2]  # and nothing after it handed over, in this lot or the next
    assert fetcher.closed  # the fetch ends with the lot the suspension cancelled
    assert consumer._read_offset[PARTITION] == 1
