"""The per-channel batch waiting to be summarised: which messages are in it and when it is due.

Pure, so the agent's table holds exactly this and the rules are tested without Kafka. A
batch holds positions only: the log (`chorus.messages`, retained forever) is the one copy of
the messages, and `fill` turns a batch into the messages it stands for from whatever bodies
the caller read (the live stage: its memory, else the log; offline: the input).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from projections.commitments import states_a_request
from projections.model import Message, MessageType
from projections.summarise.render import render_message
from projections.text.ids import person
from projections.text.lines import ELLIPSIS, cut, parse_message_line
from projections.text.sentences import rough_sentences

# A compacted item's content is cut to this many characters, shared by its messages.
MAX_COMPACTED_CHARS = 4000
# Each message of a compacted item keeps at least this much of its line.
MIN_COMPACTED_SHARE = 60
# A compacted item shows its first messages only, as many as fit MAX_COMPACTED_CHARS at
# MIN_COMPACTED_SHARE each: its message, and what a stage reads back for it, stay bounded
# however many messages it covers (its payload still counts them all).
MAX_COMPACTED_PARTS = MAX_COMPACTED_CHARS // (MIN_COMPACTED_SHARE + 1)
COMPACTED = "compacted"
"""The payload key of a compacted item's message: `{"messages": N, "senders": [...]}`."""
COMPACTED_SENDERS = 50


class PendingItem(BaseModel):
    """One message, or (compacted at the bound) a run of consecutive ones.

    A compacted item covers offsets `first_offset`..`offset`: `covers` messages of the
    channel, which `fill` lists as one message, one line each, `[sender] content`."""

    model_config = ConfigDict(frozen=True)

    offset: int
    first_offset: int | None = None
    covers: int = 1

    @property
    def start(self) -> int:
        return self.offset if self.first_offset is None else self.first_offset

    @property
    def compacted(self) -> bool:
        return self.first_offset is not None


