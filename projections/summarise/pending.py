"""The per-channel batch waiting to be summarised: what is in it and when it is due.

Pure, so the agent's table holds exactly this and the rules are tested without Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from projections.model import Message, MessageType


class PendingItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    offset: int
    message: dict[str, Any]


class PendingBatch(BaseModel):
    """Messages after the last summary, in log order.

    Bounded: past `max_pending` the oldest items are dropped and counted, so a channel
    whose summaries cannot keep up costs bounded memory and says so in its next summary.
    """

    model_config = ConfigDict(frozen=True)

    items: list[PendingItem] = []
    pending_since: datetime | None = None
    dropped: int = 0

    @property
    def last_offset(self) -> int:
        return self.items[-1].offset if self.items else -1

    def messages(self) -> list[Message]:
        return [Message.model_validate(item.message) for item in self.items]


def summarisable(message: Message) -> bool:
    """EVENTs are observer telemetry (typing, expiry timers), not conversation."""
    return message.type is not MessageType.EVENT


def add(
    pending: PendingBatch,
    message: Message,
    offset: int,
    *,
    covered_offset: int,
    max_pending: int,
    now: datetime,
) -> PendingBatch:
    """Append unless the offset is already summarised or pending (redelivery is harmless)."""
    if offset <= covered_offset or offset <= pending.last_offset:
        return pending
    items = [*pending.items, PendingItem(offset=offset, message=message.model_dump(mode="json"))]
    overflow = max(0, len(items) - max_pending)
    return PendingBatch(
        items=items[overflow:],
        pending_since=pending.pending_since or now,
        dropped=pending.dropped + overflow,
    )


def trim(pending: PendingBatch, covered_offset: int) -> PendingBatch:
    """Drop what a published summary covers."""
    kept = [item for item in pending.items if item.offset > covered_offset]
    if len(kept) == len(pending.items):
        return pending
    return PendingBatch(
        items=kept,
        pending_since=pending.pending_since if kept else None,
        dropped=pending.dropped if kept else 0,
    )


def due(pending: PendingBatch, *, after_messages: int, after_seconds: float, now: datetime) -> bool:
    """Enough messages, or the oldest pending one has waited long enough."""
    if not pending.items:
        return False
    if len(pending.items) >= after_messages:
        return True
    since = pending.pending_since
    return since is not None and now - since >= timedelta(seconds=after_seconds)


def next_batch(pending: PendingBatch, after_messages: int) -> PendingBatch:
    """The oldest `after_messages` items: one summary per threshold, even after a backlog."""
    return pending.model_copy(update={"items": pending.items[:after_messages]})


def replay(
    messages: Iterable[tuple[int, Message]],
    *,
    after_messages: int,
    after_seconds: float,
    max_pending: int,
) -> Iterator[PendingBatch]:
    """The batches the live stage would summarise, for `(offset, message)` in log order.

    Time is each message's `created_at`; each batch is summarised at once (nothing in
    flight), then trimmed away, as `chorus.summaries` records it. A batch falls due by count
    when a message arrives, or by age at the next message's time; at the end of the input
    what is still pending falls due as the time threshold would, one threshold at a time.
    """
    pending = PendingBatch()

    def drain(now: datetime | None) -> Iterator[PendingBatch]:
        nonlocal pending
        while pending.items and (
            now is None
            or due(pending, after_messages=after_messages, after_seconds=after_seconds, now=now)
        ):
            chosen = next_batch(pending, after_messages)
            yield chosen
            pending = trim(pending, chosen.last_offset)

    for offset, message in messages:
        if not summarisable(message):
            continue
        now = message.created_at
        yield from drain(now)
        pending = add(pending, message, offset, covered_offset=-1, max_pending=max_pending, now=now)
        if len(pending.items) >= after_messages:
            yield from drain(now)
    yield from drain(None)
