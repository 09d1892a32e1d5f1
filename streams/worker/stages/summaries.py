"""The context role's summaries stage: batch each channel's messages and publish running
summaries to the compacted `chorus.summaries` topic.

The stage owns the summaries. A record carries the *narrative* only: what was said, as
history, never which commitments are open. Where the channel's commitments stand is the
fold's to say, and the fold role renders it beside the narrative when a view is read
(`SummaryRecord.rendered`), so neither the topic nor a view can keep an ended commitment
open. The stage reads `chorus.messages` and its own `chorus.summaries`, no fold and no
other role.

The feed never waits for a summariser: a due batch is handed to a task, so a slow LLM
delays neither folding nor other channels (beyond the client's concurrency limit). The
task publishes to `chorus.summaries`. What the next batch builds on, each channel's latest
summary, is the topic's: the role follows it (`streams.worker.followed`: a consumer of its
own, how far it read checkpointed with the role's state) and keeps in the channel state
only where the latest summary is and what it covers through; the record is read back by
that position when the next batch needs it. A summary read back trims the pending batch it
covers (the pending batches are checkpointed), and what came after the batch waits its time
threshold from when the batch was launched; no batch is summarised while its channel's
partition of the topic is still catching up after this worker took it, so a summary always
builds on the latest.

A batch falls due at its message threshold (launched as the message is taken) or at its
time threshold: the deadline index (`streams.worker.deadlines`, kind `summary`) holds when,
so the timer `summary-time-thresholds` reads only the channels due. A channel has one entry,
whose due time its row keeps (`summary-entry`): it is replaced when the batch falls due
sooner, and left to fire early and be moved when the batch moves on to a later one. While a
summary of the batch is in flight the batch is indexed by its time threshold alone (the
summary read back moves it on and launches the next; the entry brings it back should the
summary fail), so a summary at the message threshold costs no index write.

A batch due by its time threshold alone waits until the role has read the channel's
partition of `chorus.messages` up to when it fell due (`Runtime.read_through`: a record
stamped at or after then applied, or none left unread as of the consumer's last fetch).
Behind a backlog the feed takes messages long after they were written, so a threshold
counted from when they were taken passes while more of the channel's messages wait in the
log, and the batch would be summarised in pieces: through the bench's backlog of 20,000
messages over 200 channels, 2,597 summaries of 7.7 messages on average instead of 1,094 (bug
27 in docs/reliability.md). Live, the role reads the log within milliseconds of its
writing, so the threshold fires as before (records stamped by a producer whose clock runs
behind the worker's delay it by as much, while any are unread). A partition taken over
again is read again from its last checkpoint before its thresholds fire. A tick stops at a
partition's first entry not read up to: the later ones are due later still.

The pending batch is positions only (offsets, compacted spans): the log is the one copy of
the messages (`streams.worker.bodies`: kept in memory while pending, else read back), so a
message costs no changelog write of its body and no tombstone once summarised.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from projections.model import Message, utc_now
from projections.summarise import (
    ChatClient,
    ContentSummariser,
    SummaryResult,
    default_summariser,
)
from projections.summarise.pending import (
    MAX_COMPACTED_PARTS,
    PendingBatch,
    PendingItem,
    add,
    as_narrated,
    due,
    due_at,
    fill,
    missing,
    next_batch,
    summarisable,
    trim,
)
from projections.summarise.state import narrative_of
from streams.records import SummaryRecord
from streams.settings import Settings
from streams.worker.bodies import LogBodies, MessageBodies, Wanted
from streams.worker.checkpoint import Codec
from streams.worker.deadlines import DUE_ENTRIES_PER_SLICE, Deadlines, Due, due_ms
from streams.worker.followed import Followed, LatestBook, covers_less
from streams.worker.timers import Clock, every

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# Set when a batch had compacted items: how many of its messages reached the summariser
# compacted (see `pending.add`, which merges neighbours with `pending.merge`); the record's
# first/last offset say what it covers.
COMPACTED_ITEMS = "compactedMessages"
# Set when some of a batch's items could not be read back from the log (only if its
# retention was cut): how many; the record still covers their offsets, so the stage goes on.
UNREAD_ITEMS = "unreadItems"
# The deadline index's kind for the time thresholds, how often they are looked at, and how
# many due channels a tick launches at most per partition.
KIND = "summary"
SUMMARY_CHECK_SECONDS = 1.0
SUMMARIES_PER_TICK = 200
# Summaries launched and not yet read back, at most: a batch falling due meanwhile keeps its
# index entry and waits for a tick with room, so a burst (a million channels going quiet
# together) is summarised at the summariser's pace instead of all held in memory at once.
SUMMARIES_IN_FLIGHT = 400


class InFlight(NamedTuple):
    """A channel's summary launched and not yet read back: the last offset it covers, and when
    it was launched if nothing pending came after its batch then (what comes later waits
    from then: `pending.trim`)."""

    through: int
    rest_since: datetime | None


def header_batch(raw: dict[str, Any] | None) -> PendingBatch:
    """A stored header (`header_of`) as a PendingBatch."""
    if not raw:
        return PendingBatch()
    since = raw.get("pending_since")
    spans: dict[str, list[int]] = raw.get("spans") or {}
    # Read on every message: built without validation from what `store` wrote.
    return PendingBatch.model_construct(
        items=[item_of(offset, spans.get(str(offset))) for offset in raw["offsets"]],
        pending_since=datetime.fromisoformat(since) if since else None,
    )


def header_of(batch: PendingBatch) -> dict[str, Any]:
    """What the pending table stores of a batch: its positions (`header_batch` reads it)."""
    return {
        "offsets": [item.offset for item in batch.items],
        "pending_since": batch.pending_since.isoformat() if batch.pending_since else None,
        "spans": {
            str(item.offset): [item.start, item.covers] for item in batch.items if item.covers > 1
        },
    }


# The pending table holds headers; the stage reads and writes batches, each decoded once.
HEADER_CODEC = Codec(encode=header_of, decode=header_batch)


def item_of(offset: int, span: list[int] | None) -> PendingItem:
    """A header's item: one message, or a compacted run `[first_offset, covers]`."""
    if span is None:
        return PendingItem.model_construct(offset=offset, first_offset=None, covers=1)
    return PendingItem.model_construct(offset=offset, first_offset=span[0], covers=span[1])


