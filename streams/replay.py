"""Replay: fold `chorus.messages` again from the log, with the worker's own projection code.

The log is the truth, so folding it again must give the live state. This module reads the
topic from the beginning with its own consumer (no group, manual assignment, no offsets
committed), folds each channel through the registered projections, and then

- prints states (`--channel`, `--to-offset`, `--as-of`), and recomputed summaries (`--summaries`);
- checks the worker's live tables against the log (`--verify`, and `shadow_check` in the worker);
- builds a new projection version's table before workers switch to it (`--rebuild`), and
  removes old versions' changelogs when asked (`--drop-old`);
- measures itself against a raw aiokafka read of the same topic (`--benchmark`).

Functional core (no I/O): `Replayer` (the hot loop), `compare_channel`, `render_diff`,
`changelog_record`, `plan_rebuild`, `sample_channels`. Everything else is the shell.

Positions in the log
--------------------
`--to-offset N`: in every partition, the records at offsets < N, i.e. the first N records of
each partition (Kafka's end-offset convention). A channel lives in one partition, so its
state "as of offset N" is the fold of its messages among the first N records of that
partition, and its fold's `offset` is the last of those it folded.

`--as-of T`: per channel, its messages in log order up to, not including, the first one
later than T (by `created_at`, or by the Kafka record timestamp with `--time-field record`).
A prefix, never a filtered subsequence, so the result is a state the live table really held.

The hot loop and its equivalence to the worker
----------------------------------------------
The worker folds a record with `projections.channel.step` → `fold_at`, which loads the
stored state, applies, and dumps it per message. `Replayer` keeps each state as an object and
dumps it once at the end. Per projection and channel it keeps (state, offset) and, for a
record at `offset` with decoded `message`, does exactly what `fold_at` does:

- skip when `offset <= folded offset` (never true when reading forwards, kept for seeded runs);
- `new = apply(state, message)`; an exception keeps the old state *and* offset (as `step`);
- otherwise the offset becomes `offset`, and the state `new`.

Between two messages the worker's state goes through `dump_state` → table (JSON) →
`load_state`. For non-pydantic states the loop applies the same JSON normalisation
(`to_jsonable_python`, what `Folded.model_dump(mode="json")` does) after every applied
message, so user projections over dicts see exactly what they see in the worker. For pydantic
states it relies on the round-trip law `load_state(p, dump_state(s)) == s`, which holds for the
built-in projections (a unit property test checks it against `fold_at`). `--exact` runs the
worker's own `step` per message instead, for projections whose states do not round-trip.

Records are decoded and validated by `streams.folding.validate_record`, the worker's own
gate, so exactly the records the worker dead-letters are skipped here.

Verify
------
First the worker group's committed offsets, then the live folds over HTTP, then the log:
each channel's projection is folded up to exactly its live fold's offset. A projection with
no live fold is folded as far as the worker is known to have gone for the channel (its other
folds, and the committed offset), so a fold the worker lost shows up; so does a channel it
does not know although the log has folded messages for it before the committed offset.
States are compared by `canonical_hash`; differences get a unified diff of sorted JSON.

Blue-green rebuilds
-------------------
Tables are versioned (`fold-<name>-v<version>`, changelog `<app_id>-fold-<name>-v<version>-
changelog`), so a new version never touches the old one's data.

1. With the new code installed where the CLI runs, `chorus replay --rebuild` folds the log
   up to its end offsets into the new version's changelog (key: the channel as a JSON
   string, value: the `Folded` JSON, in the record's own partition, as Faust writes it),
   and records a marker (`through`: source offsets folded; `changelog_end`) on the compacted
   `<prefix>rebuilds` topic. Old-version workers keep folding and serving meanwhile.
2. Switch: stop the old workers, run `chorus replay --rebuild` again (incremental: it folds
   only what arrived since, from the folds it wrote), start workers with the new code. They
   recover the new table from its changelog and resume at the group's committed offsets; the
   records already folded are skipped by the fold's offset guard. Readers switch with the
   workers: a worker serves the versions it folds, and the new table is current from its
   first read. `catch_up_rebuilds` does step 2's middle command automatically when a worker
   starts (wired in `streams.worker`), and also builds a projection (or version) deployed
   into a running system without a rebuild, which would otherwise start mid-log from its
   identity.
3. `chorus replay --drop-old` deletes older versions' changelogs, only once the worker serves
   the new version.

A table is never written while a worker writes it: a changelog that moved past the marker,
or has data without a marker, belongs to a worker and is left alone.

Limits: reads pause during the restart of step 2 (a worker folds one version of a projection;
serving two versions at once needs the registry to load both). In a rolling upgrade, old
workers still folding after the catch-up leave a gap in the new table; stop them first (or
run `--verify` afterwards: it shows any gap as a difference). Summaries are recomputed with
the non-LLM tiers over batches of `summary_after_messages`, so they match the live ones only
where the count threshold (not the time threshold or an LLM) made the batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import gc
import multiprocessing
import os
import random
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import click
import orjson
from aiokafka import TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.partitioner import DefaultPartitioner
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from projections.channel import step
from projections.model import MISSING_ON_THE_LOG, LogPosition, Message, MessageError
from projections.projection import (
    ChannelProjection,
    Folded,
    canonical_hash,
    dump_state,
    load_state,
)
from projections.summarise import batch, default_summariser, summarise_batches
from projections.summarise.pending import summarisable
from streams.folding import validate_record
from streams.kafka import NoBrokerError, admin, consumer, producer
from streams.registry import ProjectionImportError, registered_projections
from streams.settings import Settings, get_settings
from streams.topics import MESSAGES

TimeField = Literal["created_at", "record"]
LimitFor = Callable[[str, int], Sequence[int | None]]

# A fetch brings whole record batches; large limits mean few round trips per partition.
FETCH_OPTIONS: dict[str, Any] = {
    "max_partition_fetch_bytes": 8 * 1024 * 1024,
    "fetch_max_bytes": 64 * 1024 * 1024,
    "fetch_max_wait_ms": 100,
}
MAX_RECORDS = 50_000
CHUNK = 5_000
IDLE_TIMEOUT_SECONDS = 60.0
REBUILDS = "rebuilds"


class ReplayError(click.ClickException):
    """An operational failure (no broker, no worker, refused rebuild): exit code 3, so
    it is never mistaken for `--verify`'s exit code 1 (the log and live state differ)."""

    exit_code = 3


