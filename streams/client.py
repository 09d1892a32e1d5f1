"""A Python client for driver events: wake on every fold of a channel, with its state.

async for event in driver_events(settings, channel="team/plan", until=decided):
    ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from streams.consume import read_topic
from streams.records import DriverEvent
from streams.settings import Settings
from streams.topics import DRIVER_EVENTS


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
    seen: set[tuple[str, int, str]] = set()
    async for record in read_topic(
        settings,
        settings.topic(DRIVER_EVENTS),
        from_beginning=from_beginning,
        channels=[channel] if channel else (),
        follow=True,
    ):
        event = DriverEvent.model_validate(record.value)
        identity = (event.channel, event.offset, event.projection)
        if identity in seen:
            continue
        seen.add(identity)
        yield event
        if until is not None and until(event):
            return
