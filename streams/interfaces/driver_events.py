"""A Python client for driver events: wake on every fold of a channel, with what it changed
and the live state (v3 events; the whole state is `chorus state` / the HTTP API).

async for event in driver_events(settings, channel="team/plan", until=decided):
    ...

event = await wait_for_event(settings, "team/plan", decided)  # at once if already decided
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from projections.commitments import CommitmentProjection, CommitmentState
from projections.model import Message
from projections.termination import DecisionName
from streams.agents.log import logged_message
from streams.kafka.clients import consumer, started, topic_partitions
from streams.kafka.consume import read_topic
from streams.memory import ByteCache
from streams.records import DecisionRecord, DriverEvent, key_partition
from streams.settings import Settings
from streams.topology import DRIVER_EVENTS, MESSAGES

# Channels whose last offset the dedupe remembers; the least recently active is forgotten
# first (a redelivery for it after that is yielded again, once). What an entry weighs.
REMEMBERED_CHANNELS = 100_000
REMEMBERED_BYTES = 200


class LastOffsets:
    """Dedupe by (channel, offset) in bounded memory: a channel's events come in offset
    order from one partition, so an event at or below the last one seen is a redelivery."""

    def __init__(self, limit: int = REMEMBERED_CHANNELS) -> None:
        self._last: ByteCache[str, int] = ByteCache(
            "driver-event-offsets", limit * REMEMBERED_BYTES
        )

    def is_new(self, channel: str, offset: int) -> bool:
        last = self._last.get(channel)
        if last is not None and offset <= last:
            return False
        self._last.put(channel, offset, REMEMBERED_BYTES)
        return True


# The first look-back reads this many records before the end; each further one twice as many.
LOOK_BACK_RECORDS = 1000
POLL_MS = 1000
# How long reading the message of an event waits for its record.
MESSAGE_READ_MS = 5000


def decided(event: DriverEvent) -> bool:
    """Stop at the first termination decision other than CONTINUE."""
    return event.decision is not None and event.decision.decision is not DecisionName.CONTINUE


@dataclass(frozen=True)
class RequestOutcome:
    """How a request ended: `state` (FULFILLED, DECLINED, FAILED or EXPIRED), the commitment
    that ended, whole as the fold holds it (`commitment`: what was asked, who owed it, the
    message that ended it and when), the driver event of that message (`event`; its
    decision is the channel's after it) and the message itself, read from the log by its
    position (`message`, its content whole; None when the log no longer holds it). A
    hand-off is followed to the commitment it opened."""

    state: CommitmentState
    commitment: dict[str, Any]
    event: DriverEvent
    message: Message | None = None


def _changed(event: DriverEvent, correlation_id: str) -> list[dict[str, Any]]:
    """The commitments of `correlation_id` the event's message opened, changed or ended."""
    carried = event.projections.get(CommitmentProjection.name)
    changes = (carried.changes if carried is not None else None) or {}
    return [
        c for c in changes.get("commitments") or [] if c.get("correlation_id") == correlation_id
    ]


def request_ended(correlation_id: str) -> Callable[[DriverEvent], bool]:
    """`until` for a wait: the event whose message ended the request `correlation_id` (its
    commitments the message changed all ended: a hand-off, which opens a new one, does not
    end it)."""

    def ended(event: DriverEvent) -> bool:
        changed = _changed(event, correlation_id)
        return bool(changed) and all(CommitmentState(c["state"]).is_terminal for c in changed)

    return ended


class RequestWatch:
    """`until` for a wait on the request `correlation_id` (`request_ended`), which also
    keeps what the events it saw said: the request's latest `state` and the channel's
    latest `decision` (what a wait that timed out answers), and how many events it saw."""

    def __init__(self, correlation_id: str) -> None:
        self.correlation_id = correlation_id
        self.ended = request_ended(correlation_id)
        self.state: CommitmentState | None = None
        self.decision: DecisionRecord | None = None
        self.seen = 0

    def __call__(self, event: DriverEvent) -> bool:
        self.seen += 1
        self.decision = event.decision or self.decision
        changed = _changed(event, self.correlation_id)
        if changed:
            self.state = CommitmentState(changed[-1]["state"])
        return self.ended(event)


def outcome_of(
    event: DriverEvent, correlation_id: str, message: Message | None = None
) -> RequestOutcome:
    """How the request `correlation_id` ended, from the event `request_ended` accepted (and
    the message of that event)."""
    commitment = _changed(event, correlation_id)[-1]
    return RequestOutcome(CommitmentState(commitment["state"]), commitment, event, message)


async def driver_events(
    settings: Settings,
    *,
    channel: str | None = None,
    until: Callable[[DriverEvent], bool] | None = None,
    from_beginning: bool = False,
) -> AsyncIterator[DriverEvent]:
    """Driver events in per-channel order, each once (redeliveries are dropped).

    The event that satisfies `until` is yielded, then the iteration ends.
    """
    seen = LastOffsets()
    async for record in read_topic(
        settings,
        settings.topic(DRIVER_EVENTS),
        from_beginning=from_beginning,
        channels=[channel] if channel else (),
        follow=True,
    ):
        event = DriverEvent.model_validate(record.value)
        if not seen.is_new(event.channel, event.offset):
            continue
        yield event
        if until is not None and until(event):
            return


@dataclass(frozen=True)
class After:
    """Where a wait starts: at the channel's message at partition offset `offset`, or at the
    message `message_id` (created at `created_at`), whose offset its driver event tells. The
    event a wait returns is for that message or a later one."""

    offset: int | None = None
    message_id: str | None = None
    created_at: datetime | None = None

    def __post_init__(self) -> None:
        if (self.offset is None) == (self.message_id is None):
            raise ValueError("a wait starts after an offset or after a message id, one of them")
        if self.offset is not None and self.offset < 0:
            raise ValueError(f"a partition offset is 0 or more, got {self.offset}")


class _Start:
    """A wait's starting point as the driver events resolve it (a message id becomes the
    offset of its event once that is read)."""

    def __init__(self, after: After) -> None:
        self.after = after
        self.offset = after.offset

    def note(self, event: DriverEvent) -> None:
        if self.offset is None and event.message_id == self.after.message_id:
            self.offset = event.offset

    def covers(self, event: DriverEvent) -> bool:
        self.note(event)
        return self.offset is not None and event.offset >= self.offset

    def reached(self, events: list[DriverEvent]) -> bool:
        """True once the look-back has read back to the start: an event at or before its
        offset (the message's own event included), or, while the message's event is not
        found, one folded before the message was even created (with room for clocks that
        disagree)."""
        for event in events:
            self.note(event)
        if self.offset is not None:
            return any(event.offset <= self.offset for event in events)
        created = self.after.created_at
        return created is not None and any(
            event.timestamp < created - CLOCK_SKEW for event in events
        )


# How far the clocks of a producer and a worker may disagree: the look-back for a received
# message's driver event stops at events folded this long before the message was created.
CLOCK_SKEW = timedelta(minutes=5)


async def wait_for_event(
    settings: Settings,
    channel: str,
    until: Callable[[DriverEvent], bool],
    *,
    after: After | None = None,
) -> DriverEvent:
    """The first driver event of `channel` that satisfies `until`, counting the events
    already on the topic: no race between sending a message and waiting.

    Without `after`, the channel's latest event counts (a late joiner's question: is it
    decided?); with it, every event for the message `after` names or a later one, in order
    (a sender's question: what came of my message?), and no event before it.

    It reads only the channel's partition. It notes that partition's end and looks back from
    there (windows of 1,000 records, each further one twice as long): for the channel's
    latest event, or with `after` until it has read back to it (bounded by the topic's
    retention and never more than twice the distance to it). The first of those events that
    satisfies `until` is returned; else it follows the partition from the noted end, so no
    event falls between the two. Cancel it (or wrap it in a timeout) to stop waiting.
    """
    kafka = await _events_consumer(settings)
    try:
        return await _first_event(kafka, settings, channel, until, after)
    finally:
        await kafka.stop()


async def wait_for_request(
    settings: Settings, channel: str, watch: RequestWatch, *, after: After
) -> RequestOutcome:
    """`wait_for_event` for the event that ended the request `watch` watches, then the
    message of that event, read from chorus.messages by its position with the same
    consumer."""
    kafka = await _events_consumer(settings)
    try:
        event = await _first_event(kafka, settings, channel, watch, after)
        message = await _message_at(kafka, settings, event.partition, event.offset)
    finally:
        await kafka.stop()
    return outcome_of(event, watch.correlation_id, message)


async def _events_consumer(settings: Settings) -> AIOKafkaConsumer:
    kafka = consumer(
        settings, enable_auto_commit=False, group_id=None, auto_offset_reset="earliest"
    )
    await started(kafka, settings)
    return kafka


async def _message_at(
    kafka: AIOKafkaConsumer, settings: Settings, partition: int, offset: int
) -> Message | None:
    """The message at `partition`@`offset` of chorus.messages (None when the log no longer
    holds it there)."""
    tp = TopicPartition(settings.topic(MESSAGES), partition)
    kafka.assign([tp])
    kafka.seek(tp, offset)
    for record in (await kafka.getmany(tp, timeout_ms=MESSAGE_READ_MS)).get(tp, []):
        if record.offset == offset:
            return logged_message(record, settings)
    return None


async def _first_event(
    kafka: AIOKafkaConsumer,
    settings: Settings,
    channel: str,
    until: Callable[[DriverEvent], bool],
    after: After | None,
) -> DriverEvent:
    """`wait_for_event` on a started consumer."""
    topic = settings.topic(DRIVER_EVENTS)
    start = _Start(after) if after is not None else None
    partitions = await topic_partitions(kafka, topic)
    tp = TopicPartition(topic, key_partition(channel.encode(), len(partitions)))
    kafka.assign([tp])
    end = (await kafka.end_offsets([tp]))[tp]
    if start is None:
        found = await _look_back(kafka, tp, channel, end, bool)
        already = found[-1:]
    else:
        found = await _look_back(kafka, tp, channel, end, start.reached)
        already = [event for event in found if start.covers(event)]
    seen = LastOffsets(limit=1)
    for event in already:
        if seen.is_new(channel, event.offset) and until(event):
            return event
    for event in found[-1:]:
        seen.is_new(channel, event.offset)  # a redelivery of it (or older) is not new
    kafka.seek(tp, end)
    while True:
        batches = await kafka.getmany(tp, timeout_ms=POLL_MS)
        for record in batches.get(tp, []):
            new = _event_of(record, channel)
            if new is None or not seen.is_new(channel, new.offset):
                continue
            if (start is None or start.covers(new)) and until(new):
                return new


async def _look_back(
    kafka: AIOKafkaConsumer,
    tp: TopicPartition,
    channel: str,
    end: int,
    enough: Callable[[list[DriverEvent]], bool],
) -> list[DriverEvent]:
    """The channel's driver events before offset `end` of its partition, in order, read
    back a window at a time until `enough` of the events read holds, or the partition's
    start."""
    begin = (await kafka.beginning_offsets([tp]))[tp]
    window, stop = LOOK_BACK_RECORDS, end
    found: list[DriverEvent] = []
    while stop > begin:
        start = max(begin, stop - window)
        kafka.seek(tp, start)
        read: list[DriverEvent] = []
        while await kafka.position(tp) < stop:
            records = (await kafka.getmany(tp, timeout_ms=POLL_MS)).get(tp, [])
            if not records:
                break  # nothing more to read (records deleted under the look-back)
            for record in records:
                event = _event_of(record, channel) if record.offset < stop else None
                if event is not None:
                    read.append(event)
        found = read + found
        if read and enough(read):
            return found
        window, stop = 2 * window, start
    return found


def _event_of(record: ConsumerRecord, channel: str) -> DriverEvent | None:
    if record.key != channel.encode() or record.value is None:
        return None
    return DriverEvent.model_validate(orjson.loads(record.value))
