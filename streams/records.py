"""The records chorus writes to its derived topics (JSON via orjson, key = channel)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal

import orjson
from aiokafka.partitioner import murmur2
from pydantic import BaseModel, ConfigDict, Field, field_validator

from projections.channel import ProjectionStep
from projections.model import LogPosition, Message, MessageError, decode_message, utc_now
from projections.projection import Folded, changes_of, live_of
from projections.recap.phase import RecapPhase
from projections.summarise.state import narrative_of, state_part, with_state
from projections.termination import DecisionName
from projections.writers import writer_refusal, writers_refusal
from streams.memory import exact_bytes
from streams.settings import Settings


class WireRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    def to_bytes(self) -> bytes:
        return self.__pydantic_serializer__.to_json(self)


class ProjectionChange(BaseModel):
    """What one projection says in a driver event (v3): its version, what this message
    changed and the live part of its state after it.

    `changes` is null when nothing was applied (a redelivery, an error) or when the
    projection does not say (`changes_of`), and empty when the message was applied but
    changed nothing in it; `live` is the
    part of the state a driver acts on (`live_of`; for the overview its counts and the most
    recent participants; a projection that does not define it carries its whole state).
    For commitments, `live` is `{"active_count", "owed", "unassigned", "active": [reference,
    ...], "opened", "ended", "declines", "evicted", "untracked"}`: how many are active, how
    many each obligor owes (`unassigned`: asked of no one in particular), and the
    `LIVE_COMMITMENTS` (5) most recently opened active ones, oldest first, each as a
    reference `{"id", "correlation_id", "state", "requester", "obligor", "expires_at"}`
    (`LIVE_FIELDS`), so the event stays small however many are open; the whole
    commitment (what was asked, the messages that opened and acknowledged it, its hand-off
    chain) is in `changes` (`{"commitments": [...]}`) of the
    event whose message opened, changed or ended it. The whole state is read once from
    `GET /channels/{channel}/state` or `chorus state`. `omitted` is set, and `changes` and
    `live` are null, only when the whole event would not fit a record (`fitted`).
    """

    version: int
    changes: Any = None
    live: Any = None
    omitted: str | None = None


DRIVER_EVENT_VERSION = 3


class DecisionRecord(BaseModel):
    """A termination decision on the wire: `decision` (CONTINUE, COMPLETE, FAILED or
    ESCALATE), its `detail` (a reason, or what COMPLETE reports), and the partition offset
    it is current at (a driver event's: its own message's)."""

    model_config = ConfigDict(frozen=True)

    decision: DecisionName
    detail: Any = None
    offset: int | None = None

    def __str__(self) -> str:
        """The decision in words, for a person: "COMPLETE All commitments resolved (1
        fulfilled)", "CONTINUE"."""
        return f"{self.decision} {self.detail}" if self.detail else str(self.decision)


