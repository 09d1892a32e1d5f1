"""What a process keeps in memory, bounded in bytes: the one kind of cache every part of
`streams` uses (`ByteCache`), and one budget (`CHORUS_MEMORY_MB`) split into named shares
(`MemoryBudget`), so a role's memory does not grow with the number of channels it has
ever seen.

A `ByteCache` holds what can be read back from somewhere else (a table's store, the log, a
compacted topic): at its bound it forgets the least recently used entries, and a reader
that misses reads back. Each entry belongs to a partition of the topics it was read from,
so when partitions move away only theirs are forgotten (`forget_partitions`), as Quix
Streams revokes state per partition; the others stay warm.

What happens at the bound: `put` makes room by evicting from the least recently used end,
never the entry it is putting; an entry larger than the whole cache is not kept at all
(it counts as evicted). Each eviction is told to `on_evict(key, value)` (a metric, or what
its owner must do when one goes); `pop` and `forget_partitions` are the owner's own doing
and tell nothing. A cache of what has no partition keeps everything in `NO_PARTITION`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MIB = 1024 * 1024
# The partition of a cache's entries when what it keeps has none (a client's memory).
NO_PARTITION = -1


def exact_bytes(raw: bytes) -> bytes:
    """`raw` in an allocation of its own size. orjson returns its output at its working
    buffer's capacity (4 to 8 KiB for a few bytes, 256 KiB for 20 KB, 4 MiB for 300 KB), so
    its bytes kept past the call that made them (a checkpoint's writes until the broker
    acknowledges them, an index's keys, a lot of events) are copied to weigh what they hold:
    a copy costs about 60 ns."""
    return b"%b" % raw


class ByteCache(Generic[K, V]):
    """The least recently used entries up to `budget` bytes (see the module).

    `size` is what the caller says an entry costs (its encoded bytes, times an overhead
    where it keeps decoded objects): the cache trusts it."""

    def __init__(
        self,
        name: str,
        budget: int,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        """`on_evict(key, value)`: told of each entry evicted at the bound."""
        self.name = name
        self.budget = budget
        self.on_evict = on_evict
        # key -> (value, size, partition), the least recently used first
        self._entries: OrderedDict[K, tuple[V, int, int]] = OrderedDict()
        self._by_partition: dict[int, set[K]] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        """The keys kept, the least recently used first; a copy, so the loop may pop."""
        return iter(list(self._entries))

    def get(self, key: K) -> V | None:
        """The value of `key`, now the most recently used; None when not kept."""
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries.move_to_end(key)
        return found[0]

    def peek(self, key: K) -> V | None:
        """The value of `key` without using it (None when not kept)."""
        found = self._entries.get(key)
        return None if found is None else found[0]

    def partition_of(self, key: K) -> int | None:
        """The partition `key` was kept for (None when it is not kept)."""
        found = self._entries.get(key)
        return None if found is None else found[2]

    def size_of(self, key: K) -> int:
        """What `key` is counted for (0 when it is not kept)."""
        found = self._entries.get(key)
        return 0 if found is None else found[1]

    def put(self, key: K, value: V, size: int, partition: int = NO_PARTITION) -> bool:
        """Keep `value` for `key` (of `partition`), costing `size` bytes; False when it is
        larger than the whole cache and so not kept."""
        kept = self._entries.get(key)
        if kept is not None and kept[2] == partition and size <= self.budget:
            self._entries[key] = (value, size, partition)  # in place: its partition holds it
            self._entries.move_to_end(key)
            self.bytes += size - kept[1]
        else:
            self.pop(key)
            if size <= self.budget:
                self._entries[key] = (value, size, partition)
                self._by_partition.setdefault(partition, set()).add(key)
                self.bytes += size
            else:
                self._evicted(key, value)
        while self.bytes > self.budget:  # also after the budget was lowered
            oldest, entry = self._entries.popitem(last=False)
            self._forgotten(oldest, entry)
            self._evicted(oldest, entry[0])
        return key in self._entries

    def pop(self, key: K) -> V | None:
        """Forget `key`; its value, or None when it was not kept."""
        found = self._entries.pop(key, None)
        if found is None:
            return None
        self._forgotten(key, found)
        return found[0]

    def _forgotten(self, key: K, entry: tuple[V, int, int]) -> None:
        """The bookkeeping of an entry just taken out of `_entries`."""
        _, size, partition = entry
        self.bytes -= size
        keys = self._by_partition.get(partition)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_partition[partition]

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        """Forget every entry of `partitions` (moved away, or restored from a changelog)."""
        for partition in list(partitions):
            for key in list(self._by_partition.get(partition, ())):
                self.pop(key)

    def keep_only(self, partitions: Iterable[int]) -> None:
        """Forget every entry of a partition not in `partitions`."""
        kept = set(partitions)
        self.forget_partitions([p for p in self._by_partition if p not in kept])

    def clear(self) -> None:
        self._entries.clear()
        self._by_partition.clear()
        self.bytes = 0

    def keys(self) -> list[K]:
        """The keys kept, the least recently used first."""
        return list(self._entries)

    def values(self) -> Iterator[V]:
        """The values kept, the least recently used first (none is used by this)."""
        return (value for value, _, _ in self._entries.values())

    def _evicted(self, key: K, value: V) -> None:
        if self.on_evict is not None:
            self.on_evict(key, value)


@dataclass(frozen=True)
class MemoryBudget:
    """A role's memory budget (`total` bytes) split into named shares (fractions of it)."""

    total: int
    shares: Mapping[str, float]

    def __post_init__(self) -> None:
        if abs(sum(self.shares.values()) - 1.0) > 1e-9:
            raise ValueError(f"memory shares must add up to 1, got {dict(self.shares)}")

    def share(self, name: str) -> int:
        """The bytes of share `name`."""
        return int(self.total * self.shares[name])

    def describe(self) -> str:
        parts = ", ".join(f"{name} {self.share(name) / MIB:.0f}" for name in self.shares)
        return f"{self.total / MIB:.0f} MiB: {parts}"