# --- functional core: the hot loop ------------------------------------------------------------


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
    invalid: int = 0  # records the worker dead-letters (not a valid message for its key)
    filtered: int = 0  # other channels' records (`channels=`)
    beyond: int = 0  # at or after `to_offset`
    after_cutoff: int = 0  # after the channel's `as_of` cut-off
    cross_partition: int = 0  # a channel's record in a second partition (foreign partitioner)
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
    """

    def __init__(
        self,
        projections: Sequence[ChannelProjection[Any]],
        *,
        channels: Iterable[str] | None = None,
        max_message_bytes: int = 1024 * 1024,
        to_offset: int | None = None,
        as_of: datetime | None = None,
        time_field: TimeField = "created_at",
        limit_for: LimitFor | None = None,
        keep_messages: bool = False,
        exact: bool = False,
    ) -> None:
        self.projections = list(projections)
        self.names = [p.name for p in self.projections]
        self._models = [isinstance(p.identity(), BaseModel) for p in self.projections]
        self._wanted = None if channels is None else {c.encode() for c in channels}
        self.max_message_bytes = max_message_bytes
        self.to_offset = to_offset
        self.as_of = as_of
        self._as_of_ms = None if as_of is None else int(as_of.timestamp() * 1000)
        self.time_field = time_field
        self.limit_for = limit_for
        self.keep_messages = keep_messages
        self.exact = exact
        self.stats = ReplayStats(errors={name: 0 for name in self.names})
        self.channels: dict[str, _Channel] = {}
        self.dirty: set[str] = set()
        self._closed: set[bytes | None] = set()

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
        cutoff = self.as_of is not None
        stats = self.stats
        errors = stats.errors
        names = self.names
        dirty = self.dirty
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
                message = _validate(key, record.value, max_bytes, partition, offset, record)
            except MessageError:
                stats.invalid += 1
                continue
            if cutoff and self._after_cutoff(message, record.timestamp):
                closed.add(key)
                stats.after_cutoff += 1
                continue
            name = message.channel
            channel = channels.get(name)
            if channel is None:
                channel = self._open(name, partition)
            elif channel.partition != partition:
                stats.cross_partition += 1
            if self.exact:
                self._step_exact(channel, message, offset)
            else:
                states = channel.states
                offsets = channel.offsets
                limits = channel.limits
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
                    states[index] = new
                    offsets[index] = offset
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
        for done in step(active, channel.stored, message, offset):
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
    offset: int,
    record: RecordLike,
) -> Message:
    """`validate_record(key, value, max_bytes, LogPosition(partition, offset, timestamp))`,
    building the position only for a record that needs it (one without `id` or
    `created_at`): without a position, decoding stops at exactly that check."""
    try:
        return validate_record(key, value, max_bytes)
    except MessageError as error:
        if not error.reason.endswith(MISSING_ON_THE_LOG):
            raise
    return validate_record(key, value, max_bytes, LogPosition(partition, offset, record.timestamp))


def state_view(channel: str, folds: Mapping[str, Folded]) -> dict[str, Any]:
    """The shape of the worker's `GET /channels/{channel}/state` (without config)."""
    return {
        "channel": channel,
        "projections": {
            name: {"version": f.version, "offset": f.offset, "state": f.state}
            for name, f in sorted(folds.items())
        },
    }


# --- functional core: comparing with live state -----------------------------------------------


@dataclass(frozen=True)
class Difference:
    channel: str
    projection: str
    kind: Literal["state", "offset", "version", "missing-live", "missing-replay"]
    live: Folded | None
    replay: Folded | None

    def describe(self) -> str:
        live = _where(self.live)
        replay = _where(self.replay)
        reasons = {
            "state": "states differ",
            "offset": "last folded offsets differ",
            "version": "versions differ",
            "missing-live": "the log folds into this projection but the worker has no fold",
            "missing-replay": "the worker has a fold the log does not produce",
        }
        return (
            f"{self.channel} [{self.projection}]: {reasons[self.kind]} "
            f"(live {live}, replay {replay})"
        )


def _where(folded: Folded | None) -> str:
    if folded is None:
        return "none"
    return f"v{folded.version}@{folded.offset} {canonical_hash(folded.state)[:12]}"


def live_folds(view: Mapping[str, Any] | None) -> dict[str, Folded]:
    """The folds in a worker state view (`GET /channels/{channel}/state`)."""
    if not view:
        return {}
    return {
        name: Folded(
            projection=name, version=body["version"], offset=body["offset"], state=body["state"]
        )
        for name, body in (view.get("projections") or {}).items()
    }


def compare_channel(
    channel: str,
    live: Mapping[str, Folded],
    replay: Mapping[str, Folded],
    names: Iterable[str],
) -> list[Difference]:
    """Differences between the live folds and the replayed ones, per projection."""
    differences = []
    for name in names:
        theirs, ours = live.get(name), replay.get(name)
        kind: Literal["state", "offset", "version", "missing-live", "missing-replay"] | None
        if theirs is None and ours is None:
            kind = None
        elif theirs is None:
            kind = "missing-live"
        elif ours is None:
            kind = "missing-replay"
        elif theirs.version != ours.version:
            kind = "version"
        elif canonical_hash(theirs.state) != canonical_hash(ours.state):
            kind = "state"
        elif theirs.offset != ours.offset:
            kind = "offset"
        else:
            kind = None
        if kind is not None:
            differences.append(Difference(channel, name, kind, theirs, ours))
    return differences


def _pretty(folded: Folded | None) -> list[str]:
    if folded is None:
        return []
    body = {"version": folded.version, "offset": folded.offset, "state": folded.state}
    text = orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return text.splitlines()


def render_diff(difference: Difference, max_lines: int = 80) -> str:
    """A unified diff of the live and replayed folds as sorted, indented JSON."""
    label = f"{difference.channel} [{difference.projection}]"
    lines = list(
        difflib.unified_diff(
            _pretty(difference.live),
            _pretty(difference.replay),
            fromfile=f"live {label}",
            tofile=f"replay {label}",
            lineterm="",
        )
    )
    if len(lines) > max_lines:
        hidden = len(lines) - max_lines
        lines = [*lines[:max_lines], f"... ({hidden} more diff lines)"]
    return "\n".join(lines)


def verify_limits(
    projections: Sequence[ChannelProjection[Any]],
    live: Mapping[str, Mapping[str, Folded] | None],
    committed: Mapping[int, int],
) -> LimitFor:
    """How far to fold each channel so that it is comparable with its live snapshot.

    A projection with a live fold: up to that fold's offset. A projection without one: as
    far as the worker is known to have gone for the channel, the furthest of its other folds
    and the group's committed offset (everything before it was processed). A channel the
    worker does not know: up to the committed offset.
    """

    def limit_for(channel: str, partition: int) -> list[int | None]:
        processed = committed.get(partition, 0) - 1
        folds = live.get(channel) or {}
        furthest = max([processed, *(f.offset for f in folds.values())])
        return [folds[p.name].offset if p.name in folds else furthest for p in projections]

    return limit_for


def sample_channels(channels: Sequence[str], size: int, rng: random.Random) -> list[str]:
    """A uniform sample (all of them when there are fewer), in a stable order."""
    if size >= len(channels):
        return sorted(channels)
    return sorted(rng.sample(list(channels), size))


def snapshot_folds(
    tables: Mapping[str, Any], channels: Iterable[str]
) -> dict[str, dict[str, Folded]]:
    """Copy the live folds of `channels` out of the worker's tables ({name: table}).

    Synchronous, with no await, so the copy is consistent across projections.
    """
    snapshot: dict[str, dict[str, Folded]] = {}
    for channel in channels:
        folds = {}
        for name, table in tables.items():
            raw = table.get(channel)
            if raw is not None:
                folds[name] = Folded.model_validate(raw)
        snapshot[channel] = folds
    return snapshot


# --- functional core: rebuild plans and changelog records -------------------------------------


def fold_table(projection: ChannelProjection[Any]) -> str:
    from streams.app import fold_table_name

    return fold_table_name(projection)


def changelog_topic(settings: Settings, projection: ChannelProjection[Any]) -> str:
    """The changelog Faust gives the projection's table: `<app_id>-<table>-changelog`."""
    return f"{settings.app_id}-{fold_table(projection)}-changelog"


def changelog_record(channel: str, folded: Folded) -> tuple[bytes, bytes]:
    """Key and value as Faust's json codec writes a fold table entry."""
    return orjson.dumps(channel), orjson.dumps(folded.model_dump(mode="json"))


