"""A Faust table's local store read partition by partition (both roles).

Faust's own read of a key it has not seen lately tries every partition's RocksDB database
in turn (`Store._get_bucket_for_key`: the active ones and the standbys). chorus always knows
the partition of what it reads (a channel's partition of `chorus.messages`, which every
table is co-partitioned with), so it reads that partition's database alone, and scans a
range of keys in key order within one partition: what a time-ordered index needs
(`streams.worker.deadlines`).

Faust's recovery and standbys, a checkpoint and a restore before joining write the store
(`Table.apply_changelog_batch`, with `ChangelogEvent`s); this only reads it. Keys are
Faust's JSON (the table's codec); values are returned as stored (JSON bytes), for the caller
to decode (and to know what they weigh).

With the `memory://` store (tests) Faust keeps one dict for every partition: reads ignore
the partition, and a scan sorts the keys of that dict (fine for a test's few keys).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson
from faust.types import TP as TopicPartition
from faust.utils import json as faust_json

from streams.memory import exact_bytes


def encoded_key(key: Any) -> bytes:
    """A table key as Faust's JSON codec writes it to the store and the changelog (kept in
    indexes and checkpoints: `exact_bytes`)."""
    return exact_bytes(faust_json.dumps(key))


class ChangelogMessage(NamedTuple):
    """What Faust's stores read of a changelog record (`Store.apply_changelog_batch`)."""

    tp: TopicPartition
    offset: int
    partition: int
    key: bytes
    value: bytes | None


class ChangelogEvent(NamedTuple):
    """A changelog record as `Table.apply_changelog_batch` takes it: the key and value
    decoded (what a store in memory keeps) and the record (what RocksDB keeps)."""

    key: Any
    value: Any
    message: ChangelogMessage


class TableStore:
    """The local store of `table` (a Faust table, or a stand-in with `get` and `items`)."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def _database(self, partition: int) -> Any | None:
        store = getattr(self.table, "data", None)
        open_partition = getattr(store, "_db_for_partition", None)
        return open_partition(partition) if open_partition is not None else None

    def get(self, key: Any, partition: int) -> bytes | None:
        """The stored value of `key` in `partition` (JSON bytes), or None."""
        database = self._database(partition)
        if database is None:
            found = self.table.get(key)
            return None if found is None else orjson.dumps(found)
        raw: bytes | None = database.get(encoded_key(key))
        return raw

    def holds_any(self, partition: int) -> bool:
        """Whether `partition`'s store holds any key: one seek. True when that is not known
        (a table without per-partition stores)."""
        database = self._database(partition)
        if database is None:
            return True
        iterator = database.iter()
        iterator.seek_to_first()
        return bool(iterator.valid())

    def scan(
        self, partition: int, start: Any, stop: Any, *, reverse: bool = False
    ) -> Iterator[tuple[Any, bytes]]:
        """(key, stored value) of `partition` with `start` <= key < `stop` in encoded-key
        order (descending when `reverse`)."""
        low, high = encoded_key(start), encoded_key(stop)
        database = self._database(partition)
        if database is None:
            found = sorted(
                (encoded_key(key), key, value)
                for key, value in list(self.table.items())
                if low <= encoded_key(key) < high
            )
            for _, key, value in reversed(found) if reverse else found:
                yield key, orjson.dumps(value)
            return
        iterator = database.iter()
        if reverse:
            iterator.seek_for_prev(high)
            if iterator.valid() and iterator.key() >= high:
                iterator.prev()
        else:
            iterator.seek(low)
        while iterator.valid():
            raw_key = iterator.key()
            if (raw_key < low) if reverse else (raw_key >= high):
                return
            yield orjson.loads(raw_key), iterator.value()
            if reverse:
                iterator.prev()
            else:
                iterator.next()