class PendingBatch(BaseModel):
    """Positions of the messages after the last summary, in log order.

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


def summarisable(message: Message) -> bool:
    """EVENTs are observer telemetry (typing, expiry timers), not conversation."""
    return message.type is not MessageType.EVENT


# How a narrative tells a message that asks something (an opener or a HANDOFF): as history,
# "[planner] asked worker-a: collect the merged pull requests…", true whatever came of it.
# Whether it is still open is the commitments projection's to say (the state part and the
# context render that from the fold), so no narrative can keep an ended request open.
ASKING = {
    MessageType.QUERY: "asked",
    MessageType.COMMAND: "asked",
    MessageType.PROPOSE: "proposed to",
    MessageType.HANDOFF: "handed the request to",
}
# A narrative keeps the first sentence of what was asked, at most this long; the whole ask
# (up to the commitments' excerpt length) is the state's.
NARRATED_CHARS = 160
_TOLD = re.compile(
    "^(?:"
    + "|".join(re.escape(verb) for verb in sorted(set(ASKING.values()), key=len, reverse=True))
    + r") [^:\n]*?(?:: |$)",
    re.IGNORECASE,
)


def as_narrated(message: Message) -> Message:
    """The message as a summary's narrative tells it: a request (an opener or a HANDOFF) as
    history, "asked worker-a: <the first sentence of what was asked>". What a request asked
    in full, and how it stands now, is the commitments projection's to say (the summaries
    stage and the context render it from that state), so a narrative never reads as an
    open request. (A message without words reads as what it did: `render_message`.)"""
    if not states_a_request(message):
        return message
    verb = f"{ASKING[message.type]} {person(message.target)}"
    words = narrated_words(message.content or "")
    return message.model_copy(update={"content": f"{verb}: {words}" if words else verb})


def narrated_words(content: str) -> str:
    """What a narrative keeps of a request's words: its first sentence, flattened and cut to
    NARRATED_CHARS at a word, ending in "…" when more was said (one sentence, so no
    summariser can split the rest from the "asked …:" that frames it)."""
    pieces = [piece for piece in rough_sentences(" ".join(content.split())) if piece.strip()]
    if not pieces:
        return ""
    first = cut(pieces[0].strip(), NARRATED_CHARS, at_word=True)
    if len(pieces) > 1 and not first.endswith(ELLIPSIS):
        first = first.removesuffix(".") + ELLIPSIS
    return first


def told_request(content: str) -> tuple[str, str]:
    """`(framing, words)` of a narrated request's content ("asked worker-a: ", "collect
    …"); `("", content)` for any other content. A summariser counts the words, not the
    framing, as what the channel is about."""
    found = _TOLD.match(content)
    if found is None:
        return "", content
    return found.group(0), content[found.end() :]


def _line(message: Message) -> str:
    return " ".join(render_message(as_narrated(message)).split())


def spoken(message: Message) -> list[tuple[str, str]]:
    """(sender, content) of each message an item stands for (one unless compacted)."""
    content = message.content or ""
    if not (message.payload and COMPACTED in message.payload):
        return [(message.sender, content)]
    out = []
    for line in content.splitlines():
        parsed = parse_message_line(line)
        if parsed is not None:
            out.append(parsed)
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + " " + line)
    return out


def compacted(parts: Sequence[Message], covers: int) -> Message:
    """A run of consecutive messages as one STATUS message: a line for each of its first
    MAX_COMPACTED_PARTS, every line cut to an equal share of MAX_COMPACTED_CHARS (at least
    MIN_COMPACTED_SHARE), the whole cut to it. A function of the run's start alone, so the
    live stage and replay compact alike."""
    shown = parts[:MAX_COMPACTED_PARTS]
    share = max(MAX_COMPACTED_CHARS // len(shown) - 1, MIN_COMPACTED_SHARE)
    content = cut("\n".join(cut(_line(m), share) for m in shown), MAX_COMPACTED_CHARS)
    senders = list(dict.fromkeys(m.sender for m in shown))[:COMPACTED_SENDERS]
    return shown[-1].model_copy(
        update={
            "type": MessageType.STATUS,
            "content": content,
            "payload": {COMPACTED: {"messages": covers, "senders": senders}},
            "correlation_id": None,
            "in_reply_to": None,
            "target": None,
            "deadline": None,
        }
    )


def merge(first: PendingItem, second: PendingItem) -> PendingItem:
    """Two adjacent items as one compacted item (positions only)."""
    return PendingItem(
        offset=second.offset, first_offset=first.start, covers=first.covers + second.covers
    )


def add(
    pending: PendingBatch,
    offset: int,
    *,
    covered_offset: int,
    max_pending: int,
    now: datetime,
    in_flight_through: int = -1,
) -> PendingBatch:
    """Append unless the offset is already summarised or pending (redelivery is harmless).

    Past `max_pending` items two adjacent ones are merged (`merge`), never one up to
    `in_flight_through` (a batch being summarised: its summary will trim exactly those), so
    the bound is `max_pending`, or the batch in flight plus one.
    """
    if offset <= covered_offset or offset <= pending.last_offset:
        return pending
    items = [*pending.items, PendingItem(offset=offset)]
    while len(items) > max_pending:
        pairs = [k for k in range(len(items) - 1) if items[k].start > in_flight_through]
        if not pairs:
            break
        i = min(pairs, key=lambda k: items[k].covers + items[k + 1].covers)
        items[i : i + 2] = [merge(items[i], items[i + 1])]
    return PendingBatch(items=items, pending_since=pending.pending_since or now)


def missing(batch: PendingBatch, bodies: Mapping[int, Message]) -> list[PendingItem]:
    """The items whose messages are not all in `bodies` (a compacted item needs `covers`)."""
    offsets = sorted(bodies)
    return [item for item in batch.items if _present(item, offsets) < item.covers]


def _present(item: PendingItem, offsets: Sequence[int]) -> int:
    return bisect_right(offsets, item.offset) - bisect_left(offsets, item.start)


def fill(batch: PendingBatch, bodies: Mapping[int, Message]) -> list[Message]:
    """The messages the batch stands for, from `bodies` (offset -> message of the channel):
    each item's own, a compacted item's run as one `compacted` message. An item with none of
    its messages in `bodies` is left out."""
    offsets = sorted(bodies)
    out = []
    for item in batch.items:
        run = offsets[bisect_left(offsets, item.start) : bisect_right(offsets, item.offset)]
        if not run:
            continue
        if item.compacted:
            out.append(compacted([bodies[offset] for offset in run], item.covers))
        else:
            out.append(bodies[item.offset])
    return out


def trim(
    pending: PendingBatch, covered_offset: int, rest_since: datetime | None = None
) -> PendingBatch:
    """Drop what a published summary covers. `rest_since`: what is left came at or after
    then (the summary's batch was launched then, with nothing after it), so it waits from
    then, not from the batch's first message."""
    kept = [item for item in pending.items if item.offset > covered_offset]
    if len(kept) == len(pending.items):
        return pending
    since = pending.pending_since if kept else None
    if since is not None and rest_since is not None:
        since = max(since, rest_since)
    return PendingBatch(items=kept, pending_since=since)


def due(pending: PendingBatch, *, after_messages: int, after_seconds: float, now: datetime) -> bool:
    """Enough messages, or the oldest pending one has waited long enough."""
    if not pending.items:
        return False
    if len(pending.items) >= after_messages:
        return True
    since = pending.pending_since
    return since is not None and now - since >= timedelta(seconds=after_seconds)


def due_at(pending: PendingBatch, *, after_messages: int, after_seconds: float) -> datetime | None:
    """When `pending` falls due (`due` from then on): at once when it holds `after_messages`,
    else `after_seconds` after its oldest item; None when it holds nothing."""
    since = pending.pending_since
    if not pending.items or since is None:
        return None
    if len(pending.items) >= after_messages:
        return since
    return since + timedelta(seconds=after_seconds)


def next_batch(pending: PendingBatch, after_messages: int) -> PendingBatch:
    """The oldest `after_messages` items: one summary per threshold, even after a backlog."""
    return pending.model_copy(update={"items": pending.items[:after_messages]})


def replay(
    messages: Iterable[tuple[int, Message]],
    *,
    after_messages: int,
    after_seconds: float,
    max_pending: int,
) -> Iterator[tuple[PendingBatch, list[Message]]]:
    """The batches the live stage would summarise, with their messages (`fill`), for
    `(offset, message)` in log order.

    Time is each message's `created_at`; each batch is summarised at once (nothing in
    flight), then trimmed away, as `chorus.summaries` records it. A batch falls due by count
    when a message arrives, or by age at the next message's time; at the end of the input
    what is still pending falls due as the time threshold would, one threshold at a time.
    """
    pending = PendingBatch()
    bodies: dict[int, Message] = {}

    def drain(now: datetime | None) -> Iterator[tuple[PendingBatch, list[Message]]]:
        nonlocal pending
        while pending.items and (
            now is None
            or due(pending, after_messages=after_messages, after_seconds=after_seconds, now=now)
        ):
            chosen = next_batch(pending, after_messages)
            yield chosen, fill(chosen, bodies)
            pending = trim(pending, chosen.last_offset)
            for offset in [o for o in bodies if o <= chosen.last_offset]:
                del bodies[offset]

    for offset, message in messages:
        if not summarisable(message):
            continue
        now = message.created_at
        yield from drain(now)
        pending = add(pending, offset, covered_offset=-1, max_pending=max_pending, now=now)
        bodies[offset] = message
        if len(pending.items) >= after_messages:
            yield from drain(now)
    yield from drain(None)
