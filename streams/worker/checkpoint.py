"""A role's state in memory, written to its tables once per checkpoint.

Faust writes a table's changelog and store on every `table[key] = value`: a future per
record, a second encode, a RocksDB put and, on the broker's acknowledgement, another put
for the persisted offset. A fold changes a channel's keys with every message. Quix Streams
and Kafka Streams keep the changes in memory and write each changed key once per
checkpoint; so does chorus:

* a `CheckpointedTable` over a Faust table is read through memory: what this process
  changed and has not checkpointed yet, what a checkpoint under way is writing, a cache of
  clean values bounded in bytes (`streams.memory.ByteCache`), then the table's store, read
  in the key's partition alone (`streams.worker.store`). Writes (and deletes) stay in
  memory, each with the source partition it belongs to (a table is co-partitioned with its
  source topic);
* a stage `hold`s every source record it processes: the record stays unacknowledged (a
  reference on its Faust message) until the checkpoint holding its effects is durable;
* `Checkpoint.checkpoint` takes the changed keys between two batches of the stages
  (`between_batches`), produces each table's changed values to its changelog in record
  batches (`streams.kafka.batches`), waits until the broker has acknowledged them all,
  writes them to each table's store the way Faust's recovery does
  (`Table.apply_changelog_batch`: one RocksDB write batch per partition, then the
  changelog offset it is at), tells what it took that it is durable (`on_take`: a
  follower of a topic then writes how far it had read, in the next checkpoint), then
  acknowledges the held events and commits.

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
stops. A checkpoint encodes and writes in slices of `SLICE_KEYS` keys, and acknowledges
its held records `SLICE_KEYS` at a time, giving the event loop back between slices, so a
large one never holds the heartbeats or the fold up.

A checkpoint that fails half way (the app stopping, a store error) gives everything it took
back: the changes to the next checkpoint (newer changes to a key win) and the held events
to the next acknowledgement, so nothing is lost and nothing stays held for ever. A value its
codec cannot encode is refused like one too large, and the others are written.

Partitions moving (`moved`): the clean values of the partitions taken over are forgotten
(recovery rewrites their store) and so are those of the partitions gone; changes left for
partitions this worker no longer owns (after the revocation's checkpoint, only writes no
held event covers) are dropped, never written to a changelog another worker now owns. The
partitions it keeps stay cached.

A table opened with `limit` never writes a value larger than a changelog record may be:
the write is refused instead (the table keeps its stored value for the key) and reported
(`on_refused`: a log line, a metric and a dead letter with the message that made it).
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import logging
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Sequence,
)
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson
from faust.types import TP as TopicPartition
from faust.types import Message
from faust.utils import json as faust_json

from streams.kafka.batches import Record, publish, until_acknowledged
from streams.memory import ByteCache, exact_bytes
from streams.worker.store import ChangelogEvent, ChangelogMessage, TableStore, encoded_key

log = logging.getLogger(__name__)

_ABSENT = object()
# A change that deletes its key: a tombstone in the changelog, a delete in the store.
DELETED = object()
# Keys a checkpoint encodes, or writes to a store, before it gives the event loop back: a
# slice of 1,000 held the fold role's loop 20-40 ms (measured at 100,000 channels), as long
# as the wake it delays should take.
SLICE_KEYS = 200
# Waits between attempts to write a checkpoint the broker did not acknowledge: doubling
# from the first to the last, then the last until it does.
RETRY_SECONDS = (1.0, 30.0)
# What an absent key costs in a cache (it saves reading the store again for it).
ABSENT_BYTES = 64
# What a decoded row of `Columns` weighs per byte of its record (its columns' models:
# measured with tracemalloc, 7.5 for the context role's channel state).
ROW_OVERHEAD = 8.0


@dataclass(frozen=True, slots=True)
class Codec:
    """How a table's values are stored: `encode` to the table's (JSON) form, `decode` back.
    `decode(encode(v))` must equal `v`, and values must not be changed in place.
    `overhead`: the bytes a decoded value holds in memory per byte of its encoded form,
    what a cache counts it for."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    overhead: float = 4.0


PLAIN = Codec(encode=lambda value: value, decode=lambda value: value)


@dataclass(frozen=True)
class RefusedWrite:
    """A table write refused (too large for a changelog record, or not encodable), and the
    message that made it."""

    table: str
    key: str
    size: int
    limit: int | None
    topic: str | None
    partition: int | None
    offset: int | None
    error: str | None = None

    @property
    def reason(self) -> str:
        if self.error is not None:
            return (
                f"table {self.table!r}: the value for {self.key[:200]!r} could not be encoded "
                f"({self.error}); the write was refused and the table keeps its previous value"
            )
        return (
            f"table {self.table!r}: the value for {self.key[:200]!r} would be {self.size} "
            f"bytes, over the {self.limit}-byte changelog record limit; the write was refused "
            "and the table keeps its previous value"
        )