class DriverEvent(WireRecord):
    """A wake signal that carries what the fold changed and the live state (version 3).

    One record per folded message: `projections` holds, per projection, what the message
    changed and the live part of its state after it (see `ProjectionChange`); the ended
    history is not in it. source is `channel:<channel>` after a fold,
    `projection-error:<channel>` when a projection raised or outgrew the state limit
    (`errors`: projection -> reason; that projection's state is the one it kept).
    `applied` is false for a redelivered message that was folded before (its `changes` are
    null, `live` is the state now). At-least-once: consumers dedupe by (channel, offset).
    """

    event_version: int = DRIVER_EVENT_VERSION
    source: str
    channel: str
    message_id: str
    partition: int
    offset: int
    projections: dict[str, ProjectionChange]
    # None only on a shadow-divergence event, which reports no fold of its own.
    decision: DecisionRecord | None
    applied: bool = True
    errors: dict[str, str] = Field(default_factory=dict)
    timestamp: datetime = Field(default_factory=utc_now)

    def to_bytes(self) -> bytes:
        # The parts are already JSON-ready; orjson encodes them far faster than pydantic's
        # serializer infers a type for every value of an `Any` field.
        record = {name: getattr(self, name) for name in type(self).model_fields}
        record["projections"] = {name: entry.__dict__ for name, entry in self.projections.items()}
        record["decision"] = self.decision.model_dump(mode="json") if self.decision else None
        return exact_bytes(orjson.dumps(record))

    def fitted(self, limit: int) -> bytes:
        """The encoded event, at most `limit` bytes where it can be: the largest projections'
        parts are left out (`omitted`) until it fits, so no fold's signal is refused by the
        broker."""
        encoded = self.to_bytes()
        event = self
        while len(encoded) > limit:
            sizes = {
                name: len(orjson.dumps(entry.changes)) + len(orjson.dumps(entry.live))
                for name, entry in event.projections.items()
                if entry.omitted is None
            }
            if not sizes:
                break
            largest = max(sizes, key=lambda name: sizes[name])
            entry = event.projections[largest]
            note = (
                f"{sizes[largest]} bytes of changes and live state left out to fit the "
                f"{limit}-byte record; read GET /channels/{event.channel}/state"
            )
            projections = {
                **event.projections,
                largest: ProjectionChange(version=entry.version, omitted=note),
            }
            event = event.model_copy(update={"projections": projections})
            encoded = event.to_bytes()
        return encoded


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
    """Per-channel settings on the compacted `chorus.channel-config` topic; None = default.

    `writers`: who may write to the channel (agent names or `role:x`; empty: anyone), the
    rule of `projections.writers`."""

    channel: str
    termination: list[str] = Field(default_factory=list)
    summary_after_messages: int | None = Field(default=None, ge=1)
    summary_after_seconds: float | None = Field(default=None, gt=0)
    recap_debounce_seconds: float | None = Field(default=None, gt=0)
    writers: list[str] = Field(default_factory=list)
    updated_at: datetime = Field(default_factory=utc_now)

    @field_validator("writers")
    @classmethod
    def _writers_bounded(cls, value: list[str]) -> list[str]:
        reason = writers_refusal(value)
        if reason is not None:
            raise ValueError(reason)
        return value


def refusal_under(config: ChannelConfig | None, message: Message) -> str | None:
    """Why the channel's config refuses `message` from its sender (`writer_refusal`)."""
    return writer_refusal(config.writers if config is not None else None, message)


ConfiguredSetting = Literal[
    "summary_after_messages", "summary_after_seconds", "recap_debounce_seconds"
]


def configured(config: ChannelConfig | None, name: ConfiguredSetting, defaults: Settings) -> Any:
    """A channel's own `name` (a field of ChannelConfig), else the worker's setting of the
    same name (`defaults`): what the stages use, and the CLI says."""
    return getattr(config, name, None) or getattr(defaults, name)


class SummaryRecord(WireRecord):
    """The latest summary of a channel, on the compacted `chorus.summaries` topic.

    On the topic, `text` is the narrative: what was said (covering `first_offset`..
    `last_offset`), as history; it never says which commitments are open. `narrative` is the
    same text (a record written before this rule also carried a state part in `text`; its
    `narrative` field, when set, is what was said). A view renders the state part beside it
    from the commitments fold when it is read (`rendered`): then `text` is the narrative
    followed by the open and ended commitments, and `state_offset` the fold offset they were
    rendered at (None on the topic)."""

    channel: str
    text: str
    narrative: str | None = None
    state_offset: int | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    first_offset: int | None = None
    last_offset: int | None = None
    first_message_id: str | None = None
    last_message_id: str | None = None
    total_messages: int = 0
    updated_at: datetime = Field(default_factory=utc_now)
    updated_by: str = "system:summariser"

    def rendered(self, folded: Folded | None) -> SummaryRecord:
        """This record with its state part rendered from the commitments fold `folded`
        (its `state_offset` says which fold)."""
        narrative = narrative_of(self.text, self.narrative)
        return self.model_copy(
            update={
                "text": with_state(narrative, state_part(folded.state if folded else None)),
                "narrative": narrative,
                "state_offset": folded.offset if folded else None,
            }
        )


def summary_view(channel: str, latest: dict[str, Any] | None) -> dict[str, Any]:
    """get_channel_summary's answer; with no summary yet: content null, annotations {}."""
    if latest is None:
        return {"channel": channel, "content": None, "annotations": {}}
    record = SummaryRecord.model_validate(latest)
    return {
        "channel": channel,
        "content": record.text,
        **record.model_dump(mode="json", exclude={"channel", "text"}),
    }


