"""A role's state in memory, written to its tables once per checkpoint.

Faust writes a table's changelog and store on every `table[key] = value`: a future per
record, a second encode, a RocksDB put and, on the broker's acknowledgement, another put
for the persisted offset. A fold changes a channel's keys with every message. Quix Streams
and Kafka Streams keep the changes in memory and write each changed key once per
checkpoint; so does chorus:

* a `CheckpointedTable` over a Faust table is read through memory: what this process
  changed and has not checkpointed yet, what a checkpoint under way is writing, a bounded
  cache of clean values, then the table's store. Writes stay in memory, each with the
  source partition it belongs to (a table is co-partitioned with its source topic);
* a stage `hold`s every source event it processes: the event stays unacknowledged (a
  reference on its Faust message) until the checkpoint holding its effects is durable;
* `Checkpoint.checkpoint` takes the changed keys between two batches of the stages
  (`between_batches`), produces each table's changed values to its changelog in record
  batches (`streams.kafka.batches`), waits until the broker has acknowledged them all,
  writes them to each table's store the way Faust's recovery does
  (`Table.apply_changelog_batch`: one RocksDB write batch per partition, then the
  changelog offset it is at), then acknowledges the held events and commits.

Faust's guarantee is kept: at-least-once. Faust commits a source offset only once every
message before it is acknowledged, and a message is acknowledged only after the changelog
records of the checkpoint holding its effects are acknowledged. A crash loses nothing:
the changelogs hold at least the last checkpoint, every message after the last commit is
delivered again and folded again from there (a fold records the offset it applied, so a
message already in the checkpointed state is not applied twice, and its driver event is
sent again). The store is written after the changelog, so a restarted process's store is
at or behind its changelog, and Faust's recovery brings it to the end as before; standby
replicas read the changelogs as before. Each key is one record, so a crash in the middle
of a checkpoint leaves every key either as it was or as the checkpoint wrote it; a value
that must agree with another key's is the writer's to order (`phases`).

When: every `CHORUS_CHECKPOINT_MS`; at once when the memory bound is met (`max_keys`
changed keys or `max_held` held events: the stage waits for it); while partitions are
revoked (Faust waits until every delivered message is acknowledged before it hands them
over, so the state of revoked partitions is checkpointed, never dropped); when the app
stops.

A table opened with `limit` never writes a value larger than a changelog record may be:
the write is refused instead (the table keeps its stored value for the key) and reported
(`on_refused`: a log line, a metric and a dead letter with the message that made it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from faust.types import TP as TopicPartition
from faust.types import EventT
from faust.utils import json as faust_json

from streams.kafka.batches import PublishFailed, Record, publish

log = logging.getLogger(__name__)

_ABSENT = object()
# Clean values kept per cached table: the channels a worker folds at once, with room.
CACHED_KEYS = 20_000
# How often a timer rebuilds its in-memory index from a full table scan, besides right after
# partitions move: writes it did not see (another worker's, before a rebalance) show up then.
RESCAN_SECONDS = 30.0
# Waits between attempts to write a checkpoint the broker did not acknowledge: doubling
# from the first to the last, then the last until it does.
RETRY_SECONDS = (1.0, 30.0)


@dataclass(frozen=True, slots=True)
class Codec:
    """How a table's values are stored: `encode` to the table's (JSON) form, `decode` back.
    `decode(encode(v))` must equal `v`, and values must not be changed in place."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


@dataclass(frozen=True)
class RefusedWrite:
    """A table write too large for a changelog record, and the message that made it."""

    table: str
    key: str
    size: int
    limit: int
    topic: str | None
    partition: int | None
    offset: int | None

    @property
    def reason(self) -> str:
        return (
            f"table {self.table!r}: the value for {self.key[:200]!r} would be {self.size} "
            f"bytes, over the {self.limit}-byte changelog record limit; the write was refused "
            "and the table keeps its previous value"
        )


@dataclass(slots=True)
class Change:
    """A key's value not checkpointed yet, the partition it belongs to and the source record
    that made it (`topic`, `offset`: for a refused write's dead
    letter; no topic: the checkpoint's source topic)."""

    value: Any
    partition: int
    offset: int | None
    topic: str | None = None