@dataclass(slots=True)
class Change:
    """A key's value not checkpointed yet (DELETED: the key is deleted), the partition it
    belongs to and the source record that made it (`topic`, `offset`: for a refused write's
    dead letter; no topic: the checkpoint's source topic)."""

    value: Any
    partition: int
    offset: int | None
    topic: str | None = None


class _Pending(NamedTuple):
    """A key being written: its change, its stored form and its changelog record."""

    key: Any
    change: Change
    stored: Any
    record: Record


class CheckpointedTable:
    """A Faust table read through memory; each changed key reaches the table's changelog
    and store once per checkpoint (see the module)."""

    def __init__(
        self,
        table: Any,
        source_topic: str,
        *,
        cache: ByteCache[Any, Any] | None = None,
        codec: Codec = PLAIN,
        limit: int | None = None,
        ordered: bool = False,
    ) -> None:
        """`cache`: where clean values are kept, by (table name, key): one cache may serve
        several tables. `ordered`: the changes not written yet are also kept in key order
        per partition, so that a range scan reads only the changes in its range (a table
        read by ranges, such as a time-ordered index)."""
        self.table = table
        self.name = str(table.name)
        self.store = TableStore(table)
        self.cache = cache
        self._source_topic = source_topic
        self._codec = codec
        self._limit = limit
        self._changed: dict[Any, Change] = {}
        self._writing: dict[Any, Change] = {}
        # partition -> the encoded keys of the changes (written or not yet), sorted
        self._ordered: dict[int, list[tuple[bytes, Any]]] | None = {} if ordered else None

    def get(self, key: Any, partition: int, default: Any = None) -> Any:
        """The value of `key` (of source partition `partition`): changed here, being
        written, cached, else read from the partition's store (and cached)."""
        change = self._changed.get(key) or self._writing.get(key)
        if change is not None:
            return default if change.value is DELETED else change.value
        cache = self.cache
        if cache is not None:
            cached = cache.get((self.name, key))
            if cached is not None:
                return default if cached is _ABSENT else cached
        raw = self.store.get(key, partition)
        value = _ABSENT if raw is None else self._codec.decode(orjson.loads(raw))
        if cache is not None:
            size = ABSENT_BYTES if raw is None else int(len(raw) * self._codec.overhead)
            cache.put((self.name, key), value, size, partition)
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
        self._change(key, Change(value, partition, offset, topic))

    def delete(
        self, key: Any, partition: int, offset: int | None = None, topic: str | None = None
    ) -> None:
        """`key` holds nothing from now on (as `set`)."""
        self._change(key, Change(DELETED, partition, offset, topic))

    def _change(self, key: Any, change: Change) -> None:
        if self._ordered is not None and key not in self._changed and key not in self._writing:
            bisect.insort(self._ordered.setdefault(change.partition, []), (encoded_key(key), key))
        self._changed[key] = change

    def _reorder(self) -> None:
        """The ordered keys again, from the changes (after a checkpoint, or a move)."""
        if self._ordered is None:
            return
        ordered: dict[int, list[tuple[bytes, Any]]] = {}
        for key, change in (*self._writing.items(), *self._changed.items()):
            ordered.setdefault(change.partition, []).append((encoded_key(key), key))
        self._ordered = {p: sorted(set(keys)) for p, keys in ordered.items()}

    def scan(
        self, partition: int, start: Any, stop: Any, *, reverse: bool = False
    ) -> Iterator[tuple[Any, Any]]:
        """(key, value) of `partition` with `start` <= key < `stop` by their encoded form
        (Faust's JSON: for string keys, their order as strings), ascending unless
        `reverse`, the changes not checkpointed yet included: what a time-ordered index is
        read with. The clean values read are not cached."""
        low, high = encoded_key(start), encoded_key(stop)
        ours: Iterable[tuple[bytes, Any, Any]]
        if self._ordered is not None:
            # In key order already: walked only as far as the caller reads (a time index
            # read a slice at a time would otherwise sort every change due at each slice).
            keys = self._ordered.get(partition, [])
            window = keys[bisect.bisect_left(keys, (low,)) : bisect.bisect_left(keys, (high,))]
            ours = (
                (raw_key, key, change.value)
                for raw_key, key in (reversed(window) if reverse else window)
                if (change := self._change_in(key, partition)) is not None
            )
        else:
            overlay: list[tuple[bytes, Any, Any]] = []
            for key in {**self._writing, **self._changed}:
                change = self._change_in(key, partition)
                if change is not None:
                    raw_key = encoded_key(key)
                    if low <= raw_key < high:
                        overlay.append((raw_key, key, change.value))
            ours = sorted(overlay, key=lambda entry: entry[0], reverse=reverse)
        stored = (
            (encoded_key(key), key, self._codec.decode(orjson.loads(raw)))
            for key, raw in self.store.scan(partition, start, stop, reverse=reverse)
            if self._change_in(key, partition) is None
        )
        for _, key, value in heapq.merge(stored, ours, key=lambda e: e[0], reverse=reverse):
            if value is not DELETED:
                yield key, value

    def _change_in(self, key: Any, partition: int) -> Change | None:
        """The change of `key` not checkpointed yet, if it is `partition`'s."""
        change = self._changed.get(key) or self._writing.get(key)
        return change if change is not None and change.partition == partition else None

    @property
    def changed(self) -> int:
        return len(self._changed)

    def moved(self, gone: Collection[int], taken: Collection[int]) -> None:
        """Partitions moved (see the module): forget the cached values of `gone` and
        `taken`, drop the changes left for `gone`."""
        if self.cache is not None:  # shared caches forget per partition, for every table
            self.cache.forget_partitions({*gone, *taken})
        dropped = [key for key, change in self._changed.items() if change.partition in gone]
        for key in dropped:
            del self._changed[key]
        if dropped:
            self._reorder()
            log.warning(
                "%s: %d changes of partitions %s, which moved away, are not written",
                self.name,
                len(dropped),
                sorted(gone),
            )

    def _take(self) -> dict[Any, Change]:
        self._writing, self._changed = self._changed, {}
        return self._writing

    def _give_back(self) -> None:
        """A checkpoint failed: what it was writing is changed again (newer changes win)."""
        self._changed = {**self._writing, **self._changed}
        self._writing = {}
        self._reorder()

    async def _pending(self, refused: list[RefusedWrite]) -> list[_Pending]:
        """The keys being written with their stored form and changelog record (Faust's
        JSON, as a table set writes it); a value over the limit, or that cannot be encoded,
        is refused and left out. Gives the event loop back every SLICE_KEYS keys."""
        pending: list[_Pending] = []
        for count, (key, change) in enumerate(list(self._writing.items())):
            if count and count % SLICE_KEYS == 0:
                await asyncio.sleep(0)
            if change.value is DELETED:
                pending.append(
                    _Pending(key, change, None, (encoded_key(key), None, change.partition))
                )
                continue
            try:
                stored = self._codec.encode(change.value)
                value = exact_bytes(faust_json.dumps(stored))
            except Exception as error:  # a codec's bug must not stop every other write
                refused.append(self._refused(key, 0, change, f"{type(error).__name__}: {error}"))
                continue
            if self._limit is not None and len(value) > self._limit:
                refused.append(self._refused(key, len(value), change))
                continue
            pending.append(
                _Pending(key, change, stored, (encoded_key(key), value, change.partition))
            )
        return pending

    def _refused(
        self, key: Any, size: int, change: Change, error: str | None = None
    ) -> RefusedWrite:
        if self.cache is not None:
            self.cache.pop((self.name, key))
        return RefusedWrite(
            table=self.name,
            key=str(key),
            size=size,
            limit=self._limit,
            topic=change.topic or self._source_topic,
            partition=change.partition,
            offset=change.offset,
            error=error,
        )

    async def _apply(self, pending: Sequence[_Pending], offsets: Sequence[int | None]) -> None:
        """Write what the changelog acknowledged to the store, as Faust's recovery would,
        SLICE_KEYS keys to a write batch, and keep the values written in the cache."""
        topic = self.table.changelog_topic.get_topic_name()
        events: list[ChangelogEvent] = []
        for one, offset in zip(pending, offsets, strict=True):
            if offset is None:  # refused by the broker: the store keeps its value
                if self.cache is not None:
                    self.cache.pop((self.name, one.key))
                continue
            raw_key, raw_value, partition = one.record
            assert raw_key is not None
            message = ChangelogMessage(
                TopicPartition(topic, partition), offset, partition, raw_key, raw_value
            )
            events.append(ChangelogEvent(one.key, one.stored, message))
            self._remember(one)
            if len(events) >= SLICE_KEYS:
                self.table.apply_changelog_batch(events)
                events = []
                await asyncio.sleep(0)
        if events:
            self.table.apply_changelog_batch(events)

    def _remember(self, one: _Pending) -> None:
        cache = self.cache
        if cache is None:
            return
        raw_value = one.record[1]
        if raw_value is None:
            cache.put((self.name, one.key), _ABSENT, ABSENT_BYTES, one.change.partition)
        else:
            size = int(len(raw_value) * self._codec.overhead)
            cache.put((self.name, one.key), one.change.value, size, one.change.partition)

    def _settle(self) -> None:
        self._writing = {}
        self._reorder()


