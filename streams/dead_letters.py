"""The dead letter for a record chorus cannot use: its reason and a copy of the original,
bounded so that the letter always fits the dead-letter topic."""

from __future__ import annotations

import base64
import logging
from typing import Any

from projections.text.lines import cut
from streams.records import DeadLetter

# The encoded letter stays under 60 KiB: below the dead-letter topic's max.message.bytes
# and the producer's request limit, which are at least 64 KiB.
DEAD_LETTER_MAX_BYTES = 60 * 1024
DEAD_LETTER_COPY_LIMIT = 48 * 1024
DEAD_LETTER_REASON_LIMIT = 2_000


def dead_letter_for(
    reason: str,
    stage: str,
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
) -> DeadLetter:
    """Keep the original bytes (text when it is text) and the reason, both capped so the
    encoded letter always fits the dead-letter topic: escaping can grow text sixfold."""
    reason = cut(reason, DEAD_LETTER_REASON_LIMIT)
    limit = DEAD_LETTER_COPY_LIMIT
    while True:
        original = (value or b"")[:limit]
        try:
            text, encoded = original.decode(), None
        except UnicodeDecodeError:
            text, encoded = None, base64.b64encode(original).decode()
        letter = DeadLetter(
            reason=reason,
            stage=stage,
            source_topic=topic,
            partition=partition,
            offset=offset,
            key=key.decode(errors="replace")[:DEAD_LETTER_REASON_LIMIT] if key else None,
            original=text if value is not None else None,
            original_base64=encoded,
            original_truncated=len(value or b"") > limit,
        )
        if limit == 0 or len(letter.to_bytes()) <= DEAD_LETTER_MAX_BYTES:
            return letter
        limit //= 2


log = logging.getLogger(__name__)


async def send_dead_letter(
    dead_letters: Any,
    source_topic: str,
    reason: str,
    stage: str,
    key: bytes | None,
    value: bytes | None,
    partition: int,
    offset: int,
    level: int = logging.WARNING,
) -> None:
    """Log `reason` and send the record's dead letter to `dead_letters` (a Faust topic); a
    partition of -1 (unknown) leaves the choice of the dead letter's partition to the key.
    Never raises: the agent must go on, and the reason is at least in the log."""
    log.log(level, "dead letter %s@%s: %s", partition, offset, reason)
    letter = dead_letter_for(
        reason,
        stage,
        topic=source_topic,
        partition=partition,
        offset=offset,
        key=key,
        value=value,
    )
    try:
        await dead_letters.send(
            key=key, value=letter.to_bytes(), partition=partition if partition >= 0 else None
        )
    except Exception:
        log.exception("could not send the dead letter for %s@%s", partition, offset)