class _ChangelogMessage(NamedTuple):
    """What Faust's stores read of a changelog record (`Store.apply_changelog_batch`)."""

    tp: TopicPartition
    offset: int
    partition: int
    key: bytes
    value: bytes | None


class _ChangelogEvent(NamedTuple):
    key: Any
    value: Any
    message: _ChangelogMessage


class CheckpointedTable:
    """A Faust table read through memory; each changed key reaches the table's changelog
    and store once per checkpoint (see the module)."""

    def __init__(
        self,
        table: Any,
        source_topic: str,
        *,
        cache: int = 0,
        codec: Codec | None = None,
        limit: int | None = None,
    ) -> None:
        self.table = table
        self.name = str(table.name)
        self._source_topic = source_topic
        self._codec = codec
        self._limit = limit
        self._changed: dict[Any, Change] = {}
        self._writing: dict[Any, Change] = {}
        self._cache_limit = cache
        self._known: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, default: Any = None) -> Any:
        change = self._changed.get(key) or self._writing.get(key)
        if change is not None:
            value = change.value
        elif key in self._known:
            self._known.move_to_end(key)
            value = self._known[key]
        else:
            value = self.table.get(key, _ABSENT)
            if self._codec is not None and value is not _ABSENT and value is not None:
                value = self._codec.decode(value)
            self._remember(key, value)
        return default if value is _ABSENT else value

    def set(
        self,
        key: Any,
        value: Any,
        partition: int,
        offset: int | None = None,
        topic: str | None = None,
    ) -> None:
        """`key` holds `value` from now on; `partition`: the source partition it belongs to,
        `offset` and `topic` (the checkpoint's source topic unless named): the source record
        that made it."""
        self._changed[key] = Change(value, partition, offset, topic)

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every key and value (decoded), the ones not checkpointed yet included: what a
        timer's full scan reads."""
        overlay = {**self._writing, **self._changed}
        for key, raw in list(self.table.items()):
            if key in overlay:
                continue
            yield key, self._codec.decode(raw) if self._codec is not None and raw else raw
        for key, change in overlay.items():
            yield key, change.value

    def __iter__(self) -> Iterator[Any]:
        """Every key, the ones not checkpointed yet included."""
        overlay = {**self._writing, **self._changed}
        for key in list(self.table):
            if key not in overlay:
                yield key
        yield from overlay

    @property
    def changed(self) -> int:
        return len(self._changed)

    def forget(self) -> None:
        """Drop the clean values kept (the store may change under them: recovery, standbys)."""
        self._known.clear()

    def _remember(self, key: Any, value: Any) -> None:
        if self._cache_limit:
            self._known[key] = value
            self._known.move_to_end(key)
            if len(self._known) > self._cache_limit:
                self._known.popitem(last=False)

    def _take(self) -> dict[Any, Change]:
        self._writing, self._changed = self._changed, {}
        return self._writing

    def _records(self, refused: list[RefusedWrite]) -> tuple[list[Any], list[Record]]:
        """The keys being written (with their stored form) and their changelog records
        (Faust's JSON, as a table set writes it); a value over the limit is refused and
        left out."""
        keys: list[Any] = []
        records: list[Record] = []
        for key, change in self._writing.items():
            stored = change.value if self._codec is None else self._codec.encode(change.value)
            value = faust_json.dumps(stored)
            if self._limit is not None and len(value) > self._limit:
                refused.append(self._refused(key, len(value), change))
                self._known.pop(key, None)
                continue
            keys.append((key, stored))
            records.append((faust_json.dumps(key), value, change.partition))
        return keys, records

    def _refused(self, key: Any, size: int, change: Change) -> RefusedWrite:
        assert self._limit is not None
        return RefusedWrite(
            table=self.name,
            key=str(key),
            size=size,
            limit=self._limit,
            topic=change.topic or self._source_topic,
            partition=change.partition,
            offset=change.offset,
        )

    def _apply(
        self, keys: Sequence[Any], records: Sequence[Record], offsets: Sequence[int | None]
    ) -> None:
        """Write what the changelog acknowledged to the store, as Faust's recovery would."""
        topic = self.table.changelog_topic.get_topic_name()
        events = []
        for (key, stored), (key_bytes, value_bytes, partition), offset in zip(
            keys, records, offsets, strict=True
        ):
            if offset is None:  # refused by the broker: the store keeps its value
                self._known.pop(key, None)
                continue
            assert key_bytes is not None
            change = self._writing[key]
            message = _ChangelogMessage(
                TopicPartition(topic, partition), offset, partition, key_bytes, value_bytes
            )
            events.append(_ChangelogEvent(key, stored, message))
            self._remember(key, change.value)
        if events:
            self.table.apply_changelog_batch(events)

    def _settle(self) -> None:
        self._writing = {}