class RebuildMarker(BaseModel):
    """What a rebuild wrote, on the compacted `<prefix>rebuilds` topic (key: app and table).

    `through[p]`: the source partition's records before this offset are folded in.
    `changelog_end[p]`: the changelog's end offsets right after the rebuild wrote. When they
    have moved on, a worker folds the table itself and the rebuild is over.
    """

    model_config = ConfigDict(extra="ignore")

    app_id: str
    projection: str
    version: int
    table: str
    changelog: str
    status: Literal["building", "built"]
    through: dict[int, int] = {}
    changelog_end: dict[int, int] = {}
    channels: int = 0
    written: int = 0
    updated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    def key(self) -> bytes:
        return f"{self.app_id}/{self.table}".encode()


def marker_key(settings: Settings, projection: ChannelProjection[Any]) -> bytes:
    return f"{settings.app_id}/{fold_table(projection)}".encode()


@dataclass(frozen=True)
class RebuildPlan:
    projection: ChannelProjection[Any]
    mode: Literal["full", "incremental", "live", "not-needed"]
    reason: str
    marker: RebuildMarker | None = None


def plan_rebuild(
    projection: ChannelProjection[Any],
    changelog_end: Mapping[int, int] | None,
    marker: RebuildMarker | None,
    *,
    deployed: bool = True,
) -> RebuildPlan:
    """Decide how to bring a projection's table up to the log.

    - no changelog data: a full rebuild (`deployed=False`, a group that has committed
      nothing, means a worker will fold from the start anyway: not needed);
    - a finished rebuild nobody has written after: incremental, from where it stopped;
    - an unfinished rebuild: full again (its partial writes are all overwritten);
    - anything else: a worker already folds this table, and a second writer would corrupt
      its changelog, so it is left alone.
    """
    written = changelog_end is not None and any(end > 0 for end in changelog_end.values())
    if marker is not None and marker.status == "building":
        return RebuildPlan(projection, "full", "an earlier rebuild did not finish", marker)
    if not written and marker is None:
        if not deployed:
            return RebuildPlan(projection, "not-needed", "no worker has folded yet")
        return RebuildPlan(projection, "full", "the table has never been written")
    if marker is not None and dict(changelog_end or {}) == marker.changelog_end:
        return RebuildPlan(projection, "incremental", "resuming the previous rebuild", marker)
    return RebuildPlan(projection, "live", "a worker already folds this table", marker)


# --- the shell: reading the log ---------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    partition: int
    start: int
    stop: int  # exclusive

    @property
    def size(self) -> int:
        return max(0, self.stop - self.start)


def _default_partitioner() -> Callable[[bytes, list[int], list[int]], int]:
    partitioner: Callable[[bytes, list[int], list[int]], int] = DefaultPartitioner()
    return partitioner


def key_partition(channel: str, partitions: int) -> int:
    """The partition chorus's producers (aiokafka's murmur2 partitioner) pick for a channel."""
    every = list(range(partitions))
    return _default_partitioner()(channel.encode(), every, every)


async def topic_spans(
    kafka: Any,
    topic: str,
    *,
    to_offset: int | None = None,
    start_offsets: Mapping[int, int] | None = None,
    stop_offsets: Mapping[int, int] | None = None,
    partitions: Iterable[int] | None = None,
) -> list[Span]:
    """Per partition, the offsets to read: from the beginning (or `start_offsets`) to the end
    offsets at this moment (or `stop_offsets` / `to_offset`, whichever is lower)."""
    known = (await kafka._client.fetch_all_metadata()).partitions_for_topic(topic)
    if not known:
        raise ReplayError(f"topic {topic!r} does not exist")
    chosen = sorted(known if partitions is None else set(partitions) & set(known))
    tps = [TopicPartition(topic, p) for p in chosen]
    if not tps:
        return []
    beginnings = await kafka.beginning_offsets(tps)
    ends = await kafka.end_offsets(tps)
    spans = []
    for tp in tps:
        start = max(beginnings[tp], (start_offsets or {}).get(tp.partition, 0))
        stop = ends[tp]
        if stop_offsets is not None and tp.partition in stop_offsets:
            stop = min(stop, stop_offsets[tp.partition])
        if to_offset is not None:
            stop = min(stop, to_offset)
        spans.append(Span(tp.partition, start, max(start, stop)))
    return spans


def log_consumer(settings: Settings) -> Any:
    """A consumer of our own: no group, nothing committed, large fetches."""
    return consumer(settings, group_id=None, enable_auto_commit=False, **FETCH_OPTIONS)


async def read_spans(
    kafka: Any,
    topic: str,
    spans: Sequence[Span],
    on_batch: Callable[[int, list[Any]], object],
    on_progress: Callable[[int, int], object] | None = None,
) -> int:
    """Hand each partition's records in `spans` to `on_batch`, in batches; returns the count.

    One `getmany` returns up to `MAX_RECORDS` records across partitions; a partition is paused
    once its span is read.
    """
    remaining: dict[TopicPartition, int] = {}
    for span in spans:
        if span.size:
            remaining[TopicPartition(topic, span.partition)] = span.stop
    if not remaining:
        return 0
    kafka.assign(list(remaining))
    for span in spans:
        if span.size:
            kafka.seek(TopicPartition(topic, span.partition), span.start)
    total = 0
    idle_since = time.monotonic()
    while remaining:
        batches = await kafka.getmany(*remaining, timeout_ms=500, max_records=MAX_RECORDS)
        if batches:
            idle_since = time.monotonic()
        for tp, records in batches.items():
            stop = remaining.get(tp)
            if stop is None or not records:
                continue
            finished = records[-1].offset >= stop - 1
            if records[-1].offset >= stop:
                records = [r for r in records if r.offset < stop]
            for start in range(0, len(records), CHUNK):  # chunks keep the progress live
                chunk = records[start : start + CHUNK]
                on_batch(tp.partition, chunk)
                total += len(chunk)
                if on_progress is not None:
                    on_progress(tp.partition, len(chunk))
            if finished:
                del remaining[tp]
                kafka.pause(tp)
        for tp in [tp for tp in remaining if tp not in batches]:
            if await kafka.position(tp) >= remaining[tp]:  # a gap at the end (compaction)
                del remaining[tp]
                kafka.pause(tp)
        if remaining and time.monotonic() - idle_since > IDLE_TIMEOUT_SECONDS:
            left = {tp.partition: stop for tp, stop in remaining.items()}
            raise ReplayError(f"no records for {IDLE_TIMEOUT_SECONDS:.0f}s; still to read: {left}")
    return total


class _Progress:
    """A rich progress display on stderr: overall and per partition, messages/s and ETA."""

    def __init__(self, spans: Sequence[Span], enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            Task,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        class Rate(ProgressColumn):
            """Messages/s since the start (partitions are read side by side)."""

            def render(self, task: Task) -> Text:
                elapsed = task.finished_time if task.finished else task.elapsed
                if not elapsed or not task.completed:
                    return Text("        … msg/s")
                return Text(f"{task.completed / elapsed:>9,.0f} msg/s")

        console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description:>14}"),
            BarColumn(),
            MofNCompleteColumn(),
            Rate(),
            TimeRemainingColumn(),
            console=console,
            disable=not (enabled and console.is_terminal),
        )
        self.total = self.progress.add_task("all partitions", total=sum(s.size for s in spans))
        self.tasks = {
            s.partition: self.progress.add_task(f"partition {s.partition}", total=s.size)
            for s in spans
        }

    def advance(self, partition: int, count: int) -> None:
        self.progress.advance(self.tasks[partition], count)
        self.progress.advance(self.total, count)

    def __enter__(self) -> _Progress:
        self.progress.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.progress.stop()


@dataclass
class ReplayRun:
    replayer: Replayer
    spans: list[Span]
    seconds: float

    @property
    def records(self) -> int:
        return self.replayer.stats.records

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


