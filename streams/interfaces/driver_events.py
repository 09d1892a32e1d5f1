"""A Python client for driver events: wake on every fold of a channel, with what it changed
and the live state (v3 events; the whole state is `chorus state` / the HTTP API).

async for event in driver_events(settings, channel="team/plan", until=decided):
    ...
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

from streams.kafka.consume import read_topic
from streams.records import DriverEvent
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


def decided(event: DriverEvent) -> bool:
    """Stop at the first termination decision other than CONTINUE."""
    return event.decision.get("decision") != "CONTINUE"


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
