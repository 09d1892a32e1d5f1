"""The fold role's stage: validate each record on `chorus.messages`, fold it into the
channel's state, then wake drivers with the new state (state first, then the signal).

Records arrive in batches (`streams.worker.intake`: at most `CHORUS_BATCH_MAX` records or
`CHORUS_BATCH_WAIT_MS`, past Faust's per-record path). A batch's folds change the state in
memory (the checkpointed fold tables, `streams.worker.checkpoint`, which every view and
timer reads); its driver events go to the broker in record batches (`Runtime.publish`) as
they are folded, `SIGNALS_AT_ONCE` at a time and in order (each lot once the one before is
acknowledged), and the stage waits until the broker has acknowledged them all. Nothing on
this path writes a table: each changed key reaches its table and changelog once per checkpoint,
and the batch's records stay unacknowledged (`Checkpoint.hold`) until a checkpoint holds
what they changed, so the source offsets are committed only after the state and the
signals are durable.

Guarantee: at-least-once with idempotent folds. Each fold records the last offset it
applied; a redelivered record (after a crash, messages since the last checkpoint) is not
applied again where the checkpointed state has it, but its driver events are sent again,
so no driver event is ever lost. One driver event per message carries what it changed in
each projection and the live part of each state; consumers dedupe by (channel, offset).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import NamedTuple

from faust.types import Message as Record

from projections.channel import ProjectionStep, StepFailure, decide, step
from projections.model import Message, MessageError
from projections.projection import Folded, bound_counters_of
from projections.termination import decision_to_json
from streams.kafka.batches import until_acknowledged
from streams.records import (
    DriverEvent,
    MisplacedRecord,
    driver_event,
)
from streams.worker.folds import FoldTables
from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# Channels whose misplaced records were already explained in the log, what each costs in
# the small caches: the least recently seen is forgotten first (and explained again when
# it shows up again).
MISPLACED_LOGGED_FRACTION = 0.05
MISPLACED_ENTRY_BYTES = 200
# Waits between attempts to publish a batch's driver events the broker did not acknowledge:
# doubling from the first to the last, then the last until it does.
PUBLISH_RETRY_SECONDS = (1.0, 30.0)
# A batch's driver events go out this many at a time as its messages are folded, so a large
# batch (a burst, a backlog) never holds its first events while the rest folds (about 20 ms
# of folding); each lot after the one before is acknowledged (in order).
SIGNALS_AT_ONCE = 64
# Batches whose driver events may be on their way while the next folds: past this the fold
# waits for the broker (a bound on what is held in memory).
BATCHES_IN_FLIGHT = 4

# A stage told of each message the fold applied, as it is applied: (channel, its partition,
# the message's offset, the steps of each projection). It reads; the fold stays the one
# owner of the state.
FoldWatcher = Callable[[str, int, int, Sequence[ProjectionStep]], None]
# A stage handed each record the fold takes, in log order and before the fold's gate (key,
# value, partition, offset, Kafka time in ms), so that no other consumer in the process
# reads the log again. It reads; it changes no state of the fold.
RecordReader = Callable[[bytes | None, bytes | None, int, int, int], None]


class Signal(NamedTuple):
    """A driver event ready to send, and the position of the message it is about."""

    key: bytes
    value: bytes
    partition: int
    offset: int


def signal_of(event: DriverEvent, limit: int) -> Signal:
    return Signal(event.channel.encode(), event.fitted(limit), event.partition, event.offset)


class Folder:
    """The fold stage's body, apart from its intake (`Runtime.take_messages`) so tests can
    drive it."""

    def __init__(
        self,
        chorus: Runtime,
        watchers: Sequence[FoldWatcher] = (),
        readers: Sequence[RecordReader] = (),
    ) -> None:
        if chorus.folds is None:
            raise ValueError("the fold stage runs in the fold role")
        self.chorus = chorus
        self.folds: FoldTables = chorus.folds
        self.settings = chorus.settings
        self.watchers = watchers
        self.readers = readers
        self._misplaced_logged = chorus.cache(
            "misplaced-logged", "small", MISPLACED_LOGGED_FRACTION
        )
        # The last lot of driver events handed to the broker (each lot waits for the one
        # before), and the batches whose events may still be on their way.
        self.sending: asyncio.Future[None] | None = None
        self.in_flight = 0

    async def on_record(
        self,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        timestamp_ms: int = 0,
    ) -> list[DriverEvent]:
        if not await self.chorus.in_order(partition, offset):
            return []
        for reader in self.readers:
            reader(key, value, partition, offset, timestamp_ms)
        # The partition's next offset is past this record now, whatever follows: a rejected
        # record changes no other state, and the record after it folds.
        gate = self.chorus.gate
        try:
            message = gate.validate(key, value, partition, offset, timestamp_ms)
        except MisplacedRecord as error:
            await self.send_misplaced(error, key, value, partition, offset)
            return []
        except MessageError as error:
            await gate.dead_letter(error.reason, "validate", key, value, partition, offset)
            return []
        try:
            return await self.fold(message, key, value, partition, offset)
        except Exception as error:  # never crash the worker on one record
            log.exception("fold failed for %s@%s", partition, offset)
            reason = f"fold failed: {type(error).__name__}: {error}"
            await gate.dead_letter(reason, "fold", key, value, partition, offset)
            return []

    async def on_batch(self, batch: Sequence[Record]) -> None:
        """Fold a batch of records (`Runtime.take_messages` holds them until a checkpoint
        holds what they changed), then wake drivers: the batch's driver
        events are on their way when this returns, after the batches before (`sent`), and
        the next batch folds meanwhile; a checkpoint acknowledges the records only once
        their events are acknowledged (`Checkpoint.before_acknowledging`)."""
        signals: list[Signal] = []
        limit = self.settings.max_message_bytes
        for record in batch:
            woken = await self.on_record(
                record.key,
                record.value,
                record.partition,
                record.offset,
                int(record.timestamp * 1000),  # Faust gives seconds
            )
            # Encoded now: the states they carry must not change before the batch ends.
            signals += [signal_of(driver_event, limit) for driver_event in woken]
            if len(signals) >= SIGNALS_AT_ONCE:  # on their way while the rest folds
                self.send(signals)
                signals = []
                await asyncio.sleep(0)  # let it queue its record batches now
        if signals:
            self.send(signals)
        self.in_flight += 1
        if self.in_flight > BATCHES_IN_FLIGHT:  # the broker is behind: wait for it
            await self.sent()

    def send(self, signals: Sequence[Signal]) -> None:
        """Publish `signals` once every lot before them is acknowledged (in order)."""
        self.sending = asyncio.ensure_future(self.signal_after(self.sending, signals))

    async def sent(self) -> None:
        """Until every driver event handed over so far is acknowledged (or refused for
        good, and dead-lettered)."""
        while self.sending is not None:
            sending = self.sending
            await sending
            if self.sending is sending:
                self.sending = None
        self.in_flight = 0

    async def signal_after(
        self, earlier: asyncio.Future[None] | None, signals: Sequence[Signal]
    ) -> None:
        """`signal` once the `earlier` events are acknowledged: a channel's driver events
        reach the topic in the order of its messages, retries included."""
        if earlier is not None:
            await earlier
        await self.signal(signals)

    async def signal(self, signals: Sequence[Signal]) -> None:
        """Publish the batch's driver events, again and again (with backoff) while the broker
        does not acknowledge all of them: a checkpoint acknowledges the batch's records once
        this returns (`Checkpoint.before_acknowledging`), so returning early would lose
        them. Each failed attempt is logged (`Runtime.publish`); a
        repeated attempt may duplicate events, which consumers dedupe by (channel, offset).
        An event the broker refuses for good (too large for the topic) is not retried: it is
        counted (`chorus_refused_records_total`) and dead-lettered with its message's
        position, and the messages after it fold on."""
        records = [(s.key, s.value, s.partition) for s in signals]
        published = await until_acknowledged(
            lambda: self.chorus.publish(self.chorus.driver_events, records),
            PUBLISH_RETRY_SECONDS,
            f"sending the batch's {len(signals)} driver events again in %gs",
        )
        refused = published.refused
        topic = self.chorus.driver_events.get_topic_name()
        for one in refused:
            signal = signals[one.index]
            self.chorus.meter.refused_records.labels(topic).inc()
            await self.chorus.gate.dead_letter(
                f"the broker refused its driver event for good ({type(one.error).__name__}: "
                f"{one.error}); the message is folded, its state is in the tables",
                "driver-event",
                signal.key,
                None,
                signal.partition,
                signal.offset,
            )

    def _count_bounds(self, before: Folded | None, done: ProjectionStep) -> None:
        """`chorus_state_bound_hits_total`: the bounds this fold met, from the counters the
        states keep (the states say how often; the metric says it happened here, now)."""
        name = done.projection.name
        if done.failure is StepFailure.STATE_BYTES:
            self.chorus.meter.state_bounds.labels(name, StepFailure.STATE_BYTES.value).inc()
        if not done.applied or not isinstance(done.folded.state, dict):
            return
        previous = before.state if before is not None and isinstance(before.state, dict) else {}
        for counter in bound_counters_of(done.projection):
            grown = done.folded.state.get(counter, 0) - previous.get(counter, 0)
            if grown > 0:
                self.chorus.meter.state_bounds.labels(name, counter).inc(grown)

    async def fold(
        self, message: Message, key: bytes | None, value: bytes | None, partition: int, offset: int
    ) -> list[DriverEvent]:
        channel = message.channel
        folds = self.folds.folds(channel, partition)
        stored = {name: fold.folded if fold else None for name, fold in folds.items()}
        steps = step(
            self.chorus.projections,
            stored,
            message,
            offset,
            self.folds.loaded(channel, folds),
            max_state_bytes=self.settings.max_state_bytes,
        )
        conditions = self.chorus.configs.conditions(channel, partition)
        decision = decision_to_json(decide(conditions, steps))
        self.folds.write(channel, folds, steps, partition, offset)
        for done in steps:
            self._count_bounds(stored.get(done.projection.name), done)
        for watcher in self.watchers:
            watcher(channel, partition, offset, steps)
        event = driver_event(message, partition, offset, steps, decision)
        if event.errors:
            reasons = "; ".join(f"{name}: {error}" for name, error in event.errors.items())
            await self.chorus.gate.dead_letter(
                "projection raised or outgrew its state limit: " + reasons,
                "project",
                key,
                value,
                partition,
                offset,
            )
        return [event]

    async def send_misplaced(
        self,
        error: MisplacedRecord,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
    ) -> None:
        """Dead-letter a record on the wrong partition; the log says why once per channel,
        since a producer with another partitioner misplaces most of a channel's records."""
        self.chorus.meter.misplaced_records.inc()
        first = self._misplaced_logged.get(error.channel) is None
        self._misplaced_logged.put(error.channel, True, MISPLACED_ENTRY_BYTES, partition)
        level = logging.WARNING if first else logging.DEBUG
        await self.chorus.gate.dead_letter(
            error.reason, "validate", key, value, partition, offset, level=level
        )


def install(
    chorus: Runtime, watchers: Sequence[FoldWatcher] = (), readers: Sequence[RecordReader] = ()
) -> Folder:
    """The fold role's one stage on `chorus.messages`: hand each record to the `readers`,
    decode and validate once, fold, write the fold tables, tell the `watchers`, then the
    driver events (the context role reads the log on its own)."""
    folder = Folder(chorus, watchers, readers)
    chorus.checkpoint.before_acknowledging.append(folder.sent)
    chorus.take_messages("fold-messages", folder.on_batch)
    return folder