async def replay(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    *,
    channels: Iterable[str] | None = None,
    to_offset: int | None = None,
    as_of: datetime | None = None,
    time_field: TimeField = "created_at",
    limit_for: LimitFor | None = None,
    keep_messages: bool = False,
    exact: bool = False,
    start_offsets: Mapping[int, int] | None = None,
    stop_offsets: Mapping[int, int] | None = None,
    partitions: Iterable[int] | None = None,
    seeds: Mapping[str, tuple[int, Mapping[str, Folded]]] | None = None,
    progress: bool = False,
    workers: int = 1,
) -> ReplayRun:
    """Fold `chorus.messages` (or the given spans of it) into a `Replayer`.

    `workers` > 1 reads and folds the partitions in that many forked processes (0: one per
    CPU), each with its own consumer over a share of the partitions; see `replay_parallel`.
    """
    options: dict[str, Any] = {
        "channels": None if channels is None else list(channels),
        "max_message_bytes": settings.max_message_bytes,
        "to_offset": to_offset,
        "as_of": as_of,
        "time_field": time_field,
        "limit_for": limit_for,
        "keep_messages": keep_messages,
        "exact": exact,
    }
    replayer = Replayer(projections, **options)
    for name, (partition, folds) in (seeds or {}).items():
        replayer.seed(name, partition, folds)
    replayer.dirty.clear()
    topic = settings.topic(MESSAGES)
    kafka = log_consumer(settings)
    await kafka.start()
    try:
        spans = await topic_spans(
            kafka,
            topic,
            to_offset=to_offset,
            start_offsets=start_offsets,
            stop_offsets=stop_offsets,
            partitions=partitions,
        )
        shares = share_partitions(spans, resolve_workers(workers))
        if len(shares) <= 1:
            started = time.perf_counter()
            with _Progress(spans, progress) as bar, fewer_collections():
                await read_spans(kafka, topic, spans, replayer.feed, bar.advance)
            return ReplayRun(replayer, spans, time.perf_counter() - started)
    finally:
        await kafka.stop()
    started = time.perf_counter()
    job = _Job(settings, list(projections), options, shares, dict(seeds or {}))
    with _Progress(spans, progress) as bar:
        parts = await _run_job(job, bar)
    if not merge_parts(replayer, parts):
        # A channel's records in partitions read by two processes (a foreign partitioner):
        # only one process can fold them in order, so read everything here instead.
        return await replay(
            settings,
            projections,
            **{k: v for k, v in options.items() if k != "max_message_bytes"},
            start_offsets=start_offsets,
            stop_offsets=stop_offsets,
            partitions=partitions,
            seeds=seeds,
            progress=progress,
            workers=1,
        )
    return ReplayRun(replayer, spans, time.perf_counter() - started)


# --- the shell: parallel replay over partitions -----------------------------------------------
#
# A channel lives in one partition (key = channel, murmur2), so partitions fold independently.
# Each worker process reads a share of the partitions with its own consumer, folds them into a
# Replayer of its own, and returns its channels; the parent merges them. The processes are
# forked, so the projections, `limit_for` and the seeds reach them without pickling; only the
# results travel back (pickled channel states). Linux/macOS only (fork); elsewhere one process.


