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

Bounded in bytes: the windows and the bodies are two caches (`streams.memory.ByteCache`) of
the role's `recent` share; past it the least recently active channel's window, or the
oldest body, is forgotten (and read back when a view asks, as after a restart).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import ConsumerRecord

from projections.model import Message, MessageError
from projections.recap import is_conversation_change
from projections.recap.window import RECAP_WINDOW, windowed_message
from streams.kafka.consume import RangeReader

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime

# Records per channel window: twice the messages shown, so that a few EVENTs among them
# (typing, expiries) still leave the window's worth of conversation.
RECENT_RECORDS = 2 * RECAP_WINDOW
# What a window entry weighs in memory: the deque, and an (offset, time) pair per record.
WINDOW_BYTES = 700
WINDOW_RECORD_BYTES = 120
# Of the `recent` share: the windows, then the bodies.
WINDOWS_FRACTION = 0.25
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


class Window:
    """A channel's last RECENT_RECORDS (offset, Kafka time in ms), and whether what came
    before the first the fold handed over was read back."""

    __slots__ = ("filled", "records")

    def __init__(self, records: deque[tuple[int, int]] | None = None) -> None:
        self.records: deque[tuple[int, int]] = records or deque(maxlen=RECENT_RECORDS)
        self.filled = False


class RecentMessages:
    """The windows (offsets and times) and the bodies (raw, or parsed once shown), of the
    records the fold stage hands over (`on_record`)."""

    def __init__(self, chorus: Runtime, reader: RangeReader | None = None) -> None:
        self.chorus = chorus
        self.reader = reader
        # channel -> its Window, the least recently active channel first.
        self.windows = chorus.cache("recent-windows", "recent", WINDOWS_FRACTION)
        # (channel, offset) -> raw value, or the message parsed from it (None: not shown),
        # counted for its raw size; the oldest first.
        self.bodies = chorus.cache("recent-bodies", "recent", 1 - WINDOWS_FRACTION)
        # partition -> the first offset the fold handed over since this worker took the
        # partition (what comes before is read back when a view asks).
        self.live_from: dict[int, int] = {}

    def moved(self, gone: frozenset[int], taken: frozenset[int], _: frozenset[int]) -> None:
        """Partitions moved: the windows of those gone and of those taken over are forgotten
        (another worker may have folded records of it meanwhile; the runtime forgets the
        caches' entries of both), and so is where the fold started handing theirs over."""
        for partition in gone | taken:
            self.live_from.pop(partition, None)

    def on_record(
        self, key: bytes | None, value: bytes | None, partition: int, offset: int, at_ms: int
    ) -> None:
        """A record the fold takes, in log order (redelivered ones again: ignored)."""
        if not key or value is None:
            return
        self.live_from.setdefault(partition, offset)
        channel = key.decode(errors="replace")
        window: Window | None = self.windows.get(channel)
        if window is None:
            window = Window()
        elif window.records and window.records[-1][0] >= offset:
            return  # redelivered
        window.records.append((offset, at_ms))
        self._keep_window(channel, partition, window)
        self._keep((channel, offset), value, len(value), partition)

    def _keep_window(self, channel: str, partition: int, window: Window) -> None:
        size = WINDOW_BYTES + WINDOW_RECORD_BYTES * len(window.records)
        self.windows.put(channel, window, size, partition)

    def _keep(
        self, key: tuple[str, int], body: bytes | Message | None, size: int, partition: int
    ) -> None:
        self.bodies.put(key, (body, size), size, partition)

    async def recent(self, channel: str, through: int | None, *, read_back: bool = True) -> Recent:
        """The channel's recent conversation folded by `through` (the fold's offset); what
        memory lacks is read back from the log unless `read_back` is False (a list of every
        channel shows what memory has)."""
        partition = self.chorus.ownership.messages_partition(channel)
        if partition is None or through is None:
            return NOTHING_RECENT
        kept: Window | None = self.windows.get(channel)
        if read_back and (kept is None or not kept.filled):
            kept = await self._fill(channel, partition, through, kept)
        window = [(o, at) for o, at in (kept.records if kept else ()) if o <= through]
        # This view's bodies, gathered before any is cached again (caching may evict).
        bodies = {
            o: found for o, _ in window if (found := self.bodies.get((channel, o))) is not None
        }
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
            message = self.chorus.gate.validate(channel.encode(), body, partition, offset)
        except MessageError:
            message = None
        shown = windowed_message(message) if message and is_conversation_change(message) else None
        self._keep((channel, offset), shown, size, partition)
        return shown

    async def _fill(
        self, channel: str, partition: int, through: int, kept: Window | None
    ) -> Window:
        """Read back the channel's records before the first the fold handed over since this
        worker took the partition (up to `through` when it has handed over none yet: every
        record of the channel after it is handed over), at most RECENT_READ_BACK records,
        once per channel until partitions move (or memory let its window go)."""
        first_live = self.live_from.get(partition)
        last = (through + 1 if first_live is None else first_live) - 1
        found: list[tuple[int, tuple[int, bytes]]] = []
        if last >= 0 and self.reader is not None:
            first = max(0, last - RECENT_READ_BACK + 1)
            found = await self.reader.read(partition, first, last, _mine(channel))
        earlier = [(offset, at) for offset, (at, _) in found][-RECENT_RECORDS:]
        later = [entry for entry in (kept.records if kept else ()) if entry[0] > last]
        window = Window(deque([*earlier, *later], maxlen=RECENT_RECORDS))
        window.filled = True
        self._keep_window(channel, partition, window)
        shown = {offset for offset, _ in window.records}
        for offset, (_, value) in found:
            if offset in shown:
                self._keep((channel, offset), value, len(value), partition)
        return window

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
                self._keep((channel, offset), value, len(value), partition)
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
    chorus.ownership.on_moved(recent.moved)
    return recent