class Columns:
    """Several stages' values for the same key in one record of one checkpointed table: a
    key they all change costs one changelog record per checkpoint, not one per stage. Each
    stage reads and writes its `Column` as if it were a table of its own; in memory a row
    holds each column decoded, and a checkpoint encodes each with the column's codec."""

    def __init__(self, checkpoint: Checkpoint, table: Any, *, cache: int = CACHED_KEYS) -> None:
        self.codecs: dict[str, Codec | None] = {}
        self.rows = checkpoint.table(
            table, cache=cache, codec=Codec(encode=self._encode, decode=self._decode)
        )

    def column(self, name: str, codec: Codec | None = None) -> Column:
        """The column `name`, its values stored through `codec` (declared before any read)."""
        self.codecs[name] = codec
        return Column(self, name)

    def _encode(self, row: dict[str, Any]) -> dict[str, Any]:
        return {
            name: value if codec is None else codec.encode(value)
            for name, value in row.items()
            for codec in [self.codecs.get(name)]
        }

    def _decode(self, stored: dict[str, Any]) -> dict[str, Any]:
        return {
            name: value if codec is None or value is None else codec.decode(value)
            for name, value in stored.items()
            if name in self.codecs
            for codec in [self.codecs[name]]
        }


class Column:
    """One stage's values in `Columns`: `get`, `set` and `items`, as a `CheckpointedTable`."""

    def __init__(self, columns: Columns, name: str) -> None:
        self.columns = columns
        self.name = name

    def get(self, key: Any, default: Any = None) -> Any:
        row = self.columns.rows.get(key)
        return row[self.name] if row is not None and self.name in row else default

    def set(
        self,
        key: Any,
        value: Any,
        partition: int,
        offset: int | None = None,
        topic: str | None = None,
    ) -> None:
        """`key` holds `value` from now on, as `CheckpointedTable.set`."""
        row = self.columns.rows.get(key)
        self.columns.rows.set(key, {**(row or {}), self.name: value}, partition, offset, topic)

    def items(self) -> Iterator[tuple[Any, Any]]:
        for key, row in self.columns.rows.items():
            if row is not None and self.name in row:
                yield key, row[self.name]


class Rescan:
    """When a timer's index of due channels must be rebuilt from a full table scan: every
    RESCAN_SECONDS, and at the next tick after `forget` (partitions moved)."""

    def __init__(self) -> None:
        self._at = float("-inf")

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._at < RESCAN_SECONDS:
            return False
        self._at = now
        return True

    def forget(self) -> None:
        self._at = float("-inf")