@contextlib.contextmanager
def fewer_collections(threshold: int = 50_000) -> Iterator[None]:
    """Run the cyclic garbage collector less often while folding: states and messages are
    long-lived and acyclic, and scanning them again and again costs about a tenth of the
    fold. Restores the thresholds after."""
    before = gc.get_threshold()
    gc.set_threshold(max(threshold, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def resolve_workers(workers: int) -> int:
    """`workers`, with 0 meaning one per CPU; 1 where processes cannot be forked."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if workers <= 0:
        return max(1, os.cpu_count() or 1)
    return workers


def share_partitions(spans: Sequence[Span], workers: int) -> list[list[Span]]:
    """Split the non-empty spans into at most `workers` shares of about equal size (largest
    first, each into the smallest share so far). Deterministic."""
    todo = sorted((s for s in spans if s.size), key=lambda s: (-s.size, s.partition))
    shares: list[list[Span]] = [[] for _ in range(max(1, min(workers, len(todo))))]
    sizes = [0] * len(shares)
    for span in todo:
        smallest = sizes.index(min(sizes))
        shares[smallest].append(span)
        sizes[smallest] += span.size
    return [sorted(share, key=lambda s: s.partition) for share in shares if share]


@dataclass
class _Part:
    """What one worker process hands back: its share's channels and counts."""

    channels: dict[str, _Channel]
    stats: ReplayStats
    dirty: set[str]


@dataclass
class _Job:
    settings: Settings
    projections: list[ChannelProjection[Any]]
    options: dict[str, Any]
    shares: list[list[Span]]
    seeds: dict[str, tuple[int, Mapping[str, Folded]]]
    counts: Any = None  # multiprocessing.Array: records read per partition (progress)


_JOB: _Job | None = None  # set in the parent just before forking; read by the children


async def _run_job(job: _Job, bar: _Progress) -> list[_Part]:
    global _JOB
    context = multiprocessing.get_context("fork")
    job.counts = context.Array("q", max(s.partition for share in job.shares for s in share) + 1)
    loop = asyncio.get_running_loop()
    _JOB = job
    try:
        with ProcessPoolExecutor(len(job.shares), mp_context=context) as pool:
            futures = [
                loop.run_in_executor(pool, _replay_share, index) for index in range(len(job.shares))
            ]
            _JOB = None  # the children have it (forked at the first submit)
            reported: dict[int, int] = {}
            pending = asyncio.gather(*futures)
            while not pending.done():
                await asyncio.wait([pending], timeout=0.2)
                for share in job.shares:
                    for span in share:
                        now = job.counts[span.partition]
                        if now != reported.get(span.partition, 0):
                            bar.advance(span.partition, now - reported.get(span.partition, 0))
                            reported[span.partition] = now
            return list(await pending)
    finally:
        _JOB = None


def _replay_share(index: int) -> _Part:
    """In a worker process: read and fold one share of the partitions."""
    job = _JOB
    assert job is not None, "worker processes are forked from replay()"
    share = job.shares[index]
    mine = {span.partition for span in share}
    replayer = Replayer(job.projections, **job.options)
    for name, (partition, folds) in job.seeds.items():
        if partition in mine:
            replayer.seed(name, partition, folds)
    replayer.dirty.clear()
    counts = job.counts

    def progress(partition: int, count: int) -> None:
        counts[partition] += count

    async def read() -> None:
        topic = job.settings.topic(MESSAGES)
        kafka = log_consumer(job.settings)
        await kafka.start()
        try:
            await read_spans(kafka, topic, share, replayer.feed, progress)
        finally:
            await kafka.stop()

    gc.freeze()  # the parent's objects: never scanned here, nor their pages copied
    with fewer_collections():
        asyncio.run(read())
    return _Part(replayer.channels, replayer.stats, replayer.dirty)


def merge_parts(replayer: Replayer, parts: Sequence[_Part]) -> bool:
    """Merge the worker processes' channels into `replayer` (which holds the seeds). False,
    and `replayer` untouched, when a channel came from two of them."""
    seen: set[str] = set()
    for part in parts:
        if not seen.isdisjoint(part.channels):
            return False
        seen.update(part.channels)
    stats = replayer.stats
    for part in parts:
        replayer.channels.update(part.channels)
        replayer.dirty.update(part.dirty)
        for name in (
            "records",
            "folded",
            "invalid",
            "filtered",
            "beyond",
            "after_cutoff",
            "cross_partition",
        ):
            setattr(stats, name, getattr(stats, name) + getattr(part.stats, name))
        for name, count in part.stats.errors.items():
            stats.errors[name] = stats.errors.get(name, 0) + count
    return True


async def committed_offsets(settings: Settings) -> dict[int, int]:
    """The worker group's committed offsets on `chorus.messages` (read only)."""
    topic = settings.topic(MESSAGES)
    client = admin(settings)
    await client.start()
    try:
        offsets = await client.list_consumer_group_offsets(settings.app_id)
    finally:
        await client.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


# --- verify -----------------------------------------------------------------------------------


@dataclass
class VerifyReport:
    channels: int = 0
    compared: int = 0  # (channel, projection) pairs compared
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: int = 0
    seconds: float = 0.0


LiveState = Callable[[str], Awaitable[Any]]


async def _fetch_states(
    fetch: LiveState, channels: Iterable[str], concurrency: int = 16
) -> dict[str, dict[str, Folded] | None]:
    gate = asyncio.Semaphore(concurrency)

    async def one(channel: str) -> tuple[str, dict[str, Folded] | None]:
        async with gate:
            view = await fetch(channel)
        return channel, (live_folds(view) if view is not None else None)

    return dict(await asyncio.gather(*(one(c) for c in channels)))


async def verify(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    *,
    fetch_state: LiveState,
    list_channels: Callable[[], Awaitable[list[str]]] | None = None,
    channels: Sequence[str] = (),
    exact: bool = False,
    progress: bool = False,
    workers: int = 1,
) -> VerifyReport:
    """Compare every channel's live folds with the log folded up to the same offsets.

    Order matters: the group's committed offsets first, then the live states, then the log,
    so the log always holds everything the snapshot has folded.
    """
    report = VerifyReport()
    committed = await committed_offsets(settings)
    listed = list(channels) if channels else sorted(await list_channels()) if list_channels else []
    live = await _fetch_states(fetch_state, listed)
    names = [p.name for p in projections]
    started = time.perf_counter()

    run = await replay(
        settings,
        projections,
        channels=channels or None,
        limit_for=verify_limits(projections, live, committed),
        exact=exact,
        progress=progress,
        workers=workers,
    )
    report.records += run.records
    replayer = run.replayer

    # Channels the log has but the worker did not list (another worker's, or missing).
    unlisted = [c for c in replayer.channels if c not in live and replayer.folds(c)]
    later = await _fetch_states(fetch_state, unlisted)
    snapshots: dict[str, tuple[dict[str, Folded], dict[str, Folded]]] = {
        channel: (folds or {}, replayer.folds(channel))
        for channel, folds in [*live.items(), *later.items()]
        if channel in live or folds is None  # None: unknown to the worker, yet in the log
    }
    present = {c: folds for c, folds in later.items() if folds is not None}
    if present:  # listed by another worker: fold again up to the offsets just fetched
        again = await replay(
            settings,
            projections,
            channels=present,
            limit_for=verify_limits(projections, present, committed),
            exact=exact,
            progress=progress,
            workers=workers,
        )
        report.records += again.records
        for channel, folds in present.items():
            snapshots[channel] = (folds, again.replayer.folds(channel))

    served = {name for theirs, _ in snapshots.values() for name in theirs}
    if served:
        for name in names:
            if name not in served:
                report.notes.append(f"the worker serves no fold of {name!r}; not compared")
    versions = {p.name: p.version for p in projections}
    mismatched: dict[tuple[str, int], int] = {}
    for channel, (theirs, ours) in sorted(snapshots.items()):
        comparable = []
        for name in names:
            if served and name not in served:
                continue
            live_fold = theirs.get(name)
            if live_fold is not None and live_fold.version != versions[name]:
                key = (name, live_fold.version)
                mismatched[key] = mismatched.get(key, 0) + 1
                continue
            comparable.append(name)
        report.compared += len(comparable)
        report.differences.extend(compare_channel(channel, theirs, ours, comparable))
    for (name, version), count in sorted(mismatched.items()):
        report.notes.append(
            f"{name}: the worker serves v{version} on {count} channels, this code folds "
            f"v{versions[name]}; not compared there (rebuild, then switch the workers)"
        )
    report.channels = len(snapshots)
    report.seconds = time.perf_counter() - started
    if replayer.stats.cross_partition:
        report.notes.append(
            f"{replayer.stats.cross_partition} records of a channel were in a second partition "
            "(a producer with another partitioner); the worker splits such channels"
        )
    return report


# --- shadow check (the worker calls this from a timer) ----------------------------------------


async def shadow_check(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    snapshot: Mapping[str, Mapping[str, Folded]],
    partitions: int | None = None,
) -> list[Difference]:
    """Re-fold the snapshot's channels from the log, up to their snapshot offsets, and
    return where they differ (empty: all agree).

    Take the snapshot with `snapshot_folds(chorus.folds, sample_channels(...))`. Only the
    sampled channels' partitions are read, up to the furthest snapshot offset in each, so
    the cost is the length of those partition prefixes, at raw read speed except for the
    sampled channels' own records, which are folded.
    """
    if not snapshot:
        return []
    count = partitions or settings.partitions
    stops: dict[int, int] = {}
    for channel, folds in snapshot.items():
        partition = key_partition(channel, count)
        furthest = max((f.offset for f in folds.values()), default=-1)
        stops[partition] = max(stops.get(partition, 0), furthest + 1)
    run = await replay(
        settings,
        projections,
        channels=snapshot,
        limit_for=verify_limits(projections, snapshot, {}),
        stop_offsets=stops,
        partitions=stops,
    )
    names = [p.name for p in projections]
    differences = []
    for channel, folds in snapshot.items():
        comparable = [
            n for n in names if n not in folds or folds[n].version == _version(projections, n)
        ]
        differences.extend(compare_channel(channel, folds, run.replayer.folds(channel), comparable))
    return differences


def _version(projections: Sequence[ChannelProjection[Any]], name: str) -> int:
    return next(p.version for p in projections if p.name == name)


class ShadowHost(Protocol):
    """What the shadow check needs from the worker (`streams.app.Chorus` has it)."""

    settings: Settings
    projections: list[ChannelProjection[Any]]
    folds: dict[str, Any]

    def messages_partition(self, channel: str) -> int | None: ...


async def run_shadow_check(
    host: ShadowHost,
    sample: int,
    rng: random.Random,
    report: Callable[[Difference], Awaitable[object]],
) -> list[Difference]:
    """One round: sample channels this worker actively owns, snapshot their folds, re-fold
    them from the log and `report` every difference. Returns the differences."""
    tables = host.folds
    first = next(iter(tables.values()), None)
    if first is None:
        return []
    owned = [str(c) for c in list(first) if host.messages_partition(str(c)) is not None]
    snapshot = snapshot_folds(tables, sample_channels(owned, sample, rng))
    differences = await shadow_check(host.settings, host.projections, snapshot)
    for difference in differences:
        await report(difference)
    return differences


def install_shadow_check(
    host: Any,
    *,
    every_seconds: float,
    sample: int,
    report: Callable[[Difference], Awaitable[object]],
) -> None:
    """Register the shadow-check timer on the worker's Faust app (off when every_seconds
    <= 0). `host` is the `Chorus`; `report` turns a difference into a metric and an event."""
    if every_seconds <= 0:
        return
    rng = random.Random()

    @host.app.timer(every_seconds, name="shadow-check")
    async def shadow() -> None:
        try:
            await run_shadow_check(host, sample, rng, report)
        except Exception:  # a failed check must never stop the worker
            import logging

            logging.getLogger(__name__).exception("shadow check failed")


# --- rebuild ----------------------------------------------------------------------------------


@dataclass
class RebuildOutcome:
    projection: str
    version: int
    changelog: str
    mode: str
    reason: str
    channels: int = 0
    written: int = 0
    records: int = 0
    through: dict[int, int] = field(default_factory=dict)


async def end_offsets(settings: Settings, *topics: str) -> dict[str, dict[int, int] | None]:
    """Each topic's end offsets per partition (None: no such topic), with one consumer."""
    kafka = consumer(settings, group_id=None, enable_auto_commit=False)
    await kafka.start()
    try:
        metadata = await kafka._client.fetch_all_metadata()
        result: dict[str, dict[int, int] | None] = {}
        for topic in topics:
            known = metadata.partitions_for_topic(topic)
            if not known:
                result[topic] = None
                continue
            ends = await kafka.end_offsets([TopicPartition(topic, p) for p in sorted(known)])
            result[topic] = {tp.partition: offset for tp, offset in ends.items()}
        return result
    finally:
        await kafka.stop()


async def _read_latest(settings: Settings, topic: str) -> dict[int, dict[bytes, bytes | None]]:
    """The latest value per key of a (compacted) topic, per partition."""
    latest: dict[int, dict[bytes, bytes | None]] = {}

    def keep(partition: int, records: list[Any]) -> None:
        table = latest.setdefault(partition, {})
        for record in records:
            if record.key is not None:
                table[record.key] = record.value

    kafka = log_consumer(settings)
    await kafka.start()
    try:
        try:
            spans = await topic_spans(kafka, topic)
        except ReplayError:
            return {}
        await read_spans(kafka, topic, spans, keep)
    finally:
        await kafka.stop()
    return latest


async def read_markers(settings: Settings) -> dict[bytes, RebuildMarker]:
    markers = {}
    for values in (await _read_latest(settings, settings.topic(REBUILDS))).values():
        for key, value in values.items():
            if value is not None:
                markers[key] = RebuildMarker.model_validate_json(value)
    return markers


async def _ensure_topic(
    settings: Settings, name: str, partitions: int, config: dict[str, str]
) -> None:
    client = admin(settings)
    await client.start()
    try:
        if name in set(await client.list_topics()):
            return
        response = await client.create_topics(
            [
                NewTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=settings.replication_factor,
                    topic_configs=config,
                )
            ]
        )
        for topic, code, message in response.topic_errors:
            if code not in (0, TopicAlreadyExistsError.errno):
                raise ReplayError(f"cannot create {topic}: {message or code}")
    finally:
        await client.close()


async def _write_marker(settings: Settings, marker: RebuildMarker) -> None:
    await _ensure_topic(settings, settings.topic(REBUILDS), 1, {"cleanup.policy": "compact"})
    kafka = producer(settings)
    await kafka.start()
    try:
        value = orjson.dumps(marker.model_dump(mode="json"))
        await kafka.send_and_wait(settings.topic(REBUILDS), key=marker.key(), value=value)
    finally:
        await kafka.stop()


async def _write_folds(
    settings: Settings, topic: str, entries: Iterable[tuple[int, str, Folded]]
) -> int:
    kafka = producer(settings, linger_ms=20)
    await kafka.start()
    try:
        futures = []
        for partition, channel, folded in entries:
            key, value = changelog_record(channel, folded)
            futures.append(await kafka.send(topic, key=key, value=value, partition=partition))
        await asyncio.gather(*futures)
        return len(futures)
    finally:
        await kafka.stop()


async def _load_seeds(
    settings: Settings, projections: Sequence[ChannelProjection[Any]]
) -> dict[str, tuple[int, dict[str, Folded]]]:
    seeds: dict[str, tuple[int, dict[str, Folded]]] = {}
    for projection in projections:
        latest = await _read_latest(settings, changelog_topic(settings, projection))
        for partition, values in latest.items():
            for key, value in values.items():
                if value is None:
                    continue
                channel = orjson.loads(key)
                seeds.setdefault(channel, (partition, {}))[1][projection.name] = (
                    Folded.model_validate_json(value)
                )
    return seeds


async def rebuild(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    *,
    dry_run: bool = False,
    automatic: bool = False,
    exact: bool = False,
    progress: bool = False,
    workers: int = 1,
) -> list[RebuildOutcome]:
    """Fold each projection's current version into its own table's changelog.

    Full rebuilds share one pass over the log; an incremental one resumes from its marker
    with the folds it wrote. `automatic` (a worker starting): only what is needed before a
    worker folds, never a table a worker already writes.
    """
    messages = settings.topic(MESSAGES)
    changelogs = [changelog_topic(settings, p) for p in projections]
    ends = await end_offsets(settings, messages, *changelogs)
    source_ends = ends[messages]
    if source_ends is None:
        raise ReplayError(f"topic {messages!r} does not exist")
    committed = await committed_offsets(settings)
    deployed = any(offset > 0 for offset in committed.values()) or not automatic
    markers = await read_markers(settings)
    plans = [
        plan_rebuild(
            projection,
            ends[topic],
            markers.get(marker_key(settings, projection)),
            deployed=deployed,
        )
        for projection, topic in zip(projections, changelogs, strict=True)
    ]

    outcomes = []
    full = [plan for plan in plans if plan.mode == "full"]
    groups: list[tuple[list[RebuildPlan], dict[int, int]]] = []
    if full:
        groups.append((full, {}))
    for plan in plans:
        if plan.mode == "incremental" and plan.marker is not None:
            groups.append(([plan], dict(plan.marker.through)))
        elif plan.mode in ("live", "not-needed"):
            outcomes.append(
                RebuildOutcome(
                    plan.projection.name,
                    plan.projection.version,
                    changelog_topic(settings, plan.projection),
                    plan.mode,
                    plan.reason,
                )
            )
    for group, starts in groups:
        chosen = [plan.projection for plan in group]
        seeds = await _load_seeds(settings, chosen) if starts else {}
        if not dry_run:
            for plan in group:
                await _prepare_changelog(settings, plan, len(source_ends), starts)
        run = await replay(
            settings,
            chosen,
            start_offsets=starts,
            stop_offsets=source_ends,
            seeds=seeds,
            exact=exact,
            progress=progress,
            workers=workers,
        )
        replayer = run.replayer
        changed = replayer.channels if not starts else replayer.dirty
        for plan in group:
            projection = plan.projection
            topic = changelog_topic(settings, projection)
            entries = [
                (replayer.channels[c].partition, c, folded)
                for c in sorted(changed)
                for folded in [replayer.folds(c).get(projection.name)]
                if folded is not None and (not starts or _moved(seeds, c, folded))
            ]
            written = 0 if dry_run else await _write_folds(settings, topic, entries)
            outcome = RebuildOutcome(
                projection.name,
                projection.version,
                topic,
                "dry-run " + plan.mode if dry_run else plan.mode,
                plan.reason,
                channels=sum(1 for c in replayer.channels if projection.name in replayer.folds(c)),
                written=written if not dry_run else len(entries),
                records=run.records,
                through=dict(source_ends),
            )
            outcomes.append(outcome)
            unchanged = plan.marker is not None and plan.marker.through == source_ends
            if not dry_run and not (starts and unchanged and not written):
                await _write_marker(
                    settings,
                    RebuildMarker(
                        app_id=settings.app_id,
                        projection=projection.name,
                        version=projection.version,
                        table=fold_table(projection),
                        changelog=topic,
                        status="built",
                        through=dict(source_ends),
                        changelog_end=(await end_offsets(settings, topic))[topic] or {},
                        channels=outcome.channels,
                        written=(plan.marker.written if starts and plan.marker else 0) + written,
                    ),
                )
    return outcomes


def _moved(seeds: Mapping[str, tuple[int, Mapping[str, Folded]]], channel: str, f: Folded) -> bool:
    before = seeds.get(channel, (0, {}))[1].get(f.projection)
    return before is None or before.offset != f.offset


async def _prepare_changelog(
    settings: Settings, plan: RebuildPlan, partitions: int, starts: Mapping[int, int]
) -> None:
    """Create the table's changelog as Faust would (compacted, co-partitioned with the
    messages) and, for a full rebuild, mark it as building first."""
    topic = changelog_topic(settings, plan.projection)
    await _ensure_topic(settings, topic, partitions, {"cleanup.policy": "compact"})
    if not starts:
        await _write_marker(
            settings,
            RebuildMarker(
                app_id=settings.app_id,
                projection=plan.projection.name,
                version=plan.projection.version,
                table=fold_table(plan.projection),
                changelog=topic,
                status="building",
            ),
        )


async def catch_up_rebuilds(
    settings: Settings, projections: Sequence[ChannelProjection[Any]]
) -> list[RebuildOutcome]:
    """Run before a worker starts folding (see the lead's wiring in `streams.worker`).

    Brings every fold table that a worker has not taken over yet up to the log: resumes a
    finished rebuild from where it stopped (the records folded by old-version workers in the
    meantime), and builds a projection version that was deployed without a rebuild in an
    existing deployment (which would otherwise start from its identity in mid-log).
    """
    return await rebuild(settings, projections, automatic=True)


async def drop_old_versions(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    *,
    served: Mapping[str, int],
    dry_run: bool = False,
) -> list[str]:
    """Delete the changelogs of older versions of `projections`.

    Refuses for a projection whose current version is not what the workers serve
    (`served`: name → the lowest version seen on the worker's API): the old table may still
    be in use. Workers' local stores of old tables (under their data dir) are not touched.
    """
    client = admin(settings)
    await client.start()
    try:
        topics = set(await client.list_topics())
        doomed = []
        for projection in projections:
            if served.get(projection.name) != projection.version:
                raise ReplayError(
                    f"the worker does not serve {projection.name} v{projection.version} yet "
                    f"(it serves {served.get(projection.name, 'nothing')}); switch workers "
                    "first, then drop the old versions"
                )
            pattern = re.compile(
                rf"^{re.escape(settings.app_id)}-fold-{re.escape(projection.name)}"
                r"-v(\d+)-changelog$"
            )
            for topic in sorted(topics):
                match = pattern.match(topic)
                if match and int(match.group(1)) < projection.version:
                    doomed.append(topic)
        if doomed and not dry_run:
            await client.delete_topics(doomed)
    finally:
        await client.close()
    return doomed


# --- summaries and benchmark ------------------------------------------------------------------


async def recompute_summary(
    messages: Sequence[Message], after_messages: int, small: int, medium: int
) -> dict[str, Any] | None:
    """The channel's summary with the non-LLM tiers, over batches of `after_messages`
    summarisable messages (the live stage's count threshold; a final partial batch is
    included, as the time threshold eventually summarises it)."""
    items = [m for m in messages if summarisable(m)]
    if not items:
        return None
    summariser = default_summariser(None, small, medium)
    last = None
    batches = 0
    async for result in summarise_batches(summariser, batch(items, after_messages)):
        last = result
        batches += 1
    assert last is not None
    return {
        "text": last.text,
        "annotations": last.annotations,
        "batches": batches,
        "total_messages": len(items),
    }


@dataclass(frozen=True)
class Benchmark:
    """Messages/s of a raw read, of replay's decode and validation alone (no projection),
    and of the full replay in one process and with `workers` processes, over the same topic
    in one run. `replay_rate` is the best of the two replays."""

    messages: int
    raw_rate: float
    decode_rate: float
    replay_rate: float
    single_rate: float = 0.0
    workers: int = 1
    parallel_rate: float = 0.0

    @property
    def ratio(self) -> float:
        return self.replay_rate / self.raw_rate if self.raw_rate else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "raw_messages_per_s": round(self.raw_rate),
            "decode_only_messages_per_s": round(self.decode_rate),
            "replay_messages_per_s": round(self.replay_rate),
            "replay_vs_raw": round(self.ratio, 3),
            "replay_one_process_messages_per_s": round(self.single_rate),
            "workers": self.workers,
            "replay_workers_messages_per_s": round(self.parallel_rate),
        }


