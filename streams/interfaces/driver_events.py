"""A Python client for driver events: wake on every fold of a channel, with what it changed
and the live state (v3 events; the whole state is `chorus state` / the HTTP API).

async for event in driver_events(settings, channel="team/plan", until=decided):
    ...

event = await wait_for_event(settings, "team/plan", decided)  # at once if already decided
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from projections.termination import DecisionName
from streams.kafka.clients import consumer, topic_partitions
from streams.kafka.consume import read_topic
from streams.records import DriverEvent, key_partition
from streams.settings import Settings
from streams.topology import DRIVER_EVENTS

# Channels whose last offset the dedupe remembers; the least recently active is forgotten
# first (a redelivery for it after that is yielded again, once).
REMEMBERED_CHANNELS = 100_000


class LastOffsets:
    """Dedupe by (channel, offset) in bounded memory: a channel's events come in offset
    order from one partition, so an event at or below the last one seen is a redelivery."""

    def __init__(self, limit: int = REMEMBERED_CHANNELS) -> None:
        self.limit = limit
        self._last: OrderedDict[str, int] = OrderedDict()

    def is_new(self, channel: str, offset: int) -> bool:
        last = self._last.get(channel)
        if last is not None and offset <= last:
            return False
        self._last[channel] = offset
        self._last.move_to_end(channel)
        if len(self._last) > self.limit:
            self._last.popitem(last=False)
        return True


# The first look-back reads this many records before the end; each further one twice as many.
LOOK_BACK_RECORDS = 1000
POLL_MS = 1000


def decided(event: DriverEvent) -> bool:
    """Stop at the first termination decision other than CONTINUE."""
    return event.decision is not None and event.decision.decision is not DecisionName.CONTINUE


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


async def wait_for_event(
    settings: Settings, channel: str, until: Callable[[DriverEvent], bool]
) -> DriverEvent:
    """The first driver event of `channel` that satisfies `until`, counting the channel's
    latest event already on the topic: no race between sending a message and waiting.

    It reads only the channel's partition. It notes that partition's end, looks back from
    there for the channel's latest event (windows of 1,000 records, each further one twice
    as long, stopping at the first window that holds one: bounded by the topic's retention
    and never more than twice the distance to that event), and returns it if it satisfies
    `until`; else it follows the partition from the noted end, so no event falls between the
    two. Cancel it (or wrap it in a timeout) to stop waiting.
    """
    topic = settings.topic(DRIVER_EVENTS)
    kafka = consumer(
        settings, enable_auto_commit=False, group_id=None, auto_offset_reset="earliest"
    )
    await kafka.start()
    try:
        partitions = await topic_partitions(kafka, topic)
        tp = TopicPartition(topic, key_partition(channel.encode(), len(partitions)))
        kafka.assign([tp])
        end = (await kafka.end_offsets([tp]))[tp]
        latest = await _latest_before(kafka, tp, channel, end)
        if latest is not None and until(latest):
            return latest
        kafka.seek(tp, end)
        seen = LastOffsets(limit=1)
        if latest is not None:
            seen.is_new(channel, latest.offset)  # a redelivery of it (or older) is not new
        while True:
            batches = await kafka.getmany(tp, timeout_ms=POLL_MS)
            for record in batches.get(tp, []):
                event = _event_of(record, channel)
                if event is not None and seen.is_new(channel, event.offset) and until(event):
                    return event
    finally:
        await kafka.stop()


async def _latest_before(
    kafka: AIOKafkaConsumer, tp: TopicPartition, channel: str, end: int
) -> DriverEvent | None:
    """The channel's last driver event before offset `end` of its partition, if any."""
    begin = (await kafka.beginning_offsets([tp]))[tp]
    window, stop = LOOK_BACK_RECORDS, end
    while stop > begin:
        start = max(begin, stop - window)
        kafka.seek(tp, start)
        found: ConsumerRecord | None = None
        while await kafka.position(tp) < stop:
            records = (await kafka.getmany(tp, timeout_ms=POLL_MS)).get(tp, [])
            if not records:
                break  # nothing more to read (records deleted under the look-back)
            for record in records:
                if record.offset < stop and record.key == channel.encode():
                    found = record
        if found is not None:
            return _event_of(found, channel)
        window, stop = 2 * window, start
    return None


def _event_of(record: ConsumerRecord, channel: str) -> DriverEvent | None:
    if record.key != channel.encode() or record.value is None:
        return None
    return DriverEvent.model_validate(orjson.loads(record.value))
