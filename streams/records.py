"""The records chorus writes to its derived topics (JSON via orjson, key = channel)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from projections.model import Message, utc_now


class WireRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    def to_bytes(self) -> bytes:
        return self.__pydantic_serializer__.to_json(self)

    @classmethod
    def from_bytes(cls, raw: bytes) -> WireRecord:
        return cls.model_validate(orjson.loads(raw))


class DriverEvent(WireRecord):
    """A wake signal that already carries the state after the fold.

    source is `channel:<channel>` after a fold, `projection-error:<channel>` when a projection
    raised. At-least-once: consumers dedupe by (channel, offset, projection).
    """

    source: str
    channel: str
    message_id: str
    partition: int
    offset: int
    projection: str
    version: int
    state: Any
    decision: dict[str, Any]
    applied: bool = True
    error: str | None = None
    timestamp: datetime = Field(default_factory=utc_now)

    def to_bytes(self) -> bytes:
        # `state` is already JSON-ready; orjson encodes it far faster than pydantic's
        # serializer infers a type for every value of an `Any` field.
        return orjson.dumps({name: getattr(self, name) for name in type(self).model_fields})


class DeadLetter(WireRecord):
    """A record chorus could not use, with the reason and where it came from."""

    reason: str
    stage: str
    source_topic: str
    partition: int
    offset: int
    key: str | None
    original: str | None = Field(description="the original value as UTF-8 text, if it was text")
    original_base64: str | None = Field(description="the original bytes, when not UTF-8 text")
    original_truncated: bool = False
    timestamp: datetime = Field(default_factory=utc_now)


class ChannelConfig(WireRecord):
    """Per-channel settings on the compacted `chorus.channel-config` topic; None = default."""

    channel: str
    termination: list[str] = Field(default_factory=list)
    summary_after_messages: int | None = Field(default=None, ge=1)
    summary_after_seconds: float | None = Field(default=None, gt=0)
    recap_debounce_seconds: float | None = Field(default=None, gt=0)
    updated_at: datetime = Field(default_factory=utc_now)


class SummaryRecord(WireRecord):
    """The latest summary of a channel, on the compacted `chorus.summaries` topic."""

    channel: str
    text: str
    annotations: dict[str, str] = Field(default_factory=dict)
    first_offset: int | None = None
    last_offset: int | None = None
    first_message_id: str | None = None
    last_message_id: str | None = None
    total_messages: int = 0
    updated_at: datetime = Field(default_factory=utc_now)
    updated_by: str = "system:summariser"


class RecapRecord(WireRecord):
    """Recap status and text for a channel, on the compacted `chorus.recaps` topic."""

    channel: str
    text: str | None
    phase: str
    generated_at: datetime | None = None
    covered_offset: int | None = None
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    tier: str | None = None
    error: str | None = None
    generation: int = 0


RECORDS_BY_TOPIC: dict[str, type[BaseModel]] = {
    "messages": Message,
    "driver-events": DriverEvent,
    "dead-letters": DeadLetter,
    "channel-config": ChannelConfig,
    "summaries": SummaryRecord,
    "recaps": RecapRecord,
}