async def raw_read_rate(settings: Settings) -> tuple[int, float]:
    """A raw aiokafka read of `chorus.messages`: the same consumer, nothing decoded."""
    topic = settings.topic(MESSAGES)
    kafka = log_consumer(settings)
    await kafka.start()
    try:
        spans = await topic_spans(kafka, topic)
        started = time.perf_counter()
        count = await read_spans(kafka, topic, spans, lambda _p, _r: None)
        seconds = time.perf_counter() - started
    finally:
        await kafka.stop()
    return count, (count / seconds if seconds > 0 else 0.0)


async def measure_replay_vs_raw(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]] | None = None,
    workers: int = 0,
) -> Benchmark:
    """Replay messages/s next to a raw read of the same topic in the same run.

    The raw read goes first and again last (the better one counts), so the broker's page
    cache is equally warm for both. The decode-only run is the replay's own cost (reading,
    decoding and validating every record as the worker does); the rest is the projections'.
    The full replay runs in one process, then with `workers` processes (0: one per CPU; the
    raw read stays one process); the parallel time includes forking and collecting results.
    """
    chosen = projections
    if chosen is None:
        chosen = registered_projections(settings.projections)
    count, first = await raw_read_rate(settings)
    decode = await replay(settings, [])
    single = await replay(settings, chosen)
    processes = resolve_workers(workers)
    parallel = await replay(settings, chosen, workers=processes) if processes > 1 else single
    _, second = await raw_read_rate(settings)
    return Benchmark(
        count,
        max(first, second),
        decode.rate,
        max(single.rate, parallel.rate),
        single_rate=single.rate,
        workers=processes,
        parallel_rate=parallel.rate,
    )


