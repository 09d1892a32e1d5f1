"""Table writes staged in memory and applied once per key per batch.

Faust writes RocksDB and produces a changelog record on every table set, so a batch that
folds five messages of one channel paid for five values when only the last one matters.
A `StagedTable` keeps the latest value per key until `flush`; reads see staged values
first, so code in the batch reads its own writes. `flush` applies each key under the event
that staged it: Faust picks the store's partition DB and the changelog partition from the
current event, and a key always belongs to its source event's partition.

Readers outside the batch (web views, timers) see the flushed values, which is what the
driver events carry too: the fold agent flushes before it wakes drivers.

A table staged with `guard` never writes a value larger than a changelog record may be: the
broker would refuse the changelog record, and Faust's producer would crash the agent on the
same record after every restart. The write is refused instead (the table keeps its previous
value for the key) and reported (`Staging.on_refused`: a log line, a metric, a dead letter).
Fold tables are not guarded: the fold step already bounds their states.

A table staged with `cache` also remembers what it read and flushed (an LRU, misses
included: a miss probes every partition's RocksDB), so the next batch reads without RocksDB
and JSON. Recovery and standby replicas write the store behind its back, so it is dropped
whenever partitions are assigned or revoked and when recovery completes (`forget`).

A table staged with a `Codec` holds decoded values (a stage's own model): it decodes what it
reads from the store once and encodes what it writes once per flush, so a stage that touches
a key on every message neither parses nor serialises it per message. Readers of the
underlying table (scans, web views) see the encoded form.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import orjson
from faust.streams import _current_event, current_event
from faust.types import EventT

_DELETED = object()
# Flushed values kept per cached table: the channels a worker folds at once, with room.
CACHED_KEYS = 20_000
# How often a timer rebuilds its in-memory index from a full table scan, besides right after
# partitions move: writes it did not see (another worker's, before a rebalance) show up then.
RESCAN_SECONDS = 30.0
# Refused writes waiting for their dead letters; beyond it they are only logged and counted.
REFUSED_KEPT = 1_000


@contextmanager
def processing(event: EventT | None) -> Iterator[None]:
    """Make `event` Faust's current event, as stream iteration does for a single event;
    `Stream.take_events` hands over a batch without it."""
    token = _current_event.set(weakref.ref(event) if event is not None else None)
    try:
        yield
    finally:
        _current_event.reset(token)


@dataclass(frozen=True, slots=True)
class Codec:
    """How a staged table's values are stored: `encode` to the table's (JSON) form, `decode`
    back. `decode(encode(v))` must equal `v`, and values must not be changed in place."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


@dataclass(frozen=True)
class RefusedWrite:
    """A table write too large for a changelog record, and the record that caused it."""

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


def _refused(
    table: MutableMapping[Any, Any], key: Any, size: int, limit: int, event: EventT | None
) -> RefusedWrite:
    message = event.message if event is not None else None
    return RefusedWrite(
        table=str(getattr(table, "name", type(table).__name__)),
        key=str(key),
        size=size,
        limit=limit,
        topic=message.topic if message is not None else None,
        partition=message.partition if message is not None else None,
        offset=message.offset if message is not None else None,
    )


