"""The channel message: the wire contract of `chorus.messages`.

Every record on the log is one `Message`, JSON-encoded with orjson. Validation
errors name the field and the rule, so a producer in any language can fix its
record from the dead-letter reason alone.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from projections.errors import ChorusError

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
# JSON parsers read deeper than encoders write (orjson: 1,024 in, ~255 out); a payload
# must survive being encoded again by every stage.
MAX_PAYLOAD_DEPTH = 64

CHANNEL_MAX_LENGTH = 200
CHANNEL_SEGMENT_MAX_LENGTH = 80
TOPIC_MAX_LENGTH = 200
_KEBAB_SEGMENT = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
TARGET_PREFIXES = ("instance:", "capability:", "role:")
# The end of the reason for a record without `id` or `created_at` decoded with no position.
MISSING_ON_THE_LOG = ": required on the log"
# Channel names that passed the channel rules (a pure function of the name); bounded.
_VALID_CHANNELS: set[str] = set()
_VALID_CHANNELS_KEPT = 100_000


def validate_channel_name(value: str) -> str:
    """`value` when it is a valid channel name, else ValueError with the rule it breaks: at
    most CHANNEL_MAX_LENGTH characters of `/`-separated lowercase kebab-case segments of
    at most CHANNEL_SEGMENT_MAX_LENGTH."""
    if value in _VALID_CHANNELS:  # checked before: the rules depend on the name alone
        return value
    if len(value) > CHANNEL_MAX_LENGTH:
        raise ValueError(f"channel must be at most {CHANNEL_MAX_LENGTH} characters")
    for segment in value.split("/"):
        if len(segment) > CHANNEL_SEGMENT_MAX_LENGTH:
            raise ValueError(
                f"channel segment {segment[:20]!r}... must be at most "
                f"{CHANNEL_SEGMENT_MAX_LENGTH} characters"
            )
        if not _KEBAB_SEGMENT.match(segment):
            raise ValueError(
                f"channel segment {segment!r} must be lowercase kebab-case "
                "(a-z, 0-9, single hyphens), segments separated by '/'"
            )
    if len(_VALID_CHANNELS) >= _VALID_CHANNELS_KEPT:
        _VALID_CHANNELS.clear()
    _VALID_CHANNELS.add(value)
    return value


def channel_name_refusal(value: str) -> str | None:
    """Why `value` is refused as a channel name, in the one line every entry point answers
    (the CLI, MCP, HTTP): the name and the rule it breaks. None when it is valid."""
    try:
        validate_channel_name(value)
    except ValueError as error:
        return f"invalid channel name {value!r}: {error}"
    return None


class MessageType(StrEnum):
    QUERY = "QUERY"
    COMMAND = "COMMAND"
    RESPONSE = "RESPONSE"
    STATUS = "STATUS"
    DECLINE = "DECLINE"
    HANDOFF = "HANDOFF"
    DONE = "DONE"
    FAILURE = "FAILURE"
    PROPOSE = "PROPOSE"
    EVENT = "EVENT"


class ActorType(StrEnum):
    HUMAN = "HUMAN"
    AGENT = "AGENT"
    SYSTEM = "SYSTEM"
    TOOL = "TOOL"


# Requests: they need a correlation id, and each opens a commitment (projections.commitments).
REQUEST_TYPES = frozenset({MessageType.QUERY, MessageType.COMMAND, MessageType.PROPOSE})
NEEDS_REPLY_LINK = frozenset(
    {
        MessageType.RESPONSE,
        MessageType.DONE,
        MessageType.DECLINE,
        MessageType.FAILURE,
        MessageType.HANDOFF,
    }
)
NEEDS_CONTENT = frozenset({MessageType.DECLINE, MessageType.FAILURE, MessageType.PROPOSE})


class MessageError(ChorusError, ValueError):
    """A record that is not a valid channel message; `reason` is fit for a dead letter."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def new_message_id() -> str:
    return uuid.uuid4().hex