# --- the command ------------------------------------------------------------------------------


def parse_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def select_projections(settings: Settings, names: Sequence[str]) -> list[ChannelProjection[Any]]:
    """The registered projections named in `names` (all of them when none is named)."""
    try:
        every = registered_projections(settings.projections)
    except ProjectionImportError as error:
        raise click.UsageError(str(error)) from None
    if not names:
        return every
    known = {p.name: p for p in every}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise click.UsageError(
            f"unknown projection(s) {', '.join(unknown)}; registered: {', '.join(known)}"
        )
    return [known[n] for n in dict.fromkeys(names)]


def _run(coroutine: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coroutine

    try:
        return asyncio.run(main())
    except (NoBrokerError, KafkaError) as error:
        raise ReplayError(f"{type(error).__name__}: {error}") from None


def _echo(text: str, err: bool = False) -> None:
    click.echo(text, err=err)


def _print_summary(run: ReplayRun, out_err: bool) -> None:
    stats = run.replayer.stats
    lines = [
        f"replayed {stats.records:,} records from {len(run.spans)} partitions "
        f"in {run.seconds:.2f}s ({run.rate:,.0f} msg/s)",
        f"  folded {stats.folded:,} messages into {len(run.replayer.channels):,} channels; "
        f"skipped {stats.invalid:,} invalid (dead-lettered by the worker)",
    ]
    if stats.filtered:
        lines.append(f"  {stats.filtered:,} records of other channels")
    if stats.beyond or stats.after_cutoff:
        lines.append(f"  {stats.beyond + stats.after_cutoff:,} records after the cut-off")
    for name, errors in stats.errors.items():
        if errors:
            lines.append(f"  {name}: apply raised on {errors:,} messages (state kept)")
    for span in run.spans:
        lines.append(f"  partition {span.partition}: offsets {span.start}..{span.stop}")
    for line in lines:
        _echo(line, err=out_err)


@click.command("replay")
@click.option("--projection", "names", multiple=True, help="Only this projection (repeatable).")
@click.option("--channel", "channels", multiple=True, help="Only this channel (repeatable).")
@click.option(
    "--to-offset",
    type=click.IntRange(min=0),
    help="Fold each partition's records at offsets < N (its first N records).",
)
@click.option("--as-of", "as_of", help="Fold each channel up to this ISO 8601 time.")
@click.option(
    "--time-field",
    type=click.Choice(["created_at", "record"]),
    default="created_at",
    show_default=True,
    help="--as-of compares the message's created_at or the Kafka record timestamp.",
)
@click.option(
    "--verify", is_flag=True, help="Compare with the live worker; exit 1 on a difference."
)
@click.option("--rebuild", is_flag=True, help="Build the projections' current versions' tables.")
@click.option("--drop-old", is_flag=True, help="Delete older versions' changelogs (after switch).")
@click.option("--dry-run", is_flag=True, help="With --rebuild/--drop-old: change nothing.")
@click.option("--summaries", is_flag=True, help="Print recomputed (non-LLM) summaries.")
@click.option("--states/--no-states", "show_states", default=None, help="Print channel states.")
@click.option("--benchmark", is_flag=True, help="Replay messages/s next to a raw read.")
@click.option("--exact", is_flag=True, help="Fold with the worker's per-message step (slower).")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    help="Read and fold the partitions in N processes (0: one per CPU). Default: 1; with "
    "--benchmark, one per CPU (it measures one process too).",
)
@click.option("--progress/--no-progress", default=True, show_default=True)
def replay_command(
    names: tuple[str, ...],
    channels: tuple[str, ...],
    to_offset: int | None,
    as_of: str | None,
    time_field: TimeField,
    verify: bool,
    rebuild: bool,
    drop_old: bool,
    dry_run: bool,
    summaries: bool,
    show_states: bool | None,
    benchmark: bool,
    exact: bool,
    workers: int | None,
    progress: bool,
) -> None:
    """Fold chorus.messages again from the beginning with the worker's projection code.

    Prints a summary; with --channel, --to-offset or --as-of also the channel states as JSON
    lines (the shape of `chorus state`). See streams/replay.py for the exact semantics.
    """
    settings = get_settings()
    chosen = select_projections(settings, names)
    moment = parse_time(as_of) if as_of else None
    if to_offset is not None and moment is not None:
        raise click.UsageError("give --to-offset or --as-of, not both")
    modes = [
        m
        for m, on in (("--verify", verify), ("--rebuild", rebuild), ("--benchmark", benchmark))
        if on
    ]
    if len(modes) > 1:
        raise click.UsageError(f"{' and '.join(modes)} cannot be combined")
    if modes and (to_offset is not None or moment is not None):
        raise click.UsageError(f"{modes[0]} works on the whole log; drop --to-offset/--as-of")
    if (rebuild or drop_old) and channels:
        raise click.UsageError("--rebuild/--drop-old work on whole tables; drop --channel")

    if benchmark:
        result = _run(measure_replay_vs_raw(settings, chosen, workers=workers or 0))
        click.echo(orjson.dumps(result.as_json()).decode())
        return
    workers = 1 if workers is None else workers
    if verify:
        _verify_command(settings, chosen, channels, exact, progress, workers)
        return
    if rebuild or drop_old:
        if rebuild:
            _rebuild_command(settings, chosen, dry_run, exact, progress, workers)
        if drop_old:
            _drop_old_command(settings, chosen, dry_run)
        return

    states = (
        show_states
        if show_states is not None
        else bool(channels or to_offset is not None or moment)
    )
    run: ReplayRun = _run(
        replay(
            settings,
            chosen,
            channels=channels or None,
            to_offset=to_offset,
            as_of=moment,
            time_field=time_field,
            keep_messages=summaries,
            exact=exact,
            progress=progress,
            workers=workers,
        )
    )
    replayer = run.replayer
    selected = list(channels) if channels else sorted(replayer.channels)
    if states:
        for channel in selected:
            click.echo(orjson.dumps(state_view(channel, replayer.folds(channel))).decode())
    if summaries:

        async def summarise_all() -> list[dict[str, Any] | None]:
            return [
                await recompute_summary(
                    replayer.messages_of(channel),
                    settings.summary_after_messages,
                    settings.summary_small_threshold,
                    settings.summary_medium_threshold,
                )
                for channel in selected
            ]

        recomputed = _run(summarise_all())
        for channel, summary in zip(selected, recomputed, strict=True):
            click.echo(orjson.dumps({"channel": channel, "summary": summary}).decode())
    _print_summary(run, out_err=states or summaries)