def wanted_of(items: Sequence[PendingItem]) -> Wanted:
    """What pending items stand for, to read back: their single messages, and the first
    MAX_COMPACTED_PARTS of each compacted run (`pending.compacted` shows no more)."""
    return Wanted(
        frozenset(item.offset for item in items if not item.compacted),
        tuple((item.start, item.offset, MAX_COMPACTED_PARTS) for item in items if item.compacted),
    )


class Summariser:
    """Pending batches, and the summaries of each channel on `chorus.summaries`."""

    def __init__(
        self,
        chorus: Runtime,
        writer: ContentSummariser[Message],
        clock: Clock = utc_now,
    ) -> None:
        self.chorus = chorus
        self.settings = chorus.settings
        self.writer = writer
        self.clock = clock
        # Per channel, the pending batch's header (offsets, pending_since, compacted spans)
        # and [partition, offset, last offset covered] of its latest summary, written once
        # per checkpoint (`streams.worker.checkpoint`).
        self.pending = chorus.channel_state.column("pending", HEADER_CODEC)
        self.summary = chorus.channel_state.column("summary")
        # When the channel's one entry in the deadline index is due (ms; None: none).
        self.entry = chorus.channel_state.column("summary-entry")
        self.followed = Followed(chorus, chorus.summaries, "record-summaries", self.on_record)
        self.latest: LatestBook[SummaryRecord] = LatestBook(
            "summary",
            self.followed,
            self.summary.get,
            chorus.reader(chorus.summaries.get_topic_name()),
            SummaryRecord.model_validate_json,
            chorus.cache("summaries-read", "small", 0.3),
        )
        self.bodies = LogBodies(
            chorus, MessageBodies(chorus.cache("summary-bodies", "bodies", 0.5))
        )
        self.index = Deadlines(chorus.deadlines, KIND)
        # Per channel, the summary handed to a summariser and not yet seen back on the
        # summaries topic: the next batch waits for it, so it builds on the summary it
        # follows. At most SUMMARIES_IN_FLIGHT channels.
        self.launched: dict[str, InFlight] = {}
        self.lots = chorus.lots()
        self.outbox = chorus.outbox(chorus.summaries)
        chorus.ownership.on_moved(self.moved)
        chorus.configs.listeners.append(self.configured)

    def configured(self, channel: str, partition: int) -> None:
        """The channel's thresholds may have changed: index its batch by them (an entry
        later than the new one fires and is moved; one sooner must be put)."""
        batch = self.batch_of(channel, partition)
        self.index_by(channel, self.due_at(channel, batch, partition), partition)

    def index_by(
        self,
        channel: str,
        at: datetime | None,
        partition: int,
        offset: int | None = None,
        topic: str | None = None,
    ) -> None:
        """The channel's batch falls due at `at` (None: never): its entry is replaced if that
        is sooner, else left to fire early and be moved (`Deadlines.sooner`)."""
        if at is None:
            return
        moved = self.index.sooner(
            channel, at, self.entry.get(channel, partition), partition, offset, topic
        )
        if moved is not None:
            self.entry.set(channel, moved, partition, offset, topic)

    def moved(self, gone: frozenset[int], taken: frozenset[int], _: frozenset[int]) -> None:
        """Partitions moved: what is in flight for them is another worker's now."""
        ownership = self.chorus.ownership
        for channel in list(self.launched):
            if ownership.partition_of(channel) in gone | taken:
                del self.launched[channel]

    async def narrative(self, channel: str) -> str | None:
        """What the channel's latest summary says was said (None before its first)."""
        partition = self.chorus.ownership.partition_of(channel)
        latest = (await self.latest.latest(channel, partition)).record
        if latest is None:
            return None
        return narrative_of(latest.text, latest.narrative) or None

    def covered_offset(self, channel: str, partition: int) -> int:
        found = self.summary.get(channel, partition)
        return int(found[2]) if found is not None and found[2] is not None else -1

    def thresholds(self, channel: str, partition: int) -> tuple[int, float]:
        """The channel's (of `partition`) message and time thresholds."""
        configs = self.chorus.configs
        return (
            configs.setting(channel, "summary_after_messages", partition),
            configs.setting(channel, "summary_after_seconds", partition),
        )

    def due_at(
        self, channel: str, batch: PendingBatch, partition: int, *, in_flight: bool = False
    ) -> datetime | None:
        """When `batch` (of the channel, of `partition`) falls due; by its time threshold
        alone while a summary of it is `in_flight`."""
        after_messages, after_seconds = self.thresholds(channel, partition)
        if in_flight:
            after_messages = sys.maxsize
        return due_at(batch, after_messages=after_messages, after_seconds=after_seconds)

    def in_flight_through(self, channel: str, partition: int) -> int:
        """The last offset of a batch being summarised (-1: none): compaction leaves it be."""
        flight = self.launched.get(channel)
        if flight is None or flight.through <= self.covered_offset(channel, partition):
            return -1
        return flight.through

    def log_read_for(
        self, batch: PendingBatch, partition: int, after_messages: int, after_seconds: float
    ) -> bool:
        """Whether the log is read far enough to summarise `batch`, due: at once by its
        message threshold; by its time threshold once the role has read the partition up to
        when it fell due (`Runtime.read_through`), as messages stamped before may be its."""
        at = due_at(batch, after_messages=after_messages, after_seconds=after_seconds)
        return (
            len(batch.items) >= after_messages
            or at is None
            or self.chorus.read_through(partition, at)
        )

    def batch_of(self, channel: str, partition: int) -> PendingBatch:
        batch: PendingBatch | None = self.pending.get(channel, partition)
        return batch if batch is not None else PendingBatch()

    async def messages_of(self, channel: str, batch: PendingBatch, partition: int) -> list[Message]:
        """What `batch` stands for, from memory or else the log (`streams.worker.bodies`)."""
        bodies = self.bodies.memory.of(channel)
        lacking = missing(batch, bodies)
        if lacking:
            wanted = wanted_of(lacking)
            bodies.update(await self.bodies.read_back(channel, partition, wanted, summarisable))
        messages = fill(batch, bodies)
        if len(messages) < len(batch.items):
            log.error(
                "%s of %s pending items of %s are not in the log any more (was its retention "
                "cut?); the summary covers their offsets without them",
                len(batch.items) - len(messages),
                len(batch.items),
                channel,
            )
        return messages

    def store(
        self,
        channel: str,
        batch: PendingBatch,
        partition: int,
        offset: int | None = None,
        topic: str | None = None,
    ) -> None:
        """The channel's pending batch is `batch` from now on: when it falls due is indexed
        if that moved sooner (`index_by`); while a summary of it is in flight, by its time
        threshold alone (the summary read back moves the batch on, and launches the next)."""
        self.pending.set(channel, batch, partition, offset, topic)
        in_flight = channel in self.launched
        self.index_by(
            channel,
            self.due_at(channel, batch, partition, in_flight=in_flight),
            partition,
            offset,
            topic,
        )

    async def on_message(self, message: Message, partition: int, offset: int) -> None:
        channel = message.channel
        if not summarisable(message):
            return
        now = self.clock()
        before = self.batch_of(channel, partition)
        batch = add(
            before,
            offset,
            covered_offset=self.covered_offset(channel, partition),
            max_pending=self.settings.summary_max_pending,
            now=now,
            in_flight_through=self.in_flight_through(channel, partition),
        )
        self.maybe_launch(channel, batch, partition, now)  # before `store`: in flight?
        if batch is not before:
            self.bodies.memory.keep(channel, partition, offset, message)
            self.store(channel, batch, partition, offset)

    def on_record(
        self, key: bytes | None, value: bytes | None, partition: int, offset: int
    ) -> None:
        """A record of chorus.summaries (as the role follows it): the channel's latest
        unless it covers less; it trims the batch it covers and launches the next when it is
        due. (`Followed.take` passes over one on another partition than its channel's.)"""
        if not key or value is None:
            return
        try:
            last = orjson.loads(value).get("last_offset")
        except orjson.JSONDecodeError:
            log.warning("ignoring a record of %s@%s that is not JSON", self.followed.name, offset)
            return
        if last is None:
            return
        channel = key.decode(errors="replace")
        topic = self.followed.name
        if covers_less(self.covered_offset(channel, partition), last):
            return
        self.latest.read(channel, partition, offset, value)  # what the next batch builds on
        self.summary.set(channel, [partition, offset, last], partition, offset, topic)
        flight = self.launched.get(channel)
        rest_since = None
        if flight is not None and flight.through <= last:
            del self.launched[channel]
            rest_since = flight.rest_since if flight.through == last else None
        before = self.batch_of(channel, partition)
        batch = trim(before, last, rest_since)
        self.bodies.memory.drop_through(channel, last)
        self.maybe_launch(channel, batch, partition, self.clock())  # before `store`
        if batch is not before:
            self.store(channel, batch, partition, offset, topic)

    def maybe_launch(
        self, channel: str, batch: PendingBatch, partition: int, now: datetime
    ) -> bool:
        """Summarise the channel's batch in a task of its own if it is due."""
        chosen = self.claim(channel, batch, partition, now)
        if chosen is None:
            return False
        self.lots.start(self.summarise(channel, chosen, partition))
        return True

    def claim(
        self, channel: str, batch: PendingBatch, partition: int, now: datetime
    ) -> PendingBatch | None:
        """The part of `batch` to summarise now (its first `summary_after_messages`), marked
        in flight, or None: not due, one in flight already, or the channel's latest summary
        not caught up with yet."""
        if self.in_flight_through(channel, partition) >= 0 or self.lots.stopped:
            return None
        if len(self.launched) >= SUMMARIES_IN_FLIGHT:  # its index entry brings it back
            return None
        if not self.followed.caught_up(partition):  # its latest summary may not be read yet
            return None
        after_messages, after_seconds = self.thresholds(channel, partition)
        if not due(batch, after_messages=after_messages, after_seconds=after_seconds, now=now):
            return None
        if not self.log_read_for(batch, partition, after_messages, after_seconds):
            return None  # its index entry brings it back
        chosen = next_batch(batch, after_messages)
        rest = len(chosen.items) < len(batch.items)
        self.launched[channel] = InFlight(chosen.last_offset, None if rest else now)
        return chosen

    async def summarise(self, channel: str, batch: PendingBatch, partition: int) -> None:
        try:
            messages = await self.messages_of(channel, batch, partition)
            previous = (await self.latest.latest(channel, partition)).record
            record = await summarise_batch(self.writer, channel, batch, messages, previous)
            await self.outbox.send((channel.encode(), record.to_bytes(), partition))
        except Exception:  # the default wiring falls back itself; this guards user wiring
            log.exception("summary of %s failed; the batch stays pending", channel)
            self.launched.pop(channel, None)

    async def check_time_thresholds(self, now: datetime) -> int:
        """Summarise the batches whose time threshold passed (the message threshold fires
        inline), from the index's due entries in the owned partitions: each partition's
        in one task, their bodies read back from the log together. How many. A tick reads
        at most SUMMARIES_PER_TICK batches per partition and launches none while
        SUMMARIES_IN_FLIGHT are in flight (`lot_due`)."""
        launched = 0
        for partition in sorted(self.chorus.ownership.owned_partitions()):
            room = min(SUMMARIES_PER_TICK, SUMMARIES_IN_FLIGHT - len(self.launched))
            if room <= 0:
                break
            if not self.followed.caught_up(partition):
                continue
            lot = await self.lot_due(partition, now, room)
            if lot:
                self.lots.start(self.summarise_lot(partition, lot))
                launched += len(lot)
        return launched

    async def lot_due(
        self, partition: int, now: datetime, room: int
    ) -> list[tuple[str, PendingBatch]]:
        """Up to `room` batches of `partition` due by their time at `now`, claimed. The index
        is read DUE_ENTRIES_PER_SLICE entries at a time, each slice after the last entry of
        the one before, the event loop given back after each (its batches read and
        decoded). The entries of summaries in flight (in any partition) are passed over,
        their summary read back moves them on: at most `room` entries more than are in
        flight are read."""
        lot: list[tuple[str, PendingBatch]] = []
        unread = room + len(self.launched)
        after: Due | None = None
        while unread > 0:
            asked = min(DUE_ENTRIES_PER_SLICE, unread)
            entries = self.index.due(partition, now, asked, after=after)
            if not entries:
                break
            after = entries[-1]
            unread = unread - asked if len(entries) == asked else 0  # a short slice: the last
            for entry in entries:
                if entry.channel in self.launched:
                    continue
                if not self.chorus.read_through(partition, entry.at):
                    return lot  # nor the later entries: they wait for the log to be read
                batch = self.batch_of(entry.channel, partition)
                at = self.due_at(entry.channel, batch, partition)
                if at is None or at > now:  # emptied or moved on: the entry moves with it
                    self.index.move(entry, partition, at)
                    moved_to = None if at is None else due_ms(at)
                    self.entry.set(entry.channel, moved_to, partition)
                    continue
                # The entry stays until the summary read back moves the batch on: a worker
                # that dies meanwhile leaves it to the next one.
                chosen = self.claim(entry.channel, batch, partition, now)
                if chosen is not None:
                    lot.append((entry.channel, chosen))
                if len(lot) >= room:
                    return lot
            await asyncio.sleep(0)
        return lot

    async def summarise_lot(self, partition: int, lot: list[tuple[str, PendingBatch]]) -> None:
        """Summarise `lot`'s batches of `partition`: the single messages memory lacks read
        back from the log together (`LogBodies.read_back_many`), then each batch."""
        lacking: dict[str, frozenset[int]] = {}
        for channel, batch in lot:
            singles = wanted_of(missing(batch, self.bodies.memory.of(channel))).singles
            if singles:
                lacking[channel] = singles
        if lacking:
            try:
                await self.bodies.read_back_many(partition, lacking, summarisable)
            except Exception:  # each batch reads what it still lacks by itself
                log.exception("reading %d pending batches back failed", len(lacking))
        await asyncio.gather(*(self.summarise(channel, batch, partition) for channel, batch in lot))


