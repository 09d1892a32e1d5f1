"""streams.worker.intake: the lots the consumer hands over reach the stage in batches, in
order, within the batch bounds; what a rebalance invalidates (a suspended flow, an earlier
generation, lots still queued) is never taken; what is taken is tracked for Faust's wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from faust.types import Message

from streams.worker.intake import LOTS_QUEUED, Intake
from tests.unit.streams.worker.offline import offline_worker

TOPIC = "offline.messages"


def intake(batch_max: int = 5, wait: float = 0.05) -> Intake:
    """An intake of an offline app whose flow runs (as after the first assignment)."""
    app = offline_worker().runtime.app
    app.flow_control.resume()

    async def take(batch: Sequence[Message]) -> None:
        return None

    return Intake(app, "test", batch_max, wait, take)


def lot(intake: Intake, *offsets: int, generation: int | None = None) -> list[Message]:
    now = time.time()
    generation = intake.app.consumer_generation_id if generation is None else generation
    return [
        Message(TOPIC, 0, offset, now, 0, [], b"k", b"v", None, generation_id=generation)
        for offset in offsets
    ]


def offsets(batch: Sequence[Message]) -> list[int]:
    return [message.offset for message in batch]


async def a_put_waiting_for_room(taking: Intake) -> asyncio.Future[None]:
    """Fill the queue, then put one lot more: the put waits (as the consumer does)."""
    for offset in range(LOTS_QUEUED):
        await taking.put(lot(taking, offset))
    putting = asyncio.ensure_future(taking.put(lot(taking, LOTS_QUEUED)))
    await asyncio.sleep(0.01)
    assert not putting.done()
    return putting


async def test_lots_are_taken_in_order_in_batches_of_at_most_batch_max() -> None:
    taking = intake(batch_max=5)
    await taking.put(lot(taking, 0, 1, 2))
    await taking.put(lot(taking, 3, 4, 5, 6))
    await taking.put(lot(taking, 7))
    batches = taking.batches()
    assert offsets(await anext(batches)) == [0, 1, 2, 3, 4]
    # The rest of a lot a batch had no room for comes first in the next.
    assert offsets(await anext(batches)) == [5, 6, 7]


async def test_a_batch_waits_for_more_records_at_most_wait_after_its_first() -> None:
    taking = intake(batch_max=5, wait=0.2)
    await taking.put(lot(taking, 0))
    batches = taking.batches()
    first = asyncio.ensure_future(anext(batches))
    await asyncio.sleep(0.01)
    assert not first.done()  # waiting for more
    await taking.put(lot(taking, 1, 2, 3, 4))
    assert offsets(await asyncio.wait_for(first, 1)) == [0, 1, 2, 3, 4]  # full: at once

    await taking.put(lot(taking, 5))
    started = time.monotonic()
    assert offsets(await asyncio.wait_for(anext(batches), 1)) == [5]  # not full: after wait
    assert time.monotonic() - started >= 0.19


async def test_the_records_taken_are_tracked_until_acknowledged() -> None:
    taking = intake()
    records = lot(taking, 0, 1)
    assert taking.fresh(records) == records
    assert set(records) <= set(taking.app.consumer.unacked)  # Faust waits for them


async def test_nothing_is_taken_while_the_flow_is_suspended() -> None:
    taking = intake()
    taking.app.flow_control.suspend()  # a rebalance began
    records = lot(taking, 0, 1)
    assert taking.fresh(records) == []
    assert not set(records) & set(taking.app.consumer.unacked)


async def test_records_fetched_in_an_earlier_generation_are_not_taken() -> None:
    taking = intake()
    current = taking.app.consumer_generation_id
    stale = lot(taking, 0, 1, generation=current - 1)  # fetched before the last rebalance
    assert offsets(taking.fresh([*stale, *lot(taking, 2)])) == [2]
    assert not set(stale) & set(taking.app.consumer.unacked)


async def test_lots_still_queued_when_a_rebalance_suspends_the_flow_are_dropped() -> None:
    taking = intake()
    await taking.put(lot(taking, 0, 1))
    app = taking.app
    app.flow_control.suspend()  # Faust, as partitions are revoked: suspend, then clear
    app.flow_control.clear()
    app.flow_control.resume()
    await taking.put(lot(taking, 7))  # read again from the committed offset, and on
    assert offsets(await anext(taking.batches())) == [7]


async def test_the_consumer_waits_for_room_once_the_queue_is_full() -> None:
    taking = intake()
    putting = await a_put_waiting_for_room(taking)
    await anext(taking.batches())  # a batch taken: room again
    await asyncio.wait_for(putting, 1)


@pytest.mark.parametrize("batch_max", [1, 3])
async def test_run_hands_each_batch_to_the_stage_and_counts_what_it_passed(
    batch_max: int,
) -> None:
    taken: list[list[int]] = []
    taking = intake(batch_max=batch_max, wait=0.001)

    async def take(batch: Sequence[Message]) -> None:
        taken.append(offsets(batch))

    taking.take = take
    running = asyncio.ensure_future(taking.run())
    await taking.put(lot(taking, 0, 1, 2))
    while taking.passed < 3:
        await asyncio.sleep(0.001)
    running.cancel()
    assert [offset for batch in taken for offset in batch] == [0, 1, 2]
    assert max(len(batch) for batch in taken) == batch_max


async def test_a_lot_waiting_for_room_when_a_rebalance_clears_the_queue_is_dropped_quietly() -> (
    None
):
    """Faust's clear of the queues cancels what waits to put: the consumer's delivery must
    not end cancelled (its race would raise, and the fetcher would crash the role)."""
    taking = intake()
    putting = await a_put_waiting_for_room(taking)
    app = taking.app
    app.flow_control.suspend()  # partitions revoked: suspend, then clear
    app.flow_control.clear()
    await asyncio.wait_for(putting, 1)  # returns, not cancelled
    assert taking.lots.empty()


async def test_a_delivery_cancelled_itself_stays_cancelled() -> None:
    taking = intake()
    putting = await a_put_waiting_for_room(taking)
    putting.cancel()  # the consumer stopping, or its race lost
    with pytest.raises(asyncio.CancelledError):
        await putting


async def test_taking_a_batch_tells_faust_its_partitions_are_being_processed() -> None:
    """Faust's livelock check reads when a stream last took a record of each partition;
    without it, a backlog longer than its timeout logs errors blaming an idle agent."""
    taking = intake()
    inbound = taking.app.monitor.stream_inbound_time
    records = lot(taking, 0, 1)
    assert not inbound
    taking.fresh(records)
    assert set(inbound) == {records[0].tp}
