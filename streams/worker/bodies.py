"""Message bodies for the stages that need them again later (summaries, recaps), without a
copy of their own: `chorus.messages` is retained forever, so the log is the one copy.

A stage keeps the bodies it will need in memory (bounded: the oldest go first) and reads
back from the log, by position, what memory no longer has: after a restart or a
rebalance, or when a burst outgrew the bound. Nothing is written per message to any
changelog for it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from projections.model import LogPosition, Message, MessageError
from projections.summarise.pending import PendingBatch, missing
from streams.kafka.consume import RangeReader
from streams.records import validate_record

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# What the memory keeps, at most: this many messages, and their content this many
# characters in all (about 50 MB with the model's overhead at the mean message size).
MAX_KEPT_MESSAGES = 20_000
MAX_KEPT_CHARS = 32 * 1024 * 1024


class MessageBodies:
    """Bodies by channel and offset, in memory, bounded by count and characters; the ones
    kept longest are forgotten first (the log still has them)."""

    def __init__(self, max_messages: int = MAX_KEPT_MESSAGES, max_chars: int = MAX_KEPT_CHARS):
        self.max_messages = max_messages
        self.max_chars = max_chars
        self._by_channel: dict[str, dict[int, Message]] = {}
        self._order: OrderedDict[tuple[str, int], int] = OrderedDict()  # -> its characters
        self.chars = 0

    def __len__(self) -> int:
        return len(self._order)

    def keep(self, channel: str, offset: int, message: Message) -> None:
        if (channel, offset) in self._order:
            return
        size = len(message.content or "")
        self._by_channel.setdefault(channel, {})[offset] = message
        self._order[(channel, offset)] = size
        self.chars += size
        while self._order and (len(self._order) > self.max_messages or self.chars > self.max_chars):
            (old_channel, old_offset), old_size = self._order.popitem(last=False)
            self._forget(old_channel, old_offset, old_size)

    def of(self, channel: str) -> dict[int, Message]:
        """The channel's bodies in memory (a copy)."""
        return dict(self._by_channel.get(channel, {}))

    def drop_through(self, channel: str, offset: int) -> None:
        """Forget the channel's bodies up to `offset` (a summary covers them)."""
        kept = self._by_channel.get(channel)
        if not kept:
            return
        for old in [o for o in kept if o <= offset]:
            self._forget(channel, old, self._order.pop((channel, old), 0))

    def _forget(self, channel: str, offset: int, size: int) -> None:
        self.chars -= size
        kept = self._by_channel.get(channel)
        if kept is None:
            return
        kept.pop(offset, None)
        if not kept:
            del self._by_channel[channel]


class LogBodies:
    """The bodies a pending batch stands for: from memory, else read back from the log."""

    def __init__(
        self,
        chorus: Runtime,
        memory: MessageBodies | None = None,
        kept_as: Callable[[Message], Message] | None = None,
    ) -> None:
        """`kept_as`: what of a message read back is kept (the whole message by default)."""
        self.chorus = chorus
        self.memory = memory or MessageBodies()
        self.kept_as = kept_as
        self.reader = RangeReader(chorus.settings, chorus.messages.get_topic_name(), chorus.servers)
        chorus.app.on_before_shutdown.connect(self._stop)

    async def _stop(self, *_: Any, **__: Any) -> None:
        await self.reader.stop()

    async def of(
        self,
        channel: str,
        partition: int,
        batch: PendingBatch,
        accept: Callable[[Message], bool],
    ) -> dict[int, Message]:
        """offset -> message for what `batch` covers. Records read back pass the same gate as
        the fold (`validate_record`) and `accept`; what fails it was never pending."""
        bodies = self.memory.of(channel)
        lacking = missing(batch, bodies)
        if not lacking:
            return bodies
        first, last = min(item.start for item in lacking), max(item.offset for item in lacking)
        key = channel.encode()
        records = await self.reader.read(partition, first, last, lambda r: r.key == key)
        partitions = self.chorus.messages_partitions()
        limit = self.chorus.settings.max_message_bytes
        for record in records:
            position = LogPosition(partition, record.offset, record.timestamp)
            try:
                message = validate_record(
                    record.key,
                    record.value,
                    limit,
                    position,
                    partition=partition,
                    partitions=partitions,
                )
            except MessageError:
                continue
            if accept(message):
                kept = self.kept_as(message) if self.kept_as else message
                bodies[record.offset] = kept
                self.memory.keep(channel, record.offset, kept)
        log.info(
            "read %s message(s) of %s back from partition %s, offsets %s-%s",
            len(records),
            channel,
            partition,
            first,
            last,
        )
        return bodies
