"""Kept for users of `streams.client.driver_events`: the client lives in
`streams.interfaces.driver_events`."""

from streams.interfaces.driver_events import LastOffsets, decided, driver_events

__all__ = ["LastOffsets", "decided", "driver_events"]
