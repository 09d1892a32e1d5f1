"""The functional core of replay: the hot loop that folds records into channel states.

Pure: no I/O. See the package docstring for how it matches the worker's fold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from projections.channel import MAX_STATE_BYTES, joined, oversize, step
from projections.commitments import CommitmentProjection, CommitmentsState
from projections.model import MISSING_ON_THE_LOG, LogPosition, Message, MessageError
from projections.overview import ChannelOverviewProjection
from projections.projection import (
    ChannelProjection,
    Folded,
    dump_state,
    load_state,
)
from projections.writers import writer_refusal
from streams.records import validate_record

TimeField = Literal["created_at", "record"]
LimitFor = Callable[[str, int], Sequence[int | None]]


class RecordLike(Protocol):
    """What the loop reads from a consumer record (aiokafka's ConsumerRecord has these)."""

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def timestamp(self) -> int: ...


@dataclass(frozen=True)
class Rec:
    """A plain record, for tests and for callers that do not hold aiokafka records."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 0


@dataclass
class ReplayStats:
    records: int = 0  # read from the log
    folded: int = 0  # valid messages folded into their channel
    invalid: int = 0  # records the worker dead-letters (not a valid message for its key,
    # or not on its key's partition)
    filtered: int = 0  # other channels' records (`channels=`)
    beyond: int = 0  # at or after `to_offset`
    after_cutoff: int = 0  # after the channel's `as_of` cut-off
    refused: int = 0  # from a sender outside the channel's writers (the worker dead-letters)
    errors: dict[str, int] = field(default_factory=dict)  # apply() raised, per projection


class _Channel:
    __slots__ = (
        "errors",
        "last_offset",
        "limits",
        "messages",
        "offsets",
        "partition",
        "records",
        "states",
        "stored",
    )

    def __init__(self, partition: int, states: list[Any], limits: list[int | None]) -> None:
        self.partition = partition
        self.states = states
        self.offsets = [-1] * len(states)
        self.limits = limits
        self.errors = [0] * len(states)
        self.records = 0
        self.last_offset = -1
        self.messages: list[Message] | None = None
        self.stored: dict[str, Folded | None] = {}


class Replayer:
    """Folds records partition by partition into per-channel states. Pure: no I/O.

    `channels`: only these channels (compared on the record key before decoding: a valid
    record's key is its channel, so nothing else can fold into them).
    `limit_for(channel, partition)`: per projection, the last offset (inclusive) to fold for
    that channel, None for no limit; asked once, when the channel's first record arrives.
    `keep_messages`: keep each channel's folded messages (for `--summaries`).
    `exact`: use the worker's `step` per message (slow, but needs no round-trip law).
    `partitions`: the topic's partition count; a record that is not on its key's partition
    is rejected, as the worker rejects it (1: every record of partition 0 is at home).
    `writers`: each channel's writers, as its config says them now (`projections.writers`):
    a message from another sender is skipped, as the worker dead-letters it. A config is a
    compacted record, so a replay judges every message by the writers the channel has now.
    """

    def __init__(
        self,
        projections: Sequence[ChannelProjection[Any]],
        *,
        channels: Iterable[str] | None = None,
        max_message_bytes: int = 1024 * 1024,
        max_state_bytes: int = MAX_STATE_BYTES,
        to_offset: int | None = None,
        as_of: datetime | None = None,
        time_field: TimeField = "created_at",
        limit_for: LimitFor | None = None,
        keep_messages: bool = False,
        exact: bool = False,
        partitions: int = 1,
        writers: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.projections = list(projections)
        self.names = [p.name for p in self.projections]
        self._models = [isinstance(p.identity(), BaseModel) for p in self.projections]
        self._wanted = None if channels is None else {c.encode() for c in channels}
        self.max_message_bytes = max_message_bytes
        self.max_state_bytes = max_state_bytes
        self.to_offset = to_offset
        self.as_of = as_of
        self._as_of_ms = None if as_of is None else int(as_of.timestamp() * 1000)
        self.time_field = time_field
        self.limit_for = limit_for
        self.keep_messages = keep_messages
        self.exact = exact
        self.partitions = partitions
        self.writers = writers or {}
        self.stats = ReplayStats(errors={name: 0 for name in self.names})
        self.channels: dict[str, _Channel] = {}
        self.dirty: set[str] = set()
        self._closed: set[bytes | None] = set()

    def _at(self, name: str) -> int | None:
        return self.names.index(name) if name in self.names else None

    def _open(self, name: str, partition: int) -> _Channel:
        limits: list[int | None] = (
            list(self.limit_for(name, partition))
            if self.limit_for is not None
            else [None] * len(self.projections)
        )
        channel = _Channel(partition, [p.identity() for p in self.projections], limits)
        if self.keep_messages:
            channel.messages = []
        self.channels[name] = channel
        return channel

    def seed(self, name: str, partition: int, folds: Mapping[str, Folded]) -> None:
        """Start a channel from stored folds (an incremental rebuild), as the worker would."""
        channel = self.channels.get(name) or self._open(name, partition)
        for index, projection in enumerate(self.projections):
            folded = folds.get(projection.name)
            if folded is None:
                continue
            channel.states[index] = load_state(projection, folded.state)
            channel.offsets[index] = folded.offset
            channel.stored[projection.name] = folded

    def _after_cutoff(self, message: Message, timestamp_ms: int) -> bool:
        if self.time_field == "record":
            return self._as_of_ms is not None and timestamp_ms > self._as_of_ms
        return self.as_of is not None and message.created_at > self.as_of

    def feed(self, partition: int, records: Iterable[RecordLike]) -> int:
        """Fold one partition's records, in offset order; returns how many were folded."""
        projections = self.projections
        count = len(projections)
        models = self._models
        wanted = self._wanted
        closed = self._closed
        channels = self.channels
        to_offset = self.to_offset
        max_bytes = self.max_message_bytes
        partitions = self.partitions
        cutoff = self.as_of is not None
        stats = self.stats
        errors = stats.errors
        names = self.names
        dirty = self.dirty
        max_state = self.max_state_bytes
        overview_at = self._at(ChannelOverviewProjection.name)
        commitments_at = self._at(CommitmentProjection.name)
        folded = 0
        for record in records:
            stats.records += 1
            offset = record.offset
            if to_offset is not None and offset >= to_offset:
                stats.beyond += 1
                continue
            key = record.key
            if wanted is not None and key not in wanted:
                stats.filtered += 1
                continue
            if key in closed:
                stats.after_cutoff += 1
                continue
            try:
                message = _validate(key, record.value, max_bytes, partition, partitions, record)
            except MessageError:
                stats.invalid += 1
                continue
            if self.writers and writer_refusal(self.writers.get(message.channel), message):
                stats.refused += 1
                continue
            if cutoff and self._after_cutoff(message, record.timestamp):
                closed.add(key)
                stats.after_cutoff += 1
                continue
            name = message.channel
            channel = channels.get(name)
            if channel is None:
                channel = self._open(name, partition)
            if self.exact:
                self._step_exact(channel, message, offset)
            else:
                states = channel.states
                offsets = channel.offsets
                limits = channel.limits
                applied: dict[int, Any] = {}
                for index in range(count):
                    if offset <= offsets[index]:
                        continue
                    limit = limits[index]
                    if limit is not None and offset > limit:
                        continue
                    state = states[index]
                    try:
                        new = projections[index].apply(state, message)
                    except Exception:  # the worker keeps the old fold and dead-letters
                        channel.errors[index] += 1
                        errors[names[index]] += 1
                        continue
                    if not models[index] and (new is not state or offsets[index] < 0):
                        new = to_jsonable_python(new)  # what the table round trip does
                    applied[index] = new
                for index, new in applied.items():
                    # The step's size rule, decided on the same JSON the table would hold.
                    if new is not states[index] and oversize(dump_state(new), max_state):
                        channel.errors[index] += 1
                        errors[names[index]] += 1
                        continue
                    states[index] = new
                    offsets[index] = offset
                if (
                    overview_at is not None
                    and commitments_at is not None
                    and offsets[overview_at] == offset
                    and offsets[commitments_at] == offset  # not stopped at a rebuild's limit
                ):
                    commitments = states[commitments_at]
                    if isinstance(commitments, CommitmentsState):
                        states[overview_at] = joined(states[overview_at], commitments)
            if channel.messages is not None:
                channel.messages.append(message)
            channel.records += 1
            channel.last_offset = offset
            dirty.add(name)
            folded += 1
        stats.folded += folded
        return folded

    def _step_exact(self, channel: _Channel, message: Message, offset: int) -> None:
        active = [
            p
            for p, limit in zip(self.projections, channel.limits, strict=True)
            if limit is None or offset <= limit
        ]
        for done in step(
            active, channel.stored, message, offset, max_state_bytes=self.max_state_bytes
        ):
            name = done.projection.name
            if done.error is not None:
                channel.errors[self.names.index(name)] += 1
                self.stats.errors[name] += 1
            elif done.applied:
                # The table's JSON round trip, as the worker's next read sees it.
                raw = orjson.loads(orjson.dumps(done.folded.model_dump(mode="json")))
                channel.stored[name] = Folded.model_validate(raw)

    def folds(self, name: str) -> dict[str, Folded]:
        """The channel's folds as the worker's tables would hold them (absent: never applied)."""
        channel = self.channels.get(name)
        if channel is None:
            return {}
        if self.exact:
            return {n: f for n, f in channel.stored.items() if f is not None}
        result = {}
        for index, projection in enumerate(self.projections):
            offset = channel.offsets[index]
            if offset < 0:
                continue
            stored = channel.stored.get(projection.name)
            if stored is not None and stored.offset == offset:
                result[projection.name] = stored  # seeded and unchanged since
                continue
            result[projection.name] = Folded(
                projection=projection.name,
                version=projection.version,
                offset=offset,
                state=dump_state(channel.states[index]),
            )
        return result

    def partition_of(self, name: str) -> int | None:
        channel = self.channels.get(name)
        return None if channel is None else channel.partition

    def messages_of(self, name: str) -> list[Message]:
        channel = self.channels.get(name)
        return list(channel.messages or []) if channel is not None else []


def _validate(
    key: bytes | None,
    value: bytes | None,
    max_bytes: int,
    partition: int,
    partitions: int,
    record: RecordLike,
) -> Message:
    """The worker's `validate_record` with `LogPosition(partition, offset, timestamp)`,
    building the position only for a record that needs it (one without `id` or
    `created_at`): without a position, decoding stops at exactly that check."""
    try:
        return validate_record(key, value, max_bytes, partition=partition, partitions=partitions)
    except MessageError as error:
        if not error.reason.endswith(MISSING_ON_THE_LOG):
            raise
    position = LogPosition(partition, record.offset, record.timestamp)
    return validate_record(
        key, value, max_bytes, position, partition=partition, partitions=partitions
    )


def state_view(channel: str, folds: Mapping[str, Folded]) -> dict[str, Any]:
    """The shape of the worker's `GET /channels/{channel}/state` (without config)."""
    return {
        "channel": channel,
        "projections": {
            name: {"version": f.version, "offset": f.offset, "state": f.state}
            for name, f in sorted(folds.items())
        },
    }
