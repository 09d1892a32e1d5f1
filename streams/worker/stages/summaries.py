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
summary, is read back from that compacted topic (`streams.kafka.follow.LatestBook`, the
partitions this worker owns, from their beginning when it takes one over): the topic is
the one copy, no table keeps another. A summary read trims the pending batch it covers
(the pending batches are checkpointed); no batch is summarised while its channel's
partition of the topic is still being read back, so a summary always builds on the latest.

The pending batch is positions only (offsets, compacted spans): the log is the one copy of
the messages (`streams.worker.bodies`: kept in memory while pending, else read back), so a
message costs no changelog write of its body and no tombstone once summarised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from projections.model import Message, utc_now
from projections.summarise import (
    ChatClient,
    ContentSummariser,
    SummaryResult,
    default_summariser,
)
from projections.summarise.pending import (
    PendingBatch,
    PendingItem,
    add,
    as_narrated,
    due,
    fill,
    next_batch,
    summarisable,
    trim,
)
from projections.summarise.state import narrative_of
from streams.kafka.follow import Follower, LatestBook
from streams.records import SummaryRecord
from streams.settings import Settings
from streams.worker.bodies import LogBodies
from streams.worker.checkpoint import Codec
from streams.worker.latest import summary_goes_back

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


class Summariser:
    """Pending batches, summaries and the latest summary of each channel as
    `chorus.summaries` says (what the next batch builds on)."""

    def __init__(self, chorus: Runtime, summariser: ContentSummariser[Message]) -> None:
        self.chorus = chorus
        self.settings = chorus.settings
        self.summariser = summariser
        topic = chorus.summaries.get_topic_name()
        self.latest: LatestBook[SummaryRecord] = LatestBook(
            topic,
            SummaryRecord.model_validate_json,
            chorus.reader(topic),
            goes_back=summary_goes_back,
            on_dropped=chorus.meter.latest_dropped.labels(topic).inc,
            on_latest=self.on_summary,
        )
        # Per channel, the last offset its latest summary covers (the book may drop the
        # record itself from memory): forgotten with the channel's partition (`moved`).
        self.covered: dict[str, tuple[int, int]] = {}
        # Per channel, the pending batch's header (offsets, pending_since, compacted spans),
        # written once per checkpoint (`streams.worker.checkpoint`).
        self.pending = chorus.channel_state.column("pending", HEADER_CODEC)
        self.bodies = LogBodies(chorus)
        # Last offset handed to a summariser and not yet seen back on the summaries topic:
        # the next batch waits for it, so it builds on the summary it follows.
        self.launched: dict[str, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.outbox = chorus.outbox(chorus.summaries)
        # channel -> when its pending batch falls due (count threshold reached: at once).
        self.due_at: dict[str, datetime] = {}
        self.rescan = chorus.checkpoint.rescan()

    def moved(self, owned: Collection[int]) -> None:
        """This worker owns the messages partitions `owned` now."""
        self.covered = {c: at for c, at in self.covered.items() if at[0] in owned}

    def narrative(self, channel: str) -> str | None:
        """What the channel's latest summary says was said (None before its first, or while
        the book has dropped it from memory: past LATEST_KEPT_BYTES)."""
        kept = self.latest.records.get(channel)
        if kept is None:
            return None
        latest = kept[0]
        return narrative_of(latest.text, latest.narrative) or None

    def covered_offset(self, channel: str) -> int:
        found = self.covered.get(channel)
        return found[1] if found is not None else -1

    def thresholds(self, channel: str) -> tuple[int, float]:
        configs = self.chorus.configs
        return (
            configs.setting(channel, "summary_after_messages"),
            configs.setting(channel, "summary_after_seconds"),
        )

    def in_flight_through(self, channel: str) -> int:
        """The last offset of a batch being summarised (-1: none): compaction leaves it be."""
        launched = self.launched.get(channel, -1)
        return launched if launched > self.covered_offset(channel) else -1

    def batch_of(self, channel: str) -> PendingBatch:
        batch: PendingBatch | None = self.pending.get(channel)
        return batch if batch is not None else PendingBatch()

    async def messages_of(self, channel: str, batch: PendingBatch, partition: int) -> list[Message]:
        """What `batch` stands for, from memory or else the log (`streams.worker.bodies`)."""
        bodies = await self.bodies.of(channel, partition, batch, summarisable)
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

    def store(self, channel: str, batch: PendingBatch, partition: int) -> None:
        self.pending.set(channel, batch, partition)
        self.index(channel, batch)

    def index(self, channel: str, batch: PendingBatch) -> None:
        if not batch.items:
            self.due_at.pop(channel, None)
            return
        after_messages, after_seconds = self.thresholds(channel)
        wait = 0.0 if len(batch.items) >= after_messages else after_seconds  # count reached
        self.due_at[channel] = (batch.pending_since or utc_now()) + timedelta(seconds=wait)

    async def on_message(self, message: Message, partition: int, offset: int) -> None:
        channel = message.channel
        if not summarisable(message):
            return
        before = self.batch_of(channel)
        batch = add(
            before,
            offset,
            covered_offset=self.covered_offset(channel),
            max_pending=self.settings.summary_max_pending,
            now=utc_now(),
            in_flight_through=self.in_flight_through(channel),
        )
        if batch is not before:
            self.bodies.memory.keep(channel, offset, message)
            self.store(channel, batch, partition)
        self.maybe_launch(channel, batch, partition, utc_now())

    def on_summary(self, record: SummaryRecord, partition: int) -> None:
        """A summary read from the topic (the latest: the book keeps no older one): trim the
        batch it covers and launch the next when it is due."""
        channel = record.channel
        if record.last_offset is None:
            return
        self.covered[channel] = (partition, record.last_offset)
        before = self.batch_of(channel)
        batch = trim(before, record.last_offset)
        if batch is not before:
            self.store(channel, batch, partition)
        self.bodies.memory.drop_through(channel, record.last_offset)
        self.maybe_launch(channel, batch, partition, utc_now())

    def maybe_launch(
        self, channel: str, batch: PendingBatch, partition: int, now: datetime
    ) -> bool:
        if self.launched.get(channel, -1) > self.covered_offset(channel):
            return False
        if partition in self.latest.restoring:  # its latest summary may not be read yet
            return False
        after_messages, after_seconds = self.thresholds(channel)
        if not due(batch, after_messages=after_messages, after_seconds=after_seconds, now=now):
            return False
        chosen = next_batch(batch, after_messages)
        self.launched[channel] = chosen.last_offset
        task = asyncio.ensure_future(self.summarise(channel, chosen, partition))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    async def summarise(self, channel: str, batch: PendingBatch, partition: int) -> None:
        try:
            messages = await self.messages_of(channel, batch, partition)
            previous = (await self.latest.latest(channel, partition)).record
            record = await summarise_batch(self.summariser, channel, batch, messages, previous)
            await self.outbox.send((channel.encode(), record.to_bytes(), partition))
        except Exception:  # the default wiring falls back itself; this guards user wiring
            log.exception("summary of %s failed; the batch stays pending", channel)
            self.launched.pop(channel, None)

    async def check_time_thresholds(self) -> None:
        """Launch batches whose time threshold passed (the message threshold fires inline).

        Only channels the index says are due are loaded; a full scan refreshes the index
        from time to time (`streams.worker.checkpoint.Rescan`).
        """
        now = utc_now()
        if self.rescan.due():
            self.due_at.clear()
            for channel, batch in list(self.pending.items()):
                if batch is not None and batch.items:
                    self.index(channel, batch)
        for channel in [c for c, at in self.due_at.items() if at <= now]:
            partition = self.chorus.messages_partition(channel)
            if partition is not None:
                self.maybe_launch(channel, self.batch_of(channel), partition, now)


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


def install(chorus: Runtime) -> Summariser:
    """The summaries stage (the context role): the follower of `chorus.summaries` and the
    timer of the time thresholds; the feed hands it the messages (`Summariser.on_message`)."""
    from streams.llm.client import client_from_settings
    from streams.llm.metering import MeteredChatClient

    client = client_from_settings(chorus.settings)
    summariser = Summariser(
        chorus,
        summariser_from_settings(
            chorus.settings, MeteredChatClient(client, chorus.meter, "summary") if client else None
        ),
    )

    follower = Follower(
        chorus.settings, chorus.servers, [summariser.latest], chorus.owned_partitions
    )
    chorus.on_messages_assigned(summariser.moved)

    @chorus.app.task
    async def read_the_latest_summaries() -> None:
        await follower.run()

    @chorus.app.timer(1.0, name="summary-time-thresholds")
    async def time_thresholds() -> None:
        await summariser.check_time_thresholds()

    return summariser
