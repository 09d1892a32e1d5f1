"""Stage 1: validate each record on `chorus.messages`, fold it into the projection tables,
then wake drivers with the new state (state first, then the signal).

Records arrive in batches (`Stream.take_events`); every table write of the batch, the later
stages' included, is staged (`streams.worker.staging`) and each changed key written once before
the batch's driver events are published (`Runtime.publish`, all at once, waiting for the
broker's acknowledgement of every one). The batch is acknowledged after that.

Guarantee: at-least-once with idempotent folds. Each fold records the last offset it
applied; a redelivered record is not applied again, but its driver events are sent again,
so no driver event is ever lost. One driver event per message carries what it changed in
each projection and the live part of each state; consumers dedupe by (channel, offset).
Commitments and overview folds are stored split (`streams.fold_store`): the counters in the
fold table, each commitment (the overview's participants, by bucket) in a second table.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from faust.types import TP as TopicPartition
from faust.types import EventT
from pydantic import BaseModel

from projections.channel import ProjectionStep, decide, step
from projections.commitments import CommitmentsState, expiry_event, overdue
from projections.model import (
    LogPosition,
    Message,
    MessageError,
    encode_message,
    utc_now,
)
from projections.projection import Folded, bound_counters_of
from projections.termination import decision_to_json
from streams.dead_letters import send_dead_letter
from streams.fold_store import (
    earliest_deadline,
    part_key,
    record_deadline,
    stored_fold,
    whole_fold,
)
from streams.records import (
    DriverEvent,
    MisplacedRecord,
    driver_event,
    validate_record,
)
from streams.worker.runtime import PublishFailed, Runtime
from streams.worker.staging import CACHED_KEYS, processing
from streams.worker.stall import Stall, StallWatch

log = logging.getLogger(__name__)

LOADED_STATES_LIMIT = 20_000
# How often the stall watchdog looks at the owned partitions (it acts after STALL_PATIENCE).
STALL_CHECK_SECONDS = 5.0
# Channels whose misplaced records were already explained in the log; the oldest is
# forgotten first (and explained again when it shows up again).
MISPLACED_LOGGED_LIMIT = 10_000
# Waits between attempts to publish a batch's driver events the broker did not acknowledge:
# doubling from the first to the last, then the last until it does.
PUBLISH_RETRY_SECONDS = (1.0, 30.0)

# Split folds' replaced parts are deleted at most this often, or once this many are staged
# (`Folder.delete_replaced`): each flush waits for the producer's acknowledgements.
DELETIONS_EVERY_SECONDS = 1.0
DELETIONS_KEPT = 10_000


class Signal(NamedTuple):
    """A driver event ready to send, and the position of the message it is about."""

    key: bytes
    value: bytes
    partition: int
    offset: int


def signal_of(event: DriverEvent, limit: int) -> Signal:
    return Signal(event.channel.encode(), event.fitted(limit), event.partition, event.offset)


class Folder:
    """The fold agent's body, separate from Faust's decorators so tests can drive it."""

    def __init__(self, chorus: Runtime) -> None:
        self.chorus = chorus
        self.settings = chorus.settings
        self._expiry_sent: set[tuple[str, str]] = set()
        # channel -> the earliest deadline among its active commitments (none: not listed),
        # so the expiry timer visits only channels that can be overdue. The table is scanned
        # in full from time to time (`Rescan`: rebalance, recovery, replay rebuilds).
        self._deadlines: dict[str, datetime] = {}
        self._rescan = chorus.staging.rescan()
        self._stalls = StallWatch()
        # Whole folds of recently folded channels, loaded and dumped: parsing a long
        # channel's state from its table values (a split fold's from many) costs more than
        # folding a message into it. (version, offset, loaded state, dumped state)
        self._loaded: OrderedDict[tuple[str, str], tuple[int, int, Any, Any]] = OrderedDict()
        # Staged in the order they flush (`streams.fold_store`): a split fold's new and
        # changed parts, then the fold records; the deletions (evicted ended commitments,
        # active ones that ended, replaced buckets) only once the broker has the records
        # that no longer refer to them (`wake`). Not guarded: the fold step bounds every
        # state (max_state_bytes).
        self.parts = {
            name: chorus.staging.stage(table, cache=CACHED_KEYS)
            for name, table in chorus.parts.items()
        }
        self.folds = {
            name: chorus.staging.stage(table, cache=CACHED_KEYS, guard=False)
            for name, table in chorus.folds.items()
        }
        self.removed = {
            name: chorus.staging.stage(table, deferred=True) for name, table in chorus.parts.items()
        }
        self.positions = chorus.staging.stage(chorus.positions, cache=CACHED_KEYS)
        self._misplaced_logged: OrderedDict[str, None] = OrderedDict()
        self._deleted_at = float("-inf")

    def loaded_states(self, channel: str, stored: dict[str, Folded | None]) -> dict[str, Any]:
        """States in memory that still match the table (same version and offset)."""
        found = {}
        for name, folded in stored.items():
            cached = self._loaded.get((channel, name))
            if folded is not None and cached is not None:
                version, offset, state, _ = cached
                if (version, offset) == (folded.version, folded.offset):
                    found[name] = state
        return found

    def stored_folds(self, channel: str, records: dict[str, Any]) -> dict[str, Folded | None]:
        """The whole folds the table `records` stand for: from memory while it matches them
        (same version and offset), else read back (a split fold from its second table too)."""
        stored: dict[str, Folded | None] = {}
        for name, record in records.items():
            if record is None:
                stored[name] = None
                continue
            cached = self._loaded.get((channel, name))
            if cached is not None and cached[:2] == (record["version"], record["offset"]):
                stored[name] = Folded.model_construct(
                    projection=name, version=cached[0], offset=cached[1], state=cached[3]
                )
                continue
            read = self._reader(name) if name in self.parts else None
            stored[name] = whole_fold(record, read, channel)
        return stored

    def _reader(self, name: str) -> Callable[[str], Any]:
        """Reads a key of a split fold's second table as the batch has staged it: a part
        whose deletion is staged (it flushes after the fold records) is gone already."""
        parts, removed = self.parts[name], self.removed[name]

        def read(key: str) -> Any:
            return None if removed.deleting(key) else parts.get(key)

        return read

    def remember(self, channel: str, steps: list[ProjectionStep]) -> None:
        for done in steps:
            # Only immutable pydantic states: a plain-data state must be folded from its
            # table form (JSON types), as it would be after a restart.
            if not isinstance(done.state, BaseModel):
                continue
            key = (channel, done.projection.name)
            folded = done.folded
            self._loaded[key] = (folded.version, folded.offset, done.state, folded.state)
            self._loaded.move_to_end(key)
        while len(self._loaded) > LOADED_STATES_LIMIT:
            self._loaded.popitem(last=False)

    async def on_record(
        self,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        timestamp_ms: int = 0,
    ) -> list[DriverEvent]:
        expected = self.positions.get(str(partition))
        if expected is not None and offset > expected:
            # chorus.messages is never compacted and never transactional, so its offsets are
            # contiguous: a jump means the consumer skipped records (seen after restarts).
            # Folding this one would make the offset guard drop the skipped ones for good.
            log.error("partition %s jumped from %s to %s; seek back", partition, expected, offset)
            topic = self.chorus.messages.get_topic_name()
            await self.chorus.app.consumer.seek(TopicPartition(topic, partition), expected)
            return []
        if expected is None or offset == expected:
            self.positions[str(partition)] = offset + 1
        # The partition's next offset is past this record now, whatever follows: a rejected
        # record changes no other state, and the record after it folds.
        position = LogPosition(partition, offset, timestamp_ms)
        try:
            message = validate_record(
                key,
                value,
                self.settings.max_message_bytes,
                position,
                partition=partition,
                partitions=self.chorus.messages_partitions(),
            )
        except MisplacedRecord as error:
            await self.send_misplaced(error, key, value, partition, offset)
            return []
        except MessageError as error:
            await self.send_dead_letter(error.reason, "validate", key, value, partition, offset)
            return []
        try:
            return await self.fold(message, key, value, partition, offset)
        except Exception as error:  # never crash the worker on one record
            log.exception("fold failed for %s@%s", partition, offset)
            reason = f"fold failed: {type(error).__name__}: {error}"
            await self.send_dead_letter(reason, "fold", key, value, partition, offset)
            return []

    async def on_batch(self, batch: Sequence[EventT]) -> None:
        """Fold a batch taken from the stream, write each table key once, then wake drivers."""
        signals: list[Signal] = []
        for event in batch:
            record = event.message
            with processing(event):
                woken = await self.on_record(
                    event.key,
                    event.value,
                    record.partition,
                    record.offset,
                    int(record.timestamp * 1000),  # Faust gives seconds
                )
            # Encoded now: the states they carry must not change before the batch ends.
            limit = self.settings.max_message_bytes
            signals += [signal_of(driver_event, limit) for driver_event in woken]
        await self.wake(signals)

    async def wake(self, signals: Sequence[Signal]) -> None:
        """State first, then the signal: flush the staged tables, then publish the events
        and wait until the broker has them all (`signal`). Writes refused as too large for
        a changelog (any stage's) get their dead letters.

        Split folds' deletions come last, once the producer has every write before them
        acknowledged: a crash can then lose a deletion (the part stays, unread) but never
        leave a stored fold record whose parts were deleted (bug 17). They are kept staged
        across batches and flushed at most every `DELETIONS_EVERY_SECONDS` (or once
        `DELETIONS_KEPT` are staged), so waiting for the acknowledgements costs a round trip
        per interval, not per batch."""
        self.chorus.staging.flush()
        await self.signal(signals)
        await self.delete_replaced(time.monotonic())
        await self.dead_letter_refused()

    async def delete_replaced(self, now: float, *, force: bool = False) -> int:
        """Flush the staged deletions of split folds' parts once the producer has every
        earlier write acknowledged; only when due (see `wake`) unless `force`."""
        staged = sum(table.staged for table in self.chorus.staging.deferred)
        if not staged:
            return 0
        due = now - self._deleted_at >= DELETIONS_EVERY_SECONDS or staged >= DELETIONS_KEPT
        if not (due or force):
            return 0
        await self.chorus.acknowledged()
        self._deleted_at = now
        return self.chorus.staging.flush_deferred()

    async def dead_letter_refused(self) -> None:
        """The table writes refused as too large for their changelog (any stage's), each to
        the dead letters with the reason and its message's position."""
        for refused in self.chorus.staging.drain_refused():
            await self.send_dead_letter(
                refused.reason,
                "table-write",
                refused.key.encode(),
                None,
                -1 if refused.partition is None else refused.partition,
                -1 if refused.offset is None else refused.offset,
                topic=refused.topic,
            )

    async def signal(self, signals: Sequence[Signal]) -> None:
        """Publish the batch's driver events, again and again (with backoff) while the broker
        does not acknowledge all of them: the batch is acknowledged when this returns, so
        returning early, or raising (Faust's batch stream then acknowledges it as it
        closes), would lose them. Each failed attempt is logged (`Runtime.publish`); a
        repeated attempt may duplicate events, which consumers dedupe by (channel, offset).
        An event the broker refuses for good (too large for the topic) is not retried: it is
        counted (`chorus_refused_records_total`) and dead-lettered with its message's
        position, and the messages after it fold on."""
        delay, longest = PUBLISH_RETRY_SECONDS
        records = [(s.key, s.value, s.partition) for s in signals]
        while True:
            try:
                refused = await self.chorus.publish(self.chorus.driver_events, records)
                break
            except PublishFailed:
                log.warning(
                    "sending the batch's %d driver events again in %gs", len(signals), delay
                )
                await asyncio.sleep(delay)
                delay = min(2 * delay, longest)
        topic = self.chorus.driver_events.get_topic_name()
        for one in refused:
            signal = signals[one.index]
            self.chorus.meter.refused_records.labels(topic).inc()
            await self.send_dead_letter(
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
        if done.error is not None and "CHORUS_MAX_STATE_BYTES" in done.error:
            self.chorus.meter.state_bounds.labels(name, "state-bytes").inc()
        if not done.applied or not isinstance(done.folded.state, dict):
            return
        previous = before.state if before is not None and isinstance(before.state, dict) else {}
        for counter in bound_counters_of(done.projection):
            grown = done.folded.state.get(counter, 0) - previous.get(counter, 0)
            if grown > 0:
                self.chorus.meter.state_bounds.labels(name, counter).inc(grown)

    def _index_deadline(self, channel: str, earliest: datetime | None) -> None:
        if earliest is None:
            self._deadlines.pop(channel, None)
        else:
            self._deadlines[channel] = earliest

    async def fold(
        self, message: Message, key: bytes | None, value: bytes | None, partition: int, offset: int
    ) -> list[DriverEvent]:
        channel = message.channel
        records = {name: table.get(channel) for name, table in self.folds.items()}
        stored = self.stored_folds(channel, records)
        steps = step(
            self.chorus.projections,
            stored,
            message,
            offset,
            self.loaded_states(channel, stored),
            max_state_bytes=self.settings.max_state_bytes,
        )
        decision = decision_to_json(decide(self.chorus.configs.conditions(channel), steps))
        for done in steps:
            if done.applied:
                name = done.projection.name
                self._store(channel, done, records.get(name), stored.get(name))
                if done.projection.name == "commitments":
                    commitments = done.folded.state.get("commitments", {})
                    self._index_deadline(channel, earliest_deadline(commitments.values()))
            self._count_bounds(stored.get(done.projection.name), done)
        self.remember(channel, steps)
        event = driver_event(message, partition, offset, steps, decision)
        if event.errors:
            reasons = "; ".join(f"{name}: {error}" for name, error in event.errors.items())
            await self.send_dead_letter(
                "projection raised or outgrew its state limit: " + reasons,
                "project",
                key,
                value,
                partition,
                offset,
            )
        return [event]

    def _store(
        self,
        channel: str,
        done: ProjectionStep,
        previous: dict[str, Any] | None,
        previous_fold: Folded | None,
    ) -> None:
        """Stage the table writes of an applied fold (`streams.fold_store`)."""
        name = done.projection.name
        read = self._reader(name) if name in self.parts else None
        writes = stored_fold(
            done.projection,
            done.folded,
            previous,
            previous_fold,
            (lambda part: read(part_key(channel, part))) if read is not None else None,
        )
        for part, value in writes.parts.items():
            key = part_key(channel, part)
            self.parts[name][key] = value
            # Written again in the batch that deleted it (a request re-sent with the id of
            # an evicted one, a bucket emptied and filled again).
            self.removed[name].unstage(key)
        self.folds[name][channel] = writes.record
        for part in writes.removed:
            key = part_key(channel, part)
            self.removed[name].discard(key)
            self.parts[name].forget_key(key)

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
        first = error.channel not in self._misplaced_logged
        self._misplaced_logged[error.channel] = None
        self._misplaced_logged.move_to_end(error.channel)
        while len(self._misplaced_logged) > MISPLACED_LOGGED_LIMIT:
            self._misplaced_logged.popitem(last=False)
        level = logging.WARNING if first else logging.DEBUG
        await self.send_dead_letter(error.reason, "validate", key, value, partition, offset, level)

    async def send_dead_letter(
        self,
        reason: str,
        stage: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        level: int = logging.WARNING,
        topic: str | None = None,
    ) -> None:
        """`topic`: where the record came from, when not chorus.messages; a partition of -1
        (unknown) leaves the choice of the dead letter's partition to the key."""
        await send_dead_letter(
            self.chorus.dead_letters,
            topic or self.chorus.messages.get_topic_name(),
            reason,
            stage,
            key,
            value,
            partition,
            offset,
            level,
        )

    async def expire_overdue(self, now: datetime) -> int:
        """Write an expiry EVENT for each overdue commitment this worker owns.

        The EVENT goes through the log, so replay expires the same commitments at the
        same place in each channel's history.
        """
        table = self.chorus.folds.get("commitments")
        if table is None:
            return 0
        sent: set[tuple[str, str]] = set()
        still_overdue: set[tuple[str, str]] = set()
        if self._rescan.due():
            self._deadlines.clear()
            # The fold records alone: a split one keeps its active commitments' earliest
            # deadline, a whole one holds them (only active ones have deadlines that pass).
            for channel, raw in list(table.items()):
                if raw:
                    self._index_deadline(str(channel), record_deadline(raw))
        for channel in [c for c, at in self._deadlines.items() if at <= now]:
            partition = self.chorus.messages_partition(channel)
            if partition is None:
                continue
            folded = self.chorus.folded(channel, "commitments")
            if folded is None:
                continue
            state = CommitmentsState.model_validate(folded.state)
            for correlation_id in overdue(state, now):
                still_overdue.add((channel, correlation_id))
                if (channel, correlation_id) in self._expiry_sent:
                    continue
                event = expiry_event(channel, correlation_id, now)
                await self.chorus.messages.send(key=channel.encode(), value=encode_message(event))
                sent.add((channel, correlation_id))
        # Forget commitments that were expired by the fold, so the set stays bounded.
        self._expiry_sent = (self._expiry_sent | sent) & still_overdue
        return len(sent)

    async def unstall(self, now: float) -> list[Stall]:
        """Seek back and resume every owned partition whose consumer stopped delivering
        (`streams.worker.stall`); not while partitions move or tables recover."""
        app = self.chorus.app
        if app.rebalancing or getattr(app, "in_recovery", False):
            return []
        topic = self.chorus.messages.get_topic_name()
        try:
            owned = [tp for tp in app.assignor.assigned_actives() if tp.topic == topic]
        except Exception:  # not started or not assigned yet
            return []
        next_offsets = {
            tp.partition: int(found)
            for tp in owned
            for found in [self.positions.get(str(tp.partition))]
            if found is not None
        }
        if not next_offsets:
            return []
        highwaters = await app.consumer.highwaters(
            *[TopicPartition(topic, p) for p in next_offsets]
        )
        stalls = self._stalls.check(
            now, next_offsets, {tp.partition: int(at) for tp, at in highwaters.items()}
        )
        for stall in stalls:
            log.warning("stalled consumer: %s", stall.describe())
            self.chorus.meter.stalls.inc()
            partition = TopicPartition(topic, stall.partition)
            await app.consumer.seek(partition, stall.next_offset)
            app.consumer.resume_partitions([partition])
        return stalls


def install(chorus: Runtime) -> Folder:
    """The fold role's one agent on `chorus.messages`: decode and validate once, fold, write
    the fold tables, then the driver events (the context role reads the log on its own)."""
    folder = Folder(chorus)

    @chorus.app.agent(chorus.messages, name="fold-messages")
    async def fold_messages(stream: Any) -> None:
        settings = chorus.settings
        batches = stream.take_events(settings.fold_batch_max, settings.fold_batch_wait_ms / 1000)
        async for batch in batches:
            await folder.on_batch(batch)

    @chorus.app.timer(chorus.settings.expiry_check_seconds, name="expire-commitments")
    async def expire_commitments() -> None:
        await folder.expire_overdue(utc_now())

    @chorus.app.timer(STALL_CHECK_SECONDS, name="watch-stalls")
    async def watch_stalls() -> None:
        await folder.unstall(time.monotonic())

    return folder