class Checkpoint:
    """A role's checkpointed tables, the events held until a checkpoint covers them, and
    the timers' rescans, all reset when partitions move (see the module).

    `interval`: seconds between checkpoints; `max_keys`, `max_held`: the memory bound;
    `record_limit`: the largest value a table opened with `guard` writes."""

    def __init__(
        self,
        app: Any,
        source_topic: str,
        *,
        interval: float,
        max_keys: int,
        max_held: int,
        record_limit: int | None = None,
        on_refused: Callable[[RefusedWrite], Awaitable[None]] | None = None,
    ) -> None:
        self.app = app
        self.source_topic = source_topic
        self.interval = interval
        self.max_keys = max_keys
        self.max_held = max_held
        self.record_limit = record_limit
        self.tables: list[CheckpointedTable] = []
        self.rescans: list[Rescan] = []
        self._on_refused = on_refused
        self._held: list[EventT] = []
        self._last = time.monotonic()
        # Created on first use, inside the app's event loop.
        self._batch_lock: asyncio.Lock | None = None
        self._write_lock: asyncio.Lock | None = None

    def table(
        self,
        table: Any,
        *,
        cache: int = 0,
        codec: Codec | None = None,
        guard: bool = True,
    ) -> CheckpointedTable:
        """`table` read through memory and written once per checkpoint."""
        checkpointed = CheckpointedTable(
            table,
            self.source_topic,
            cache=cache,
            codec=codec,
            limit=self.record_limit if guard else None,
        )
        self.tables.append(checkpointed)
        return checkpointed

    def rescan(self) -> Rescan:
        rescan = Rescan()
        self.rescans.append(rescan)
        return rescan

    def hold(self, event: EventT) -> None:
        """Keep `event` unacknowledged until a checkpoint holds what it changed."""
        event.message.incref()
        self._held.append(event)

    @property
    def held(self) -> int:
        return len(self._held)

    def over_bound(self) -> bool:
        return (
            len(self._held) >= self.max_held
            or sum(table.changed for table in self.tables) >= self.max_keys
        )

    def due(self, now: float) -> bool:
        """Whether a checkpoint is due: something to write, and the interval passed, the
        memory bound met or partitions being revoked."""
        if not self._held and not any(table.changed for table in self.tables):
            return False
        return now - self._last >= self.interval or self.over_bound() or self.app.rebalancing

    @asynccontextmanager
    async def between_batches(self) -> AsyncIterator[None]:
        """Held by a stage while it processes a batch: a checkpoint never takes half of one
        (its events folded, their driver events not acknowledged yet)."""
        async with self._locks()[0]:
            yield

    async def checkpoint(self) -> int:
        """Write what changed since the last checkpoint (see the module); returns how many
        keys were written. One checkpoint at a time; a failed write is retried with
        backoff, the state staying readable meanwhile."""
        batch_lock, write_lock = self._locks()
        async with write_lock:
            async with batch_lock:
                tables = [table for table in self.tables if table.changed]
                for table in tables:
                    table._take()
                held, self._held = self._held, []
                self._last = time.monotonic()
            written = await self._write(tables)
            for table in tables:
                table._settle()
            self._acknowledge(held)
        if held and not self.app.rebalancing:
            await self.app.consumer.commit()
        return written

    def forget(self) -> None:
        for table in self.tables:
            table.forget()
        for rescan in self.rescans:
            rescan.forget()

    def _locks(self) -> tuple[asyncio.Lock, asyncio.Lock]:
        if self._batch_lock is None or self._write_lock is None:
            self._batch_lock, self._write_lock = asyncio.Lock(), asyncio.Lock()
        return self._batch_lock, self._write_lock

    async def _write(self, tables: Sequence[CheckpointedTable]) -> int:
        """Produce every table's changed values to its changelog at once, wait for the
        broker's acknowledgement of all of them, then write each table's store."""
        refused: list[RefusedWrite] = []
        pending = [(table, *table._records(refused)) for table in tables]
        if self._on_refused is not None:
            for one in refused:
                await self._on_refused(one)
        producer = self.app.producer
        if producer.buffer.state != "running":  # Faust's test harness: no broker
            for table, keys, records in pending:
                table._apply(keys, records, list(range(len(records))))
            return sum(len(keys) for _, keys, _ in pending)
        kafka = producer._ensure_producer()
        published = await asyncio.gather(
            *(self._published(kafka, table, keys, records) for table, keys, records in pending)
        )
        for (table, keys, records), offsets in zip(pending, published, strict=True):
            table._apply(keys, records, offsets)
        return sum(len(keys) for _, keys, _ in pending)

    async def _published(
        self, kafka: Any, table: CheckpointedTable, keys: Sequence[Any], records: Sequence[Record]
    ) -> list[int | None]:
        """Each record's changelog offset once acknowledged (None: refused for good, which
        only a topic configured below chorus's record bound does); tried again with
        backoff until the broker acknowledges."""
        topic = table.table.changelog_topic.get_topic_name()
        delay, longest = RETRY_SECONDS
        while True:
            try:
                published = await publish(kafka, topic, records)
                break
            except PublishFailed:
                log.warning("writing the checkpoint of %s again in %gs", table.name, delay)
                await asyncio.sleep(delay)
                delay = min(2 * delay, longest)
        for one in published.refused:
            log.error("%s refused %r for good: %r", topic, keys[one.index][0], one.error)
        return published.offsets

    def _acknowledge(self, held: Sequence[EventT]) -> None:
        sensors = self.app.sensors
        for event in held:
            if event.ack():
                message = event.message
                sensors.on_message_out(message.tp, message.offset, message)
