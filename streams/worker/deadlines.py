"""What falls due when, per channel: a time-ordered index in a checkpointed table of the role
(`deadlines`, both roles), read only up to now (Flink's timer service, Kafka Streams'
punctuators over a time-indexed store).

An entry is a key `<kind>|<due ms, 15 digits>|<channel>` in the channel's partition: in a
partition's store the keys of a kind sort by due time, so a tick reads the entries due
(`due`: a range scan from the kind's first key to now, or on from the last entry a tick
read, a slice at a time) and never the channels that are not.
Each kind is one timer's (the fold role's commitment expiry; the context role's summary time
thresholds and recap debounces). The index is changelogged, checkpointed and restored like
any table, so a deadline survives a restart and follows its partition to another worker.

Costs: a write is one key in the checkpoint (a `put`, a `remove`); a tick reads the due
entries of the owned partitions and nothing else; an assignment reads nothing (the store
is the partition's). A range scan also steps over the entries removed that RocksDB has not
compacted away yet, so the index's databases flush small memtables and compact deletions
at once (`streams.worker.app.SharedRocksDB.for_a_time_index`).

An entry is a hint, never the truth: the stage that owns the state checks, when an entry
fires, whether the channel is really due, and moves or removes the entry (`move`), so an
entry left behind by a state that changed without it costs one look, not a missed
deadline. Writers put an entry when a deadline appears or comes sooner; a deadline that
moves later leaves its entry to fire early and be moved. A writer that keeps where its
channel's entry is (`sooner`: its due ms in the channel's own row, written with it) holds
one entry per channel: it replaces the entry when the deadline comes sooner, and a deadline
that moves later costs no write until the entry fires.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from streams.worker.checkpoint import CheckpointedTable

# A tick that reads a channel's state for each due entry (a summary's batch, a recap's
# status: a table read and a decode) gives the event loop back after this many, so the
# heartbeats, the fold and the views wait for a slice of its work, never for all of it. At
# 1,000,000 channels an entry took 0.6-0.7 ms of CPU and a slice of 32 up to 22 ms, which
# the context role, at nice 10 beside a busy fold, stretched to 117-246 ms of wall time.
DUE_ENTRIES_PER_SLICE = 8
# Due times as milliseconds since the epoch, zero-padded so that the keys sort by time.
DUE_DIGITS = 15
SEPARATOR = "|"


@dataclass(frozen=True)
class Due:
    """An entry of the index: `channel` falls due at `at`."""

    channel: str
    at: datetime


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)


def due_ms(at: datetime) -> int:
    """`at` in whole milliseconds since the epoch, rounded up: an entry never fires before
    its time."""
    return max(0, -((EPOCH - at) // MILLISECOND))


class Deadlines:
    """One kind of deadline in the role's index table."""

    def __init__(self, table: CheckpointedTable, kind: str) -> None:
        if SEPARATOR in kind:
            raise ValueError(f"a deadline kind must not contain {SEPARATOR!r}: {kind!r}")
        self.table = table
        self.kind = kind

    def key(self, channel: str, at: datetime) -> str:
        return f"{self.kind}{SEPARATOR}{due_ms(at):0{DUE_DIGITS}d}{SEPARATOR}{channel}"

    def put(
        self,
        channel: str,
        at: datetime,
        partition: int,
        offset: int | None = None,
        topic: str | None = None,
    ) -> None:
        """`channel` (of `partition`) falls due at `at`; `offset`, `topic`: the record that
        made it, as a table write's."""
        self.table.set(self.key(channel, at), 0, partition, offset, topic)

    def sooner(
        self,
        channel: str,
        at: datetime,
        entry: int | None,
        partition: int,
        offset: int | None = None,
        topic: str | None = None,
    ) -> int | None:
        """`channel` falls due at `at`; its one entry is due at `entry` (ms, None: none).
        Returns the entry's ms from now on if it moved (put at `at`, the old one removed),
        None if the entry is as soon already (it fires early and is moved)."""
        wanted = due_ms(at)
        if entry is not None and entry <= wanted:
            return None
        if entry is not None:
            self.remove(Due(channel, EPOCH + entry * MILLISECOND), partition)
        self.put(channel, at, partition, offset, topic)
        return wanted

    def remove(self, due: Due, partition: int) -> None:
        self.table.delete(self.key(due.channel, due.at), partition)

    def move(self, due: Due, partition: int, at: datetime | None) -> None:
        """The entry `due` fired early or for nothing: the channel is due at `at` instead
        (None: not at all)."""
        if at is not None and due_ms(at) == due_ms(due.at):
            return
        self.remove(due, partition)
        if at is not None:
            self.put(due.channel, at, partition)

    def due(
        self,
        partition: int,
        now: datetime,
        limit: int,
        *,
        newest_first: bool = False,
        after: Due | None = None,
    ) -> list[Due]:
        """Up to `limit` entries of `partition` due at `now`, the earliest first (the latest
        first when `newest_first`); with `after`, those that come after that entry in that
        order (what a tick reading a slice at a time read last)."""
        start = f"{self.kind}{SEPARATOR}"
        through = (now - EPOCH) // MILLISECOND  # now, rounded down
        stop = f"{self.kind}{SEPARATOR}{through + 1:0{DUE_DIGITS}d}{SEPARATOR}"
        last = None if after is None else self.key(after.channel, after.at)
        if last is not None:  # a scan's start is inclusive, its stop exclusive
            if newest_first:
                stop = min(stop, last)
            else:
                start = last
        found: list[Due] = []
        for key, _ in self.table.scan(partition, start, stop, reverse=newest_first):
            if key == last:
                continue
            _, ms, channel = str(key).split(SEPARATOR, 2)
            found.append(Due(channel, EPOCH + int(ms) * MILLISECOND))
            if len(found) >= limit:
                break
        return found
