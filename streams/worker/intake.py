"""A role's intake of `chorus.messages` (both roles): the records its consumer fetched, handed
over a lot at a time and taken by the role's one stage on the topic in batches, without
Faust's per-record path.

Faust hands each record to an agent through its conductor and its stream: an `Event` and a
queue put per record, then the stream's step per event (a turn of the event loop, sensors,
the take buffer's processor) and an acknowledgement per event. Through a 100,000-channel
backlog Faust's stream, conductor and the rest of its code were 13 % of the fold role's
samples, 4 % after this change, with 19-31 % more messages a second
(`bench/results/issue-40-investigations.md`, "Faust's per-record path").
Here the consumer (`streams.worker.consumer`) hands the topic's records of each lot it
delivers to `Intake.put`, one queue put per lot; the stage takes them in batches
(`Intake.batches`), and its checkpoint acknowledges each (`Checkpoint.hold`).

What Faust's stream does per event is done here per batch, at the moment the stage takes it
(`Intake.fresh`), so that Faust's rebalance protocol holds as it does for its streams:

* records fetched while the flow was suspended, or in an earlier generation of the group (a
  rebalance since), are not taken: their partitions are read again from the committed
  offsets when they are assigned (Faust's stream skips such events);
* each record taken is tracked as unacknowledged (`Consumer.unacked`): Faust waits for them
  before it hands partitions over or stops, as for a stream's events, while the role's
  checkpoints acknowledge them (`ChorusApp._consumer_wait_empty`);
* the lots still queued are dropped when Faust suspends the flow (the queue is cleared with
  its streams' buffers, `app.flow_control`), never taken after their partitions moved;
* when a partition's records were last taken is told to Faust's livelock check, as its
  streams tell it (`Monitor.stream_inbound_time`).

Not kept: Faust's other sensors per message (chorus's metrics are its own, on /metrics).

Costs: per lot, a queue put and get; per record, a generation test and a set insert.
Memory: at most `LOTS_QUEUED` lots of `streams.worker.consumer.RECORDS_PER_LOT` records wait
(as many as a Faust stream's buffer holds); the consumer waits for room, in its race with a
suspension of the flow. Where Faust stopped fetching a partition whose stream buffer was
full, aiokafka's fetcher may meanwhile hold a fetch ahead for each partition (at most
CHORUS_CONSUMER_FETCH_BYTES each): each role peaked 20-23 MiB higher in the runs above.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from time import monotonic
from typing import Any

from faust.types import Message

# Lots queued between the consumer and the stage: 40 lots of 100 records, as many as Faust's
# stream buffer (stream_buffer_maxsize 4,096) holds.
LOTS_QUEUED = 40


class Intake:
    """The records of one topic, from the role's consumer to its stage (see the module).

    `batch_max`: the most records in a batch; `wait`: seconds a batch waits for more records
    after its first (CHORUS_BATCH_MAX, CHORUS_BATCH_WAIT_MS: Faust's `take_events`)."""

    def __init__(
        self,
        app: Any,
        name: str,
        batch_max: int,
        wait: float,
        take: Callable[[Sequence[Message]], Awaitable[None]],
    ) -> None:
        """`name`: the stage's; `take`: what it does with each batch (`run`)."""
        self.app = app
        self.name = name
        self.batch_max = batch_max
        self.wait = wait
        self.take = take
        # Records handed to `take` so far, in batches it returned from.
        self.passed = 0
        self.lots: asyncio.Queue[Sequence[Message]] = app.FlowControlQueue(
            maxsize=LOTS_QUEUED, clear_on_resume=True
        )
        # Records taken from the queue beyond a batch's `batch_max`: the next batch's first.
        self._over: list[Message] = []

    async def put(self, lot: Sequence[Message]) -> None:
        """A lot of records from the consumer, in its order (waits for room). Dropped if
        Faust clears the queue meanwhile (a rebalance suspending the flow, or the flow
        resuming), as the lots queued are: its partitions are read again from their
        committed offsets. Faust's clear cancels the wait for room, which must not end the
        consumer's delivery cancelled: its race with the suspension would raise that into
        Faust's fetcher, which crashes the role in the middle of the rebalance."""
        try:
            await self.lots.put(lot)
        except asyncio.CancelledError:
            delivery = asyncio.current_task()
            if delivery is not None and delivery.cancelling():
                raise  # the delivery itself is cancelled (its race lost, the consumer stopping)

    async def run(self) -> None:
        """Hand `take` each batch, until cancelled (the app's task)."""
        async for batch in self.batches():
            await self.take(batch)
            self.passed += len(batch)

    async def batches(self) -> AsyncIterator[list[Message]]:
        """Batches of at most `batch_max` records in the order they were put, each handed
        once it has `batch_max` records, or no more are queued and `wait` has passed since
        its first record; not yet tracked (`fresh`)."""
        loop = asyncio.get_running_loop()
        while True:
            batch, self._over = self._over, []
            if not batch:
                batch = list(await self.lots.get())
            deadline = loop.time() + self.wait
            while len(batch) < self.batch_max:
                if self.lots.empty():
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        lot = await asyncio.wait_for(self.lots.get(), remaining)
                    except TimeoutError:
                        break
                else:
                    lot = self.lots.get_nowait()
                batch += lot
            if len(batch) > self.batch_max:
                batch, self._over = batch[: self.batch_max], batch[self.batch_max :]
            yield batch

    def fresh(self, batch: Sequence[Message]) -> list[Message]:
        """The records of `batch` the stage may take now, each tracked as unacknowledged:
        none while the flow is suspended, none fetched in an earlier generation of the
        group (see the module). Call it right before the records are held."""
        app = self.app
        if not app.flow_control.is_active():
            return []
        generation = app.consumer_generation_id
        taken = [message for message in batch if message.generation_id == generation]
        track = app.consumer.unacked.add
        for message in taken:
            track(message)
        # When each partition's records were last taken, for Faust's livelock check (which
        # otherwise logs errors blaming an idle stream through any backlog it times).
        now = monotonic()
        inbound = app.monitor.stream_inbound_time
        for tp in {message.tp for message in taken}:
            inbound[tp] = now
        return taken
