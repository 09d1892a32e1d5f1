"""Fold role: each channel's recent messages, for the agent context and the recap view, kept
here so that no view asks another process for them.

The fold stage hands over each record of `chorus.messages` as it takes it (`on_record`: the
log is read once per process, by Faust's consumer), and nothing is parsed then: per record
the window of its channel keeps the offset and Kafka timestamp (its last `RECENT_RECORDS`
records) and bounded memory the raw value. A view validates what it shows with the fold's
gate (`Runtime.validate`: a record the fold dead-lettered is never shown), keeps the
conversation (not EVENTs, at most `RECAP_WINDOW`, cut as the recap window cuts them) and
only what was folded (at or before the fold's offset), and reads back from the log what
memory let go.

After a restart or a partition move the windows of a partition taken over start empty: a
view of a channel reads back at most `RECENT_READ_BACK` records of its partition before the
first the fold handed over since, so a channel quiet for longer than that shows only what
came after (its summary has the rest).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Collection, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import ConsumerRecord

from projections.model import Message, MessageError
from projections.recap import is_conversation_change
from streams.kafka.consume import RangeReader
from streams.records import key_partition
from streams.worker.stages.recaps import RECAP_WINDOW, windowed_message

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime

# Records per channel window: twice the messages shown, so that a few EVENTs among them
# (typing, expiries) still leave the window's worth of conversation.
RECENT_RECORDS = 2 * RECAP_WINDOW
# Windows kept: past it the least recently active channel's is dropped (and read back when
# a view asks, as after a restart).
RECENT_KEPT_CHANNELS = 50_000
# Raw values kept in memory across channels (the oldest dropped first: read back on demand).
RECENT_KEPT_BYTES = 32 * 1024 * 1024
# What a view reads back of a partition, at most, to fill a window the follower has not seen.
RECENT_READ_BACK = 5_000


@dataclass(frozen=True)
class Recent:
    """A channel's recent conversation, oldest first: (offset, message cut as the recap
    window cuts it); the offset and Kafka time (ms) of its last conversation message, and
    the time of its last record of any type (None: none in the window)."""

    messages: list[tuple[int, Message]]
    last_change: tuple[int, int] | None = None
    last_record_ms: int | None = None


NOTHING_RECENT = Recent([])


class RecentMessages:
    """The windows (offsets and times) and the bodies (raw, or parsed once shown), of the
    records the fold stage hands over (`on_record`)."""

    def __init__(self, chorus: Runtime, reader: RangeReader | None = None) -> None:
        self.chorus = chorus
        self.reader = reader
        # channel -> its last RECENT_RECORDS (offset, timestamp ms), the least recently
        # active channel first.
        self.windows: OrderedDict[str, deque[tuple[int, int]]] = OrderedDict()
        # (channel, offset) -> raw value, or the message parsed from it (None: not shown),
        # with the raw size it counts for; the oldest first.
        self.bodies: OrderedDict[tuple[str, int], tuple[bytes | Message | None, int]] = (
            OrderedDict()
        )
        self.size = 0
        # partition -> the first offset the fold handed over since this worker took the
        # partition (what comes before is read back when a view asks); the partitions owned;
        # the channels read back since they were taken.
        self.live_from: dict[int, int] = {}
        self.owned: Set[int] = frozenset()
        self.filled: set[str] = set()

    def moved(self, owned: Collection[int]) -> None:
        """This worker owns the messages partitions `owned` now: the windows of the others
        are forgotten, and so are those of a partition taken over (another worker may have
        folded records of it meanwhile; bodies stay valid: a record never changes)."""
        kept = self.owned & set(owned)
        partitions = self.chorus.messages_partitions()
        for channel in list(self.windows):
            if key_partition(channel.encode(), partitions) not in kept:
                del self.windows[channel]
                self.filled.discard(channel)
        for partition in set(self.live_from) - kept:
            del self.live_from[partition]
        self.owned = frozenset(owned)

    def on_record(
        self, key: bytes | None, value: bytes | None, partition: int, offset: int, at_ms: int
    ) -> None:
        """A record the fold takes, in log order (redelivered ones again: ignored)."""
        if not key or value is None:
            return
        self.live_from.setdefault(partition, offset)
        channel = key.decode(errors="replace")
        window = self.windows.get(channel)
        if window is None:
            window = self.windows[channel] = deque(maxlen=RECENT_RECORDS)
            while len(self.windows) > RECENT_KEPT_CHANNELS:
                dropped, _ = self.windows.popitem(last=False)
                self.filled.discard(dropped)
        else:
            self.windows.move_to_end(channel)
        if window and window[-1][0] >= offset:
            return  # redelivered
        window.append((offset, at_ms))
        self._keep((channel, offset), value, len(value))

    def _keep(self, key: tuple[str, int], body: bytes | Message | None, size: int) -> None:
        previous = self.bodies.pop(key, None)
        if previous is not None:
            self.size -= previous[1]
        self.bodies[key] = (body, size)
        self.size += size
        while self.size > RECENT_KEPT_BYTES and self.bodies:
            _, (_, dropped) = self.bodies.popitem(last=False)
            self.size -= dropped

    async def recent(self, channel: str, through: int | None, *, read_back: bool = True) -> Recent:
        """The channel's recent conversation folded by `through` (the fold's offset); what
        memory lacks is read back from the log unless `read_back` is False (a list of every
        channel shows what memory has)."""
        partition = self.chorus.messages_partition(channel)
        if partition is None or through is None:
            return NOTHING_RECENT
        if read_back and channel not in self.filled:
            await self._fill(channel, partition, through)
        window = [(o, at) for o, at in self.windows.get(channel, ()) if o <= through]
        # This view's bodies, gathered before any is cached again (caching may evict).
        bodies = {o: self.bodies[(channel, o)] for o, _ in window if (channel, o) in self.bodies}
        missing = [o for o, _ in window if o not in bodies]
        if missing and read_back:
            bodies.update(await self._read_back(channel, partition, missing))
        shown: list[tuple[int, Message]] = []
        last_change = None
        for offset, at_ms in window:
            if offset not in bodies:
                continue
            message = self._shown(channel, partition, offset, *bodies[offset])
            if message is not None:
                shown.append((offset, message))
                last_change = (offset, at_ms)
        return Recent(shown[-RECAP_WINDOW:], last_change, window[-1][1] if window else None)

    def _shown(
        self, channel: str, partition: int, offset: int, body: bytes | Message | None, size: int
    ) -> Message | None:
        """The body at `offset` as shown (parsed once, kept parsed): None when the fold's
        gate refuses it or it is no conversation."""
        if not isinstance(body, bytes):
            return body
        try:
            message = self.chorus.validate(channel.encode(), body, partition, offset)
        except MessageError:
            message = None
        shown = windowed_message(message) if message and is_conversation_change(message) else None
        self._keep((channel, offset), shown, size)
        return shown

    async def _fill(self, channel: str, partition: int, through: int) -> None:
        """Read back the channel's records before the first the fold handed over since this
        worker took the partition (up to `through` when it has handed over none yet: every
        record of the channel after it is handed over), at most RECENT_READ_BACK records,
        once per channel until partitions move."""
        self.filled.add(channel)
        first_live = self.live_from.get(partition)
        last = (through + 1 if first_live is None else first_live) - 1
        if last < 0 or self.reader is None:
            return
        first = max(0, last - RECENT_READ_BACK + 1)
        found = await self.reader.read(partition, first, last, _mine(channel))
        earlier = [(offset, at) for offset, (at, _) in found][-RECENT_RECORDS:]
        window = self.windows.get(channel)
        later = [entry for entry in window or () if entry[0] > last]
        merged: deque[tuple[int, int]] = deque([*earlier, *later], maxlen=RECENT_RECORDS)
        self.windows[channel] = merged
        kept = {offset for offset, _ in merged}
        for offset, (_, value) in found:
            if offset in kept:
                self._keep((channel, offset), value, len(value))

    async def _read_back(
        self, channel: str, partition: int, offsets: list[int]
    ) -> dict[int, tuple[bytes | Message | None, int]]:
        """The raw bodies at `offsets`, read back from the log (kept in memory again)."""
        if self.reader is None:
            return {}
        wanted = set(offsets)
        found = await self.reader.read(partition, min(offsets), max(offsets), _mine(channel))
        bodies: dict[int, tuple[bytes | Message | None, int]] = {}
        for offset, (_, value) in found:
            if offset in wanted:
                bodies[offset] = (value, len(value))
                self._keep((channel, offset), value, len(value))
        return bodies


def _mine(channel: str) -> Any:
    key = channel.encode()

    def take(record: ConsumerRecord) -> tuple[int, bytes] | None:
        if record.key != key or record.value is None:
            return None
        return (int(record.timestamp), record.value)

    return take


def install(chorus: Runtime) -> RecentMessages:
    """The windows, with their read-back reader, following the partitions this worker owns;
    the fold stage hands them its records (`streams.worker.compose`)."""
    recent = RecentMessages(chorus, chorus.reader(chorus.messages.get_topic_name()))
    chorus.on_messages_assigned(recent.moved)
    return recent
