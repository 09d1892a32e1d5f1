"""streams.worker.consumer: a role's consumer hands a fetch to the conductor in lots, each in
one task, in order, with Faust's rules for records read before and for gaps (the records of
a topic the app takes in lots go to its taker, a lot's at once); a suspension of the flow (a
rebalance) stops the delivery where it is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from streams.worker.consumer import RECORDS_PER_LOT, ChorusTransport, LotDeliveryConsumer
from tests.unit.streams.worker.offline import offline_worker

# A topic Faust's conductor delivers (the configs), and the one the role takes in lots.
PARTITION = TP("offline.channel-config", 0)
TAKEN = TP("offline.messages", 0)


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
    consumer: LotDeliveryConsumer, *offsets: list[int] | list[tuple[TP, int]]
) -> tuple[SimpleNamespace, list[int]]:
    """Make `consumer` fetch `offsets` (one list per fetch; an offset alone is of PARTITION),
    then stop its fetcher; the fetcher, and the number of races (`wait_first`) run."""
    fetcher = SimpleNamespace(_stopped=asyncio.Event(), closed=False)
    pending = list(offsets)
    races: list[int] = []

    async def getmany(timeout: float) -> AsyncIterator[tuple[TP, Any]]:
        if not pending:
            fetcher._stopped.set()
            return
        try:
            for one in pending.pop(0):
                tp, offset = one if isinstance(one, tuple) else (PARTITION, one)
                yield (tp, SimpleNamespace(offset=offset, topic=tp.topic, key=b"", value=b""))
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


async def test_the_records_of_a_taken_topic_go_to_its_taker_a_lot_at_a_time() -> None:
    """The role's messages skip the conductor: each lot's records of the topic reach the
    intake in one call, in order, after those read before; the others go to the conductor."""
    delivered: list[tuple[str, int]] = []
    taken: list[list[int]] = []

    async def deliver(message: Any) -> None:
        delivered.append((message.topic, message.offset))

    consumer = consumer_of(deliver)
    assert set(consumer.app.lot_takers) == {TAKEN.topic}  # the fold's intake

    async def take(lot: Any) -> None:
        assert all(message.topic == TAKEN.topic for message in lot)
        taken.append([message.offset for message in lot])

    consumer.app.lot_takers[TAKEN.topic] = take
    consumer._read_offset[TAKEN] = 1  # read from 1 (sought to its committed offset)
    records = [(TAKEN, offset) for offset in range(RECORDS_PER_LOT + 5)]
    records[3:3] = [(PARTITION, 7)]  # a config between two messages
    fetcher, races = fetches(consumer, records)
    await consumer._drain_messages(fetcher)
    assert delivered == [(PARTITION.topic, 7)]
    assert taken == [list(range(1, RECORDS_PER_LOT - 1)), list(range(RECORDS_PER_LOT - 1, 105))]
    assert len(races) == 2
    assert consumer._read_offset[TAKEN] == RECORDS_PER_LOT + 4


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


async def test_a_rebalance_while_the_intake_is_full_ends_the_fetch_without_an_error() -> None:
    """Faust clears the intake's queue with its stream buffers, cancelling the put the
    delivery waits in: the fetch ends as for any suspension, and nothing raises into
    Faust's fetcher (which would crash the role in the middle of the rebalance)."""

    async def deliver(message: Any) -> None:
        return None

    consumer = consumer_of(deliver)
    app = consumer.app
    app.flow_control.resume()
    intake = app.lot_takers[TAKEN.topic].__self__  # the fold role's intake
    while not intake.lots.full():
        intake.lots.put_nowait([])
    fetcher, _ = fetches(consumer, [(TAKEN, offset) for offset in range(2 * RECORDS_PER_LOT)])
    draining = asyncio.ensure_future(consumer._drain_messages(fetcher))
    while not intake.lots._putters:  # the first lot waits for room
        await asyncio.sleep(0.001)
    consumer.stop_flow()  # Faust, as partitions are revoked
    app.flow_control.suspend()
    app.flow_control.clear()
    await asyncio.wait_for(draining, timeout=5)
    assert fetcher.closed
