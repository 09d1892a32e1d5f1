"""Message bodies for the stages that need them again later (context role: summaries,
recaps), without a copy of their own: `chorus.messages` is retained forever, so the log is
the one copy.

A stage keeps the bodies it will need in memory (`MessageBodies`: per channel, in a cache
bounded in bytes, the least recently used channel forgotten first) and reads back from the
log, by position, what memory no longer has (`LogBodies.read_back`): after a restart or a
rebalance, or when a burst outgrew the bound. Nothing is written per message to any
changelog for it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiokafka import ConsumerRecord

from projections.model import Message, MessageError
from streams.memory import ByteCache

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# What a message weighs in memory besides its content (the model and its fields:
# measured with tracemalloc, about 1,400 bytes for a short message).
MESSAGE_BYTES = 1_400
# Offsets of several channels read back together are read in one range while they are no
# further apart than this (a read decodes every record of its range).
READ_TOGETHER_GAP = 2_000


def message_bytes(message: Message) -> int:
    return MESSAGE_BYTES + 2 * len(message.content or "")


class MessageBodies:
    """Bodies by channel and offset, in a cache of channels bounded in bytes (see the
    module)."""

    def __init__(self, cache: ByteCache[str, dict[int, Message]]) -> None:
        self.cache = cache

    def keep(self, channel: str, partition: int, offset: int, message: Message) -> None:
        kept = self.cache.peek(channel)
        if kept is None:
            kept = {}
        elif offset in kept:
            return
        kept[offset] = message
        size = self.cache.size_of(channel) + message_bytes(message)
        self.cache.put(channel, kept, size, partition)

    def of(self, channel: str) -> dict[int, Message]:
        """The channel's bodies in memory (a copy)."""
        return dict(self.cache.get(channel) or {})

    def drop_through(self, channel: str, offset: int) -> None:
        """Forget the channel's bodies up to `offset` (a summary covers them)."""
        kept = self.cache.peek(channel)
        if not kept:
            return
        dropped = [o for o in kept if o <= offset]
        if not dropped:
            return
        freed = sum(message_bytes(kept.pop(old)) for old in dropped)
        if not kept:
            self.cache.pop(channel)
            return
        partition = self.cache.partition_of(channel)
        if partition is not None:  # counted for what it still holds, not summed again
            self.cache.put(channel, kept, self.cache.size_of(channel) - freed, partition)


@dataclass(frozen=True)
class Wanted:
    """What to read back of a channel: `singles` (those offsets alone) and `runs` (first,
    last, at most how many records of them)."""

    singles: frozenset[int] = frozenset()
    runs: tuple[tuple[int, int, int | None], ...] = ()


class LogBodies:
    """Bodies kept in memory, and the reader of those it lacks from the log."""

    def __init__(
        self,
        chorus: Runtime,
        memory: MessageBodies,
        kept_as: Callable[[Message], Message] | None = None,
    ) -> None:
        """`kept_as`: what of a message read back is kept (the whole message by default)."""
        self.chorus = chorus
        self.memory = memory
        self.kept_as = kept_as
        self.reader = chorus.reader(chorus.messages.get_topic_name())

    async def read_back(
        self,
        channel: str,
        partition: int,
        wanted: Wanted,
        accept: Callable[[Message], bool],
    ) -> dict[int, Message]:
        """What `wanted` names, read from the log (kept in memory again)."""
        reads: list[tuple[int, int, int | None, Collection[int] | None]] = [
            (first, last, limit, None) for first, last, limit in wanted.runs
        ]
        if wanted.singles:
            reads.append((min(wanted.singles), max(wanted.singles), None, wanted.singles))
        found: dict[int, Message] = {}
        for first, last, limit, only in reads:
            take = functools.partial(self._accepted, channel, partition, accept, only)
            for offset, message in await self.reader.read(partition, first, last, take, limit):
                found[offset] = message
                self.memory.keep(channel, partition, offset, message)
            log.info(
                "read %s back from partition %s, offsets %s-%s", channel, partition, first, last
            )
        return found

    async def read_back_many(
        self,
        partition: int,
        wanted: dict[str, frozenset[int]],
        accept: Callable[[Message], bool],
    ) -> dict[str, dict[int, Message]]:
        """The single offsets `wanted` of many channels of `partition`, read from the log
        (kept in memory again): offsets no more than READ_TOGETHER_GAP apart are read in
        one range, so channels whose messages sit together cost one read, not one each."""
        owner = {offset: channel for channel, offsets in wanted.items() for offset in offsets}
        found: dict[str, dict[int, Message]] = {channel: {} for channel in wanted}
        for first, last in _clusters(sorted(owner), READ_TOGETHER_GAP):
            take = functools.partial(self._owned_by, owner, partition, accept)
            for offset, message in await self.reader.read(partition, first, last, take):
                channel = owner[offset]
                found[channel][offset] = message
                self.memory.keep(channel, partition, offset, message)
            log.info(
                "read %d channels back from partition %s, offsets %s-%s",
                len(wanted),
                partition,
                first,
                last,
            )
        return found

    def _owned_by(
        self,
        owner: dict[int, str],
        partition: int,
        accept: Callable[[Message], bool],
        record: ConsumerRecord,
    ) -> Message | None:
        channel = owner.get(record.offset)
        if channel is None:
            return None
        return self._accepted(channel, partition, accept, None, record)

    def _accepted(
        self,
        channel: str,
        partition: int,
        accept: Callable[[Message], bool],
        only: Collection[int] | None,
        record: ConsumerRecord,
    ) -> Message | None:
        """The record as the stage keeps it, or None: another channel's, not one of `only`,
        refused by the fold's gate, or not what the stage takes (`accept`)."""
        if record.key != channel.encode() or (only is not None and record.offset not in only):
            return None
        try:
            message = self.chorus.gate.validate(
                record.key, record.value, partition, record.offset, record.timestamp
            )
        except MessageError:
            return None
        if not accept(message):
            return None
        return self.kept_as(message) if self.kept_as else message


def _clusters(offsets: list[int], gap: int) -> list[tuple[int, int]]:
    """(first, last) ranges covering the sorted `offsets`, a new one where two are more
    than `gap` apart."""
    ranges: list[tuple[int, int]] = []
    for offset in offsets:
        if ranges and offset - ranges[-1][1] <= gap:
            ranges[-1] = (ranges[-1][0], offset)
        else:
            ranges.append((offset, offset))
    return ranges