class StagedTable:
    def __init__(
        self,
        table: MutableMapping[Any, Any],
        cache: int = 0,
        *,
        limit: int | None = None,
        on_refused: Callable[[RefusedWrite], None] | None = None,
        codec: Codec | None = None,
    ) -> None:
        self.table = table
        self._codec = codec
        self._limit = limit
        self._on_refused = on_refused
        self._staged: dict[Any, tuple[EventT | None, Any]] = {}
        self._cache_limit = cache
        self._known: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, default: Any = None) -> Any:
        staged = self._staged.get(key)
        if staged is not None:
            value = staged[1]
        elif key in self._known:
            self._known.move_to_end(key)
            value = self._known[key]
        else:
            value = self.table.get(key, _DELETED)
            if self._codec is not None and value is not _DELETED and value is not None:
                value = self._codec.decode(value)
            self._remember(key, value)
        return default if value is _DELETED else value

    def _remember(self, key: Any, value: Any) -> None:
        if self._cache_limit:
            self._known[key] = value
            self._known.move_to_end(key)
            if len(self._known) > self._cache_limit:
                self._known.popitem(last=False)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._staged[key] = (current_event(), value)

    def discard(self, key: Any) -> None:
        """Delete the key (a changelog tombstone on flush) if it exists."""
        self._staged[key] = (current_event(), _DELETED)

    def unstage(self, key: Any) -> None:
        """Forget what is staged for `key`: a later write of the batch, staged in a table
        that flushes before this one, supersedes it."""
        self._staged.pop(key, None)

    def deleting(self, key: Any) -> bool:
        """Whether a deletion of `key` is staged."""
        staged = self._staged.get(key)
        return staged is not None and staged[1] is _DELETED

    def forget_key(self, key: Any) -> None:
        """Forget what is staged and remembered for `key`: another staged table over the
        same store deletes it (one that flushes later, `deleting` there tells)."""
        self._staged.pop(key, None)
        self._known.pop(key, None)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.table)

    def items(self) -> Any:
        return self.table.items()

    @property
    def staged(self) -> int:
        return len(self._staged)

    def flush(self) -> int:
        """Apply every staged key once; returns how many keys were written."""
        staged, self._staged = self._staged, {}
        for key, (event, value) in staged.items():
            with processing(event):
                if value is _DELETED:
                    # `del`, not `pop`: pop reads (and parses) the value first. Faust sends
                    # the tombstone before it touches the store, so a missing key costs a
                    # harmless tombstone.
                    with suppress(KeyError):
                        del self.table[key]
                else:
                    stored = value if self._codec is None else self._codec.encode(value)
                    if self._limit is not None:
                        size = len(orjson.dumps(stored, option=orjson.OPT_NON_STR_KEYS))
                        if size > self._limit:
                            if self._on_refused is not None:
                                self._on_refused(
                                    _refused(self.table, key, size, self._limit, event)
                                )
                            self._known.pop(key, None)
                            continue
                    self.table[key] = stored
            self._remember(key, value)
        return len(staged)

    def forget(self) -> None:
        """Drop the remembered values (the store may change under them: recovery, standbys)."""
        self._known.clear()


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


class Staging:
    """Every staged table of a worker, flushed together at the end of a unit of work, and
    the timers' rescans, all reset when partitions move.

    `record_limit`: the largest value a guarded table writes; `refused` collects the writes
    refused since it was last drained (the fold agent dead-letters them)."""

    def __init__(
        self,
        record_limit: int | None = None,
        on_refused: Callable[[RefusedWrite], None] | None = None,
    ) -> None:
        self.tables: list[StagedTable] = []
        # Flushed by `flush_deferred` only: deletions that must wait until the writes that
        # stop referring to what they delete are acknowledged.
        self.deferred: list[StagedTable] = []
        self.rescans: list[Rescan] = []
        self.record_limit = record_limit
        self.refused: list[RefusedWrite] = []
        self._on_refused = on_refused

    def stage(
        self,
        table: MutableMapping[Any, Any],
        cache: int = 0,
        *,
        guard: bool = True,
        codec: Codec | None = None,
        deferred: bool = False,
    ) -> StagedTable:
        """A staged table over `table`, flushed by `flush` (`deferred`: by `flush_deferred`)."""
        staged = StagedTable(
            table,
            cache,
            limit=self.record_limit if guard else None,
            on_refused=self._refuse,
            codec=codec,
        )
        (self.deferred if deferred else self.tables).append(staged)
        return staged

    def _refuse(self, refused: RefusedWrite) -> None:
        if self._on_refused is not None:
            self._on_refused(refused)
        if len(self.refused) < REFUSED_KEPT:
            self.refused.append(refused)

    def drain_refused(self) -> list[RefusedWrite]:
        refused, self.refused = self.refused, []
        return refused

    def flush(self) -> int:
        return sum(table.flush() for table in self.tables)

    def flush_deferred(self) -> int:
        return sum(table.flush() for table in self.deferred)

    def rescan(self) -> Rescan:
        rescan = Rescan()
        self.rescans.append(rescan)
        return rescan

    def forget(self) -> None:
        for table in self.tables + self.deferred:
            table.forget()
        for rescan in self.rescans:
            rescan.forget()
