"""The per-channel batch waiting to be summarised: what is in it and when it is due.

Pure, so the agent's table holds exactly this and the rules are tested without Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from projections.model import Message, MessageType

# A compacted item's content is cut to this many characters (shared by its parts by size).
MAX_COMPACTED_CHARS = 4000
COMPACTED = "compacted"
"""The payload key of a compacted item's message: `{"messages": N, "senders": [...]}`."""


class PendingItem(BaseModel):
    """One message, or (compacted at the bound) a run of consecutive ones, as one message.

    A compacted item covers offsets `first_offset`..`offset` (`covers` messages); its message
    lists them one per line, `[sender] content`, and names them in its payload."""

    model_config = ConfigDict(frozen=True)

    offset: int
    message: dict[str, Any]
    first_offset: int | None = None
    covers: int = 1

    @property
    def start(self) -> int:
        return self.offset if self.first_offset is None else self.first_offset


class PendingBatch(BaseModel):
    """Messages after the last summary, in log order.

    Bounded: past `max_pending` items, adjacent items are compacted into one (the pair that
    covers the fewest messages, oldest first), so a channel whose summaries cannot keep up
    costs bounded memory and no message is left out of its next summaries.
    """

    model_config = ConfigDict(frozen=True)

    items: list[PendingItem] = []
    pending_since: datetime | None = None

    @property
    def last_offset(self) -> int:
        return self.items[-1].offset if self.items else -1

    @property
    def first_offset(self) -> int:
        return self.items[0].start if self.items else -1

    @property
    def covers(self) -> int:
        """How many messages the batch stands for (more than its items once compacted)."""
        return sum(item.covers for item in self.items)

    def messages(self) -> list[Message]:
        return [Message.model_validate(item.message) for item in self.items]


def summarisable(message: Message) -> bool:
    """EVENTs are observer telemetry (typing, expiry timers), not conversation."""
    return message.type is not MessageType.EVENT


def _lines(message: dict[str, Any]) -> list[str]:
    if not message:
        return []
    payload = message.get("payload") or {}
    content = (message.get("content") or "").strip()
    if COMPACTED in payload:
        return content.splitlines()
    flat = " ".join(content.split()) or str(message.get("type", ""))
    return [f"[{message.get('sender', '')}] {flat}"]


def _senders(message: dict[str, Any]) -> list[str]:
    payload = message.get("payload") or {}
    if COMPACTED in payload:
        return list(payload[COMPACTED].get("senders", []))
    return [str(message.get("sender", ""))]


def _cut(lines: list[str], chars: int) -> str:
    text = "\n".join(lines)
    return text if len(text) <= chars else text[: max(chars - 1, 0)].rstrip() + "…"


def spoken(message: Message) -> list[tuple[str, str]]:
    """(sender, content) of each message an item stands for (one unless compacted)."""
    content = message.content or ""
    if not (message.payload and COMPACTED in message.payload):
        return [(message.sender, content)]
    out = []
    for line in content.splitlines():
        sender, _, said = line.partition("] ")
        if line.startswith("[") and said:
            out.append((sender[1:], said))
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + " " + line)
    return out


def compact(first: PendingItem, second: PendingItem) -> PendingItem:
    """Two adjacent items as one: a STATUS message listing both, its content bounded."""
    a, b = first.message, second.message
    total = first.covers + second.covers
    share = MAX_COMPACTED_CHARS * first.covers // total
    content = "\n".join([_cut(_lines(a), share), _cut(_lines(b), MAX_COMPACTED_CHARS - share - 1)])
    senders = list(dict.fromkeys([*_senders(a), *_senders(b)]))
    message = {
        **(b or a),
        "type": MessageType.STATUS.value,
        "content": content,
        "payload": {COMPACTED: {"messages": total, "senders": senders[:50]}},
        "correlation_id": None,
        "in_reply_to": None,
        "target": None,
        "deadline": None,
    }
    return PendingItem(
        offset=second.offset, message=message, first_offset=first.start, covers=total
    )


def add(
    pending: PendingBatch,
    message: Message,
    offset: int,
    *,
    covered_offset: int,
    max_pending: int,
    now: datetime,
    in_flight_through: int = -1,
    load: Callable[[PendingItem], dict[str, Any] | None] | None = None,
) -> PendingBatch:
    """Append unless the offset is already summarised or pending (redelivery is harmless).

    Past `max_pending` items two adjacent ones are compacted (`compact`), never one up to
    `in_flight_through` (a batch being summarised: its summary will trim exactly those), so
    the bound is `max_pending`, or the batch in flight plus one. `load` supplies the message
    of an item stored without one (the live stage keeps messages apart).
    """
    if offset <= covered_offset or offset <= pending.last_offset:
        return pending
    items = [*pending.items, PendingItem(offset=offset, message=message.model_dump(mode="json"))]
    while len(items) > max_pending:
        pairs = [k for k in range(len(items) - 1) if items[k].start > in_flight_through]
        if not pairs:
            break
        i = min(pairs, key=lambda k: items[k].covers + items[k + 1].covers)
        first, second = (_loaded(item, load) for item in items[i : i + 2])
        items[i : i + 2] = [compact(first, second)]
    return PendingBatch(items=items, pending_since=pending.pending_since or now)


def _loaded(
    item: PendingItem, load: Callable[[PendingItem], dict[str, Any] | None] | None
) -> PendingItem:
    if item.message or load is None:
        return item
    message = load(item) or {}
    return item.model_copy(update={"message": message})


def trim(pending: PendingBatch, covered_offset: int) -> PendingBatch:
    """Drop what a published summary covers."""
    kept = [item for item in pending.items if item.offset > covered_offset]
    if len(kept) == len(pending.items):
        return pending
    return PendingBatch(items=kept, pending_since=pending.pending_since if kept else None)


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