class Columns:
    """Several stages' values for the same key in one record of one checkpointed table: a
    key they all change costs one changelog record per checkpoint, not one per stage. Each
    stage reads and writes its `Column` as if it were a table of its own; in memory a row
    holds each column decoded, and a checkpoint encodes each with the column's codec."""

    def __init__(
        self, checkpoint: Checkpoint, table: Any, cache: ByteCache[Any, Any] | None = None
    ) -> None:
        self.codecs: dict[str, Codec] = {}
        self.rows = checkpoint.table(
            table,
            cache=cache,
            codec=Codec(encode=self._encode, decode=self._decode, overhead=ROW_OVERHEAD),
        )

    def column(self, name: str, codec: Codec = PLAIN) -> Column:
        """The column `name`, its values stored through `codec` (declared before any read)."""
        self.codecs[name] = codec
        return Column(self, name)

    def _encode(self, row: dict[str, Any]) -> dict[str, Any]:
        return {
            name: value if value is None else self.codecs[name].encode(value)
            for name, value in row.items()
        }

    def _decode(self, stored: dict[str, Any]) -> dict[str, Any]:
        return {
            name: value if value is None else self.codecs[name].decode(value)
            for name, value in stored.items()
            if name in self.codecs
        }


class Column:
    """One stage's values in `Columns`: `get` and `set`, as a `CheckpointedTable`'s."""

    def __init__(self, columns: Columns, name: str) -> None:
        self.columns = columns
        self.name = name

    def get(self, key: Any, partition: int, default: Any = None) -> Any:
        row = self.columns.rows.get(key, partition)
        found = row.get(self.name) if row is not None else None
        return default if found is None else found

    def set(
        self,
        key: Any,
        value: Any,
        partition: int,
        offset: int | None = None,
        topic: str | None = None,
    ) -> None:
        """`key` holds `value` from now on, as `CheckpointedTable.set`."""
        row = self.columns.rows.get(key, partition)
        self.columns.rows.set(key, {**(row or {}), self.name: value}, partition, offset, topic)