def utc_now() -> datetime:
    return datetime.now(UTC)


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Message(BaseModel):
    """One message in a channel. Immutable: projections fold it, never edit it."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    id: str = Field(default_factory=new_message_id, min_length=1, max_length=200)
    channel: str
    sender: str
    type: MessageType
    actor_type: ActorType = ActorType.AGENT
    content: str | None = None
    payload: dict[str, Any] | None = None
    correlation_id: str | None = None
    in_reply_to: str | None = None
    target: str | None = None
    topic: str = "general"
    artefact_refs: list[str] = Field(default_factory=list)
    deadline: datetime | None = None
    created_at: datetime = Field(default_factory=utc_now)

    @field_validator("sender")
    @classmethod
    def _sender_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("sender must not be blank")
        return value

    @field_validator("channel")
    @classmethod
    def _channel_is_slug(cls, value: str) -> str:
        return validate_channel_name(value)

    @field_validator("topic")
    @classmethod
    def _topic_stripped_and_short(cls, value: str) -> str:
        value = value.strip()
        if len(value) > TOPIC_MAX_LENGTH:
            raise ValueError(f"topic must be at most {TOPIC_MAX_LENGTH} characters")
        return value or "general"

    @field_validator("target")
    @classmethod
    def _target_is_addressable(cls, value: str | None) -> str | None:
        if value is None:
            return None
        for prefix in TARGET_PREFIXES:
            if value.startswith(prefix) and value[len(prefix) :].strip():
                return value
        raise ValueError("target must be instance:<id>, capability:<tag> or role:<name>")

    @field_validator("created_at", "deadline")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else _as_utc(value)

    @model_validator(mode="after")
    def _type_rules(self) -> Message:
        kind = self.type
        if kind in REQUEST_TYPES and not self.correlation_id:
            raise ValueError(f"correlation_id is required for {kind.value}")
        if kind in NEEDS_REPLY_LINK:
            if not self.in_reply_to:
                raise ValueError(f"in_reply_to is required for {kind.value}")
            if not self.correlation_id:
                raise ValueError(f"correlation_id is required for {kind.value}")
        if kind is MessageType.HANDOFF and self.target is None:
            raise ValueError("target is required for HANDOFF")
        if kind in NEEDS_CONTENT and not (self.content and self.content.strip()):
            raise ValueError(f"content must be non-empty for {kind.value} (explain the reason)")
        if kind is MessageType.EVENT and self.content:
            raise ValueError("content must be empty for EVENT (put its data in payload)")
        return self


def with_generated_correlation_id(record: dict[str, Any]) -> dict[str, Any]:
    """The producing side's duty: requests without a correlation_id get a fresh UUID."""
    if record.get("type") in {t.value for t in REQUEST_TYPES} and not record.get("correlation_id"):
        return {**record, "correlation_id": str(uuid.uuid4())}
    return record


def describe_validation_error(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "message"
        rule = item["msg"].removeprefix("Value error, ")
        parts.append(f"{field}: {rule}")
    return "; ".join(parts)


def message_from_record(record: Any) -> Message:
    """Validate decoded JSON as a Message, raising `MessageError` with a readable reason."""
    if not isinstance(record, dict):
        raise MessageError(f"message must be a JSON object, got {type(record).__name__}")
    try:
        return Message.model_validate(record)
    except ValidationError as error:
        raise MessageError(describe_validation_error(error)) from None


@dataclass(frozen=True)
class LogPosition:
    """Where a record sits in the log: the source of an id and a time for records that
    carry none, so every read of the record decodes to the same message."""

    partition: int
    offset: int
    timestamp_ms: int

    def defaults(self) -> dict[str, Any]:
        return {
            "id": f"p{self.partition}-o{self.offset}",
            "created_at": datetime.fromtimestamp(self.timestamp_ms / 1000, UTC),
        }


def nesting_depth(value: Any, limit: int) -> int:
    """Depth of nested lists and dicts, counting stops once past `limit`."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def decode_message(
    raw: bytes | None,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    position: LogPosition | None = None,
) -> Message:
    """Bytes from the log to a Message; every failure is a `MessageError` naming the rule.

    A record without `id` or `created_at` takes them from its `position`; with no position
    it is refused, since generated defaults would differ at every read and break replay.
    """
    if raw is None:
        raise MessageError("record value is null (tombstones are not messages)")
    if len(raw) > max_bytes:
        raise MessageError(f"record is {len(raw)} bytes; the maximum is {max_bytes}")
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise MessageError(f"record is not valid UTF-8 JSON: {error}") from None
    if isinstance(record, dict):
        payload = record.get("payload")
        if (
            isinstance(payload, dict | list)  # anything else has depth 0
            and nesting_depth(payload, MAX_PAYLOAD_DEPTH) > MAX_PAYLOAD_DEPTH
        ):
            raise MessageError(f"payload: nested deeper than {MAX_PAYLOAD_DEPTH} levels")
        if record.get("id") is None or record.get("created_at") is None:
            missing = [field for field in ("id", "created_at") if record.get(field) is None]
            if position is None:
                raise MessageError(f"{', '.join(missing)}{MISSING_ON_THE_LOG}")
            record = {**position.defaults(), **{k: v for k, v in record.items() if v is not None}}
    return message_from_record(record)


def encode_message(message: Message, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> bytes:
    encoded = orjson.dumps(message.model_dump(mode="json"))
    if len(encoded) > max_bytes:
        raise MessageError(f"message is {len(encoded)} bytes encoded; the maximum is {max_bytes}")
    return encoded