def _verify_command(
    settings: Settings,
    projections: list[ChannelProjection[Any]],
    channels: Sequence[str],
    exact: bool,
    progress: bool,
    workers: int = 1,
) -> None:
    from streams.worker_api import WorkerApi, WorkerUnavailable

    async def go() -> VerifyReport:
        async with WorkerApi(settings) as api:
            return await verify(
                settings,
                projections,
                fetch_state=api.state,
                list_channels=api.channels,
                channels=channels,
                exact=exact,
                progress=progress,
                workers=workers,
            )

    try:
        report: VerifyReport = _run(go())
    except WorkerUnavailable as error:
        raise ReplayError(str(error)) from None
    for note in report.notes:
        click.echo(f"note: {note}")
    for difference in report.differences:
        click.echo(difference.describe())
        click.echo(render_diff(difference))
    differing = sorted({d.channel for d in report.differences})
    click.echo(
        f"verified {report.channels:,} channels ({report.compared:,} folds) against the log "
        f"({report.records:,} records, {report.seconds:.2f}s): "
        + (f"{len(differing)} differ: {', '.join(differing)}" if differing else "all match")
    )
    if differing:
        sys.exit(1)


def _rebuild_command(
    settings: Settings,
    projections: list[ChannelProjection[Any]],
    dry_run: bool,
    exact: bool,
    progress: bool,
    workers: int = 1,
) -> None:
    outcomes = _run(
        rebuild(
            settings, projections, dry_run=dry_run, exact=exact, progress=progress, workers=workers
        )
    )
    for o in outcomes:
        where = ", ".join(f"{p}:{n}" for p, n in sorted(o.through.items()))
        detail = (
            f"{o.written:,} folds of {o.channels:,} channels from {o.records:,} records, "
            f"through {{{where}}}"
            if o.mode not in ("live", "not-needed")
            else ""
        )
        click.echo(f"{o.projection} v{o.version} → {o.changelog}: {o.mode} ({o.reason}) {detail}")


def _drop_old_command(
    settings: Settings, projections: list[ChannelProjection[Any]], dry_run: bool
) -> None:
    from streams.worker_api import WorkerApi, WorkerUnavailable

    async def served() -> dict[str, int]:
        async with WorkerApi(settings) as api:
            versions: dict[str, int] = {}
            for channel in (await api.channels())[:20]:
                for name, folded in live_folds(await api.state(channel)).items():
                    versions[name] = min(versions.get(name, folded.version), folded.version)
            return versions

    try:
        versions = _run(served())
    except WorkerUnavailable as error:
        raise ReplayError(str(error)) from None
    dropped = _run(drop_old_versions(settings, projections, served=versions, dry_run=dry_run))
    verb = "would delete" if dry_run else "deleted"
    for topic in dropped:
        click.echo(f"{verb} {topic}")
    if not dropped:
        click.echo("no older versions to delete")