class Checkpoint:
    """A role's checkpointed tables and the events held until a checkpoint covers them
    (see the module).

    `interval`: seconds between checkpoints; `max_keys`, `max_held`: the memory bound;
    `record_limit`: the largest value a table opened with `guard` writes; `producer`: gives
    the (started) aiokafka producer the changelogs are written with (the app's, unless
    given; the runtime gives one of the checkpoint's own, `streams.kafka.clients.OwnProducer`)."""

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
        producer: Callable[[], Awaitable[Any]] | None = None,
        took: Callable[[float], None] | None = None,
    ) -> None:
        """`took(seconds)`: told how long each checkpoint took."""
        self.app = app
        self.source_topic = source_topic
        self.interval = interval
        self.max_keys = max_keys
        self.max_held = max_held
        self.record_limit = record_limit
        self.tables: list[CheckpointedTable] = []
        self.producer = producer or self._apps_producer
        self._on_refused = on_refused
        self._took = took
        # Awaited before the held records are acknowledged: what a stage sends on their
        # behalf beside the tables (the fold's driver events) is acknowledged first.
        self.before_acknowledging: list[Callable[[], Awaitable[None]]] = []
        # Asked as a checkpoint takes the changes, between two batches: what to do once they
        # are durable (a follower of a topic then writes how far it had read, in the next).
        self.on_take: list[Callable[[], Callable[[], None]]] = []
        self._held: list[Message] = []
        self._last = time.monotonic()
        # Created on first use, inside the app's event loop.
        self._batch_lock: asyncio.Lock | None = None
        self._write_lock: asyncio.Lock | None = None

    def table(
        self,
        table: Any,
        *,
        cache: ByteCache[Any, Any] | None = None,
        codec: Codec = PLAIN,
        guard: bool = True,
        ordered: bool = False,
    ) -> CheckpointedTable:
        """`table` read through memory and written once per checkpoint (`ordered`: read by
        ranges, see `CheckpointedTable`)."""
        checkpointed = CheckpointedTable(
            table,
            self.source_topic,
            cache=cache,
            codec=codec,
            limit=self.record_limit if guard else None,
            ordered=ordered,
        )
        self.tables.append(checkpointed)
        return checkpointed

    def hold(self, message: Message) -> None:
        """Keep `message` (a source record, tracked by Faust's consumer) unacknowledged until
        a checkpoint holds what it changed."""
        message.incref()
        self._held.append(message)

    def release(self, messages: Collection[Message]) -> None:
        """Let go of held `messages` without acknowledging them (a batch its stage failed
        on): this process never commits their offsets, and Faust's wait before a rebalance
        or a stop no longer waits for them."""
        released = {id(message) for message in messages}
        self._held = [message for message in self._held if id(message) not in released]
        unacked = self.app.consumer.unacked
        for message in messages:
            message.decref()
            unacked.discard(message)

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
        backoff, the state staying readable meanwhile; one that fails otherwise (or is
        cancelled) gives back what it took, and raises."""
        batch_lock, write_lock = self._locks()
        started = time.monotonic()
        async with write_lock:
            async with batch_lock:
                tables = [table for table in self.tables if table.changed]
                for table in tables:
                    table._take()
                held, self._held = self._held, []
                durable = [take() for take in self.on_take]
                self._last = time.monotonic()
            try:
                written = await self._write(tables)
                for wait in self.before_acknowledging:
                    await wait()
            except BaseException:
                for table in tables:
                    table._give_back()
                self._held = [*held, *self._held]
                raise
            for table in tables:
                table._settle()
            for done in durable:
                done()
            await self._acknowledge(held)
        if held and not self.app.rebalancing:
            await self.app.consumer.commit()
        if self._took is not None:
            self._took(time.monotonic() - started)
        return written

    async def _apps_producer(self) -> Any:
        return self.app.producer._ensure_producer()

    def moved(self, gone: Collection[int], taken: Collection[int]) -> None:
        """Partitions moved: each table forgets what it must (`CheckpointedTable.moved`)."""
        for table in self.tables:
            table.moved(gone, taken)

    def _locks(self) -> tuple[asyncio.Lock, asyncio.Lock]:
        if self._batch_lock is None or self._write_lock is None:
            self._batch_lock, self._write_lock = asyncio.Lock(), asyncio.Lock()
        return self._batch_lock, self._write_lock

    async def _write(self, tables: Sequence[CheckpointedTable]) -> int:
        """Produce every table's changed values to its changelog at once, wait for the
        broker's acknowledgement of all of them, then write each table's store."""
        refused: list[RefusedWrite] = []
        pending = [(table, await table._pending(refused)) for table in tables]
        if self._on_refused is not None:
            for one in refused:
                await self._on_refused(one)
        kafka = await self.producer()
        published = await asyncio.gather(
            *(self._published(kafka, table, writes) for table, writes in pending)
        )
        for (table, writes), offsets in zip(pending, published, strict=True):
            await table._apply(writes, offsets)
        return sum(len(writes) for _, writes in pending)

    async def _published(
        self, kafka: Any, table: CheckpointedTable, writes: Sequence[_Pending]
    ) -> list[int | None]:
        """Each record's changelog offset once acknowledged (None: refused for good, which
        only a topic configured below chorus's record bound does); tried again with
        backoff until the broker acknowledges."""
        topic = table.table.changelog_topic.get_topic_name()
        records = [one.record for one in writes]
        published = await until_acknowledged(
            lambda: publish(kafka, topic, records),
            RETRY_SECONDS,
            f"writing the checkpoint of {table.name} again in %gs",
        )
        for one in published.refused:
            log.error("%s refused %r for good: %r", topic, writes[one.index].key, one.error)
        return published.offsets

    async def _acknowledge(self, held: Sequence[Message]) -> None:
        """Acknowledge `held` (their state is durable now), SLICE_KEYS at a time, giving
        the event loop back between slices (the checkpoint after a backlog holds tens of
        thousands); a cancellation meanwhile leaves the rest to the next checkpoint's
        acknowledgement, never unacknowledged for good."""
        consumer = self.app.consumer
        for start in range(0, len(held), SLICE_KEYS):
            if start:
                try:
                    await asyncio.sleep(0)
                except BaseException:
                    self._held = [*held[start:], *self._held]
                    raise
            for message in held[start : start + SLICE_KEYS]:
                message.ack(consumer)
