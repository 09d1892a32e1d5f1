"""The context role's one stage on `chorus.messages`: each valid message, in log order, to
the summaries and recaps stages (its "readers"); what they change reaches their tables
once per checkpoint (`streams.worker.checkpoint`), and the messages stay held until then.

It passes the fold's gate (`validate_record`) but sends no dead letters for what the gate
refuses: the fold role does (one dead letter per bad record). A follower that raises is
dead-lettered here (stages `Summariser.on_message`, `Recapper.on_message`); a table write
too large for its changelog is dead-lettered by the checkpoint (stage `table-write`).

Like the fold, it keeps the next offset per partition (`context-positions`) and never
follows a message past a gap: a consumer that jumps ahead is sought back, so no message is
left out of a summary. Redelivered messages reach the followers again; both are idempotent
by offset.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from faust.types import Message as Record

from projections.model import Message, MessageError
from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# A stage the feed hands every valid message to, in log order: (message, partition, offset).
Reader = Callable[[Message, int, int], Awaitable[None]]


class Feed:
    """The feed's body, apart from its intake (`Runtime.take_messages`) so tests can drive
    it."""

    def __init__(self, chorus: Runtime, readers: Sequence[Reader]) -> None:
        self.chorus = chorus
        self.readers = readers

    async def on_record(
        self,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        timestamp_ms: int = 0,
    ) -> None:
        if not await self.chorus.in_order(partition, offset, timestamp_ms):
            return
        try:
            message = self.chorus.gate.validate(key, value, partition, offset, timestamp_ms)
        except MessageError:  # the fold role dead-letters it
            return
        for reader in self.readers:
            try:
                await reader(message, partition, offset)
            except Exception as error:
                stage = getattr(reader, "__qualname__", "reader")
                log.exception("%s failed for %s@%s", stage, partition, offset)
                reason = f"{stage} failed: {type(error).__name__}: {error}"
                await self.chorus.gate.dead_letter(reason, stage, key, value, partition, offset)

    async def on_batch(self, batch: Sequence[Record]) -> None:
        for record in batch:
            await self.on_record(
                record.key,
                record.value,
                record.partition,
                record.offset,
                int(record.timestamp * 1000),  # as the fold reads it: the same defaults
            )


def install(chorus: Runtime, readers: Sequence[Reader]) -> Feed:
    """The feed (the context role): the summaries and recaps stages are its `readers`."""
    feed = Feed(chorus, readers)

    chorus.take_messages("feed-messages", feed.on_batch)
    return feed
