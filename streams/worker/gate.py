"""The fold's gate and the dead letters (both roles): what every stage that reads the log
passes its records through, and where whatever cannot be applied goes, with why.

A record is a message only through `validate` (`streams.records.validate_record`: the rules
and one-line reasons the fold, replay and the client share; then the channel's writers,
`projections.writers`); a record refused, a projection
that raised, a table write too large for its changelog, all go to `chorus.dead-letters`
with the reason and the record's position (`dead_letter`), logged, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from projections.model import LogPosition, Message, MessageError
from streams.dead_letters import send_dead_letter
from streams.llm.metering import CostMeter
from streams.records import ChannelConfig, refusal_under, validate_record
from streams.settings import Settings
from streams.worker.checkpoint import RefusedWrite

log = logging.getLogger(__name__)


class Gate:
    """Validation against `messages_topic`'s partition count (`partitions()`), and dead
    letters to `dead_letters` (a Faust topic)."""

    def __init__(
        self,
        settings: Settings,
        messages_topic: str,
        dead_letters: Any,
        partitions: Callable[[], int],
        meter: CostMeter,
        config_of: Callable[[str, int], ChannelConfig | None] = lambda *_: None,
    ) -> None:
        """`config_of(channel, partition)`: the channel's config (its `writers`)."""
        self.settings = settings
        self.messages_topic = messages_topic
        self.dead_letters = dead_letters
        self.partitions = partitions
        self.meter = meter
        self.config_of = config_of

    def validate(
        self, key: bytes | None, value: bytes | None, partition: int, offset: int, at_ms: int = 0
    ) -> Message:
        """The record at `partition`@`offset` of chorus.messages as a message, or
        MessageError with the reason the fold refuses it (a sender outside the channel's
        writers included: `projections.writers`)."""
        message = validate_record(
            key,
            value,
            self.settings.max_message_bytes,
            LogPosition(partition, offset, at_ms),
            partition=partition,
            partitions=self.partitions(),
        )
        # Past validate_record the record is on its channel's partition.
        refusal = refusal_under(self.config_of(message.channel, partition), message)
        if refusal is not None:
            raise MessageError(refusal)
        return message

    async def dead_letter(
        self,
        reason: str,
        stage: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        *,
        topic: str | None = None,
        level: int = logging.WARNING,
    ) -> None:
        """Log `reason` and dead-letter the record at `partition`@`offset` of `topic`
        (chorus.messages unless named; a partition of -1, unknown, leaves the dead letter's
        partition to the key): `streams.dead_letters.send_dead_letter`, which never raises."""
        await send_dead_letter(
            self.dead_letters,
            topic or self.messages_topic,
            reason,
            stage,
            key,
            value,
            partition,
            offset,
            level,
        )

    async def refused_in_checkpoint(self, refused: RefusedWrite) -> None:
        """A checkpoint's write refused (too large for its changelog, or not encodable):
        logged, counted and sent to the dead letters with the position of the message that
        made it."""
        log.error("%s (source %s@%s)", refused.reason, refused.partition, refused.offset)
        self.meter.refused_writes.labels(refused.table).inc()
        await self.dead_letter(
            refused.reason,
            "table-write",
            refused.key.encode(),
            None,
            -1 if refused.partition is None else refused.partition,
            -1 if refused.offset is None else refused.offset,
            topic=refused.topic,
        )