async def summarise_batch(
    summariser: ContentSummariser[Message],
    channel: str,
    batch: PendingBatch,
    messages: list[Message],
    previous: SummaryRecord | None,
    at: datetime | None = None,
) -> SummaryRecord:
    """The record that folds `batch` (whose `messages` are `fill`ed) into `previous`: what
    the stage publishes (updated now, or `at`). Items without their messages (`fill` left
    them out) are counted in `unreadItems`; with none, the previous text stands."""
    earlier = (
        SummaryResult(
            text=narrative_of(previous.text, previous.narrative),
            annotations=previous.annotations,
        )
        if previous
        else None
    )
    if messages:
        result = await summariser.summarise([as_narrated(m) for m in messages], earlier)
    else:
        result = earlier or SummaryResult(text="")
    annotations = dict(result.annotations)
    annotations.pop("droppedItems", None)  # written before compaction replaced dropping
    compacted = sum(item.covers for item in batch.items if item.covers > 1)
    unread = len(batch.items) - len(messages)
    for key, count in ((COMPACTED_ITEMS, compacted), (UNREAD_ITEMS, unread)):
        if count:
            annotations[key] = str(count)
        else:
            annotations.pop(key, None)
    return SummaryRecord(
        channel=channel,
        text=result.text,
        narrative=result.text,
        annotations=annotations,
        first_offset=batch.first_offset,
        last_offset=batch.last_offset,
        first_message_id=messages[0].id if messages else None,
        last_message_id=messages[-1].id if messages else None,
        total_messages=(previous.total_messages if previous else 0) + batch.covers,
        **({"updated_at": at} if at else {}),
    )


def summariser_from_settings(
    settings: Settings, client: ChatClient | None
) -> ContentSummariser[Message]:
    return default_summariser(
        client,
        settings.summary_small_threshold,
        settings.summary_medium_threshold,
        context_tokens=settings.llm_context_tokens,
        max_tokens=settings.llm_max_tokens,
        summary_max_tokens=settings.summary_max_tokens,
    )


def install(chorus: Runtime, clock: Clock = utc_now) -> Summariser:
    """The summaries stage (the context role): the follower of `chorus.summaries`
    and the timer of the time thresholds; the feed hands it the messages
    (`Summariser.on_message`)."""
    from streams.llm.client import client_from_settings
    from streams.llm.metering import MeteredChatClient

    client = client_from_settings(chorus.settings)
    summariser = Summariser(
        chorus,
        summariser_from_settings(
            chorus.settings, MeteredChatClient(client, chorus.meter, "summary") if client else None
        ),
        clock,
    )
    every(
        chorus.app,
        chorus.meter,
        SUMMARY_CHECK_SECONDS,
        "summary-time-thresholds",
        summariser.check_time_thresholds,
        clock,
    )
    return summariser
