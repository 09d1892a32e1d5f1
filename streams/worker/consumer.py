"""A role's Faust consumer (both roles): Faust's aiokafka consumer, whose fetched records are
handed to the app a lot of records at a time instead of one task race per record.

Faust's fetcher hands each record to the app's conductor inside `Service.wait_first(callback,
suspend_flow.wait())`, so that a rebalance (which sets `suspend_flow`) does not wait for a
delivery blocked behind stopped flow control. `wait_first` makes four tasks per record (the
delivery, the suspension, the consumer's stopped and crashed events) and cancels three of
them: 25-65 µs a record on this machine, about a tenth of what the fold role spends on a
message at 1,000,000 channels (`bench/results/issue-40-investigations.md`, "Faust's
per-record race"). Here the race is run once per lot of `RECORDS_PER_LOT` records of a fetch:
a lot's records are delivered one after the other by one task, and a suspension cancels that
task where it is, as it cancels one record's delivery in Faust. The records after it are not
delivered (Faust's own fetcher still started each of their deliveries, in a race the
suspension had already won); the partitions are sought to their committed offsets when they
are assigned again.

The records of a topic the app takes in lots (`ChorusApp.lot_takers`: chorus.messages, taken
by the role's stage through `streams.worker.intake`) skip the conductor: each lot's records
of it are handed to the taker at once, after the lot's other records went to the conductor.

Everything else is Faust's: the group, the assignment, the fetch (`getmany`: flow control,
the generation, paused partitions), the read offsets, gaps, commits and the conductor.

Guarantee: the records of a fetch reach the conductor (or their topic's taker) in the order
Faust's fetch yields them, each once, or (on a suspension, or the consumer stopping) not at
all from the lot being delivered on: the rest of that fetch is left for the next assignment.
Memory: a lot's `Message` objects, over what Faust's fetch holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka

# Records delivered in one race with a suspension of the flow, the event loop given back
# between two lots (Faust's fetcher gives it back every 100 records too). What a lot holds
# besides the fetched records themselves: a `Message` per record.
RECORDS_PER_LOT = 100

# Where the records of a topic the app takes in lots go (`streams.worker.intake.Intake.put`):
# a lot's records of that topic, in order, at once.
LotTaker = Callable[[Sequence[Any]], Awaitable[None]]


class LotDeliveryConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer delivering a lot of records per task (see the module)."""

    # Faust's count of acknowledgements since its last commit (undeclared there).
    _n_acked: int

    async def _drain_messages(self, fetcher: Any) -> None:
        consumer_stopped, fetcher_stopped = self._stopped.is_set, fetcher._stopped.is_set
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                self.diag.set_flag(CONSUMER_FETCHING)
                fetched = self.getmany(timeout=1.0)
                # getmany may return at once, again and again: give the loop back.
                await self.sleep(0)
                if not self.should_stop:
                    await self._deliver_in_lots(fetched)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as error:
            self.log.exception("Drain messages raised: %r", error)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _deliver_in_lots(self, fetched: AsyncGenerator[tuple[Any, Any], None]) -> None:
        """The fetch's records, `RECORDS_PER_LOT` at a time, each lot delivered in a race
        with a suspension of the flow (and the consumer's stop): a lot the race cancels ends
        the fetch."""
        lot: list[tuple[Any, Any]] = []
        async for pair in fetched:
            lot.append(pair)
            if len(lot) == RECORDS_PER_LOT:
                if not await self._race(lot):
                    await fetched.aclose()
                    return
                lot = []
        if lot:
            await self._race(lot)

    async def _race(self, lot: Sequence[tuple[Any, Any]]) -> bool:
        """Deliver `lot` unless the flow is suspended or the consumer stops first; whether
        it was delivered whole."""
        delivery = self._deliver(lot)
        race = await self.wait_first(delivery, self.suspend_flow.wait())
        return delivery in race.done

    async def _deliver(self, lot: Sequence[tuple[Any, Any]]) -> None:
        """Hand each record of a lot to the conductor, as Faust's fetcher does, or, for a
        topic the app takes in lots (`ChorusApp.lot_takers`), the lot's records of it at
        once: a record before the partition's read offset was delivered already and is
        skipped; a jump past it is a gap Faust acknowledges for the partition's commits."""
        read_offset = self._read_offset
        acks_enabled_for = self.app.topics.acks_enabled_for
        callback = self.callback
        takers: dict[str, LotTaker] = self.app.lot_takers
        taken: dict[str, list[Any]] = {}
        for tp, message in lot:
            offset = message.offset
            last = read_offset[tp]
            if last is not None and offset < last:
                continue
            if last and offset - last > 1 and acks_enabled_for(message.topic):
                await self._add_gap(tp, last + 1, offset)
            if self._commit_every is not None and self._n_acked >= self._commit_every:
                self._n_acked = 0
                await self.commit()
            if message.topic in takers:
                taken.setdefault(message.topic, []).append(message)
            else:
                await callback(message)
            read_offset[tp] = offset
        for topic, messages in taken.items():
            await takers[topic](messages)


class ChorusTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with `LotDeliveryConsumer`."""

    Consumer = LotDeliveryConsumer