class RecapRecord(WireRecord):
    """Recap status and text for a channel, on the compacted `chorus.recaps` topic.

    `text` is history only: what the channel is about, what was done and said (the same as
    `narrative`). The goal, what is open and the next step are the commitments fold's,
    rendered beside it when a view is read (`projections.recap.state`). A record written
    before this rule has no `narrative`: its text also told the commitments as they stood
    then, so a view shows none of it, only the state part rendered now."""

    channel: str
    text: str | None
    narrative: str | None = None
    phase: RecapPhase
    generated_at: datetime | None = None
    covered_offset: int | None = None
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    tier: str | None = None
    error: str | None = None
    generation: int = 0
    # The channel's title when the recap was generated (read from the latest summary and
    # the window the recap was written from).
    title: str | None = None


def recap_view(channel: str, latest: dict[str, Any] | None) -> dict[str, Any]:
    """A channel's latest record on `chorus.recaps` in the shape `chorus recap` prints when
    no worker answers (phase, text and the record; no countdown)."""
    return {
        "channel": channel,
        "phase": latest.get("phase") if latest else "IDLE",
        "text": latest.get("text") if latest else None,
        "recap": latest,
    }


# Distinct keys whose partition is remembered (about 150 bytes each): aiokafka's murmur2 is
# pure Python and costs about as much as validating the whole record.
PARTITION_CACHE_KEYS = 65_536
# What librdkafka-based clients (kcat, confluent-kafka-python, Go, .NET) must set: their
# default partitioner hashes keys with CRC32.
PARTITIONER_FIX = "partitioner=murmur2_random"


@lru_cache(maxsize=PARTITION_CACHE_KEYS)
def key_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (Java client, aiokafka) gives `key`."""
    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions


class MisplacedRecord(MessageError):
    """A valid message on another partition than its key's: its producer does not use Kafka's
    default partitioner. The fold would compare its offset with another partition's."""

    def __init__(self, channel: str, partition: int, home: int, partitions: int) -> None:
        super().__init__(
            f"channel {channel!r} is on partition {partition} but belongs on partition {home} "
            f"(murmur2 of the key, {partitions} partitions): the producer uses another "
            f"partitioner; librdkafka-based clients (kcat, confluent-kafka) must set "
            f"{PARTITIONER_FIX}"
        )
        self.channel = channel


def validate_record(
    key: bytes | None,
    value: bytes | None,
    max_bytes: int,
    position: LogPosition | None = None,
    *,
    partition: int,
    partitions: int,
) -> Message:
    """The gate every reader of chorus.messages uses (worker, replay, peers): a valid message
    whose channel is the record's key, on the key's partition of the topic's `partitions`,
    or MessageError with the reason (MisplacedRecord for the wrong partition)."""
    message = decode_message(value, max_bytes, position)
    if key is None:
        raise MessageError("record key is null; the key must be the channel name")
    if key != message.channel.encode():
        raise MessageError(
            f"record key {key.decode(errors='replace')[:200]!r} does not match "
            f"channel {message.channel!r}"
        )
    home = key_partition(key, partitions)
    if home != partition:
        raise MisplacedRecord(message.channel, partition, home, partitions)
    return message


def driver_event(
    message: Message,
    partition: int,
    offset: int,
    steps: Sequence[ProjectionStep],
    decision: dict[str, Any],
) -> DriverEvent:
    """The wake signal for one message's fold through every projection."""
    errors = {done.projection.name: done.error for done in steps if done.error}
    kind = "projection-error" if errors else "channel"
    return DriverEvent(
        source=f"{kind}:{message.channel}",
        channel=message.channel,
        message_id=message.id,
        partition=partition,
        offset=offset,
        projections={
            done.projection.name: ProjectionChange.model_construct(
                version=done.projection.version,
                changes=(
                    changes_of(done.projection, done.before, done.state) if done.applied else None
                ),
                live=live_of(done.projection, done.state),
                omitted=None,
            )
            for done in steps
        },
        decision={**decision, "offset": offset},
        applied=any(done.applied for done in steps),
        errors=errors,
    )
