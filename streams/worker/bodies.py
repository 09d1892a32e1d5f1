"""Message bodies for the stages that need them again later (summaries, recaps), without a
copy of their own: `chorus.messages` is retained forever, so the log is the one copy.

A stage keeps the bodies it will need in memory (bounded: the oldest go first) and reads
back from the log, by position, what memory no longer has: after a restart or a
rebalance, or when a burst outgrew the bound. Nothing is written per message to any
changelog for it.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokafka import ConsumerRecord

from projections.model import Message, MessageError
from projections.summarise.pending import MAX_COMPACTED_PARTS, PendingBatch, missing

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
        self.reader = chorus.reader(chorus.messages.get_topic_name())

    async def of(
        self,
        channel: str,
        partition: int,
        batch: PendingBatch,
        accept: Callable[[Message], bool],
    ) -> dict[int, Message]:
        """offset -> message for what `batch` covers. Records read back pass the same gate as
        the fold (`validate_record`) and `accept`; what fails it was never pending. A read
        holds at most what the batch shows: its single messages, and the first
        MAX_COMPACTED_PARTS of each compacted run (`pending.compacted` shows no more)."""
        bodies = self.memory.of(channel)
        lacking = missing(batch, bodies)
        singles = {item.offset for item in lacking if not item.compacted}
        # (first, last, at most, only these offsets)
        reads: list[tuple[int, int, int | None, set[int] | None]] = [
            (item.start, item.offset, MAX_COMPACTED_PARTS, None)
            for item in lacking
            if item.compacted
        ]
        if singles:
            reads.append((min(singles), max(singles), None, singles))
        for first, last, limit, only in reads:
            take = functools.partial(self._accepted, channel, partition, accept, only)
            for offset, message in await self.reader.read(partition, first, last, take, limit):
                bodies[offset] = message
                self.memory.keep(channel, offset, message)
            log.info(
                "read %s back from partition %s, offsets %s-%s", channel, partition, first, last
            )
        return bodies

    def _accepted(
        self,
        channel: str,
        partition: int,
        accept: Callable[[Message], bool],
        only: set[int] | None,
        record: ConsumerRecord,
    ) -> Message | None:
        """The record as the stage keeps it, or None: another channel's, not one of `only`,
        refused by the fold's gate, or not what the stage takes (`accept`)."""
        if record.key != channel.encode() or (only is not None and record.offset not in only):
            return None
        try:
            message = self.chorus.validate(
                record.key, record.value, partition, record.offset, record.timestamp
            )
        except MessageError:
            return None
        if not accept(message):
            return None
        return self.kept_as(message) if self.kept_as else message
