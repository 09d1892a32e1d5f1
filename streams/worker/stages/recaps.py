"""The context role's recaps stage: when a channel goes quiet, a cheap secondary model
writes a short recap.

When each channel's recap falls due is the recap status's (`projections.recap.phase`), kept
in the changelog-backed channel state (`Runtime.channel_state`, beside the summaries'
pending batch), so a restarted or rebalanced worker still fires it on time. The deadline
index (`streams.worker.deadlines`, kind `recap`) says which channels to look at: an entry is
put when a countdown starts (a quiet channel's first message), when a retry is scheduled,
and when a generation starts (to find it orphaned if its worker dies); a countdown that
moves later leaves its entry to fire early and be moved, so a busy channel costs an index
write per debounce, not per message. The timer `recap-deadlines` takes the entries due,
newest first, in lots (RECAP_LOT, RECAP_LOTS at once): a lot's windows are read back from
the log together, its recaps written and produced together; a burst of channels going
quiet together waits in the index and never stalls the role.

The furnace's budget (CHORUS_RECAP_LLM_PER_MINUTE): with a model configured, at most that
many recaps a minute are written by it; the others due meanwhile are written extractive
(no model), counted (`chorus_recaps_over_budget_total`), never dropped. Every phase change
travels through the compacted `chorus.recaps` topic before the channel state records it
(read back as the role follows `chorus.recaps`), as summaries do; an extractive recap is one
record (COMPLETED), a model's two (GENERATING, then COMPLETED or ERROR).

The recent window is positions in the status record; its messages are kept in memory
(cut as the transcript reads them) and read back from `chorus.messages` when memory no
longer has them (`streams.worker.bodies`): no message body goes to a changelog.

The stage owns the recaps: their status, the deadlines and the generation. A recap record
is history only (what was said; `extractive_recap` or a model told no commitments): the
goal, what is open and the next step are rendered from the fold beside it when a view is
read (`projections.recap.state`, in the fold role), so a recap can never say a commitment
is open after it ended. The stage reads no fold and no other role.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from projections.model import Message, utc_now
from projections.recap import (
    RecapPhase,
    RecapStatus,
    build_recap_prompt,
    clean_recap,
    due,
    extractive_recap,
    is_conversation_change,
    on_generation_failed,
    on_generation_started,
    on_generation_succeeded,
    on_message,
    presentation_transcript,
)
from projections.recap.phase import wakes_at
from projections.recap.title import channel_keyphrases, channel_title
from projections.recap.window import RECAP_WINDOW, windowed_message
from projections.summarise.llm import ChatClient, LlmError
from projections.text.titles import title
from streams.records import RecapRecord
from streams.worker.bodies import LogBodies, MessageBodies, Wanted
from streams.worker.checkpoint import Codec
from streams.worker.deadlines import DUE_ENTRIES_PER_SLICE, Deadlines, Due
from streams.worker.followed import Followed, LatestBook
from streams.worker.timers import Clock, every

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# A channel's latest summary narrative (None before its first summary).
NarrativeOf = Callable[[str], Awaitable[str | None]]

KIND = "recap"
RECAP_MAX_TOKENS = 160
RETRY_BACKOFF_SECONDS = 2.0
RETRY_MAX_BACKOFF_SECONDS = 300.0
# Recaps a tick takes for writing at once (a lot: their windows read back together, their
# records produced together), and lots written at once; more due wait in the index.
RECAP_LOT = 64
RECAP_LOTS = 2
# Recaps taken and not read back yet, at most: while so many are in flight a tick takes
# none, and the channels in flight are passed over without reading their status, so a tick
# costs what it takes, not what is in flight.
RECAPS_IN_FLIGHT = 4 * RECAP_LOT
# A generation read back as started and not ended after this long (beyond the model's own
# time and retries) is orphaned: the worker that started it died or gave the channel up.
ORPHANED_AFTER_SECONDS = 60.0


class ChannelRecap(BaseModel):
    """What the channel state's recap column holds per channel: the phase machine, the
    recent window's positions (its messages are the stage's `bodies`: memory, else the log)
    and where its latest recap record is ([partition, offset] on chorus.recaps)."""

    status: RecapStatus = RecapStatus()
    window_offsets: list[int] = []
    message_count: int = 0
    # The title of the channel's first message that says something (`title` of it, at most
    # 60 characters): the title until a phrase repeats.
    opening: str | None = None
    latest: list[int] | None = None


# The stage reads and writes ChannelRecap models, each decoded once and encoded once per
# checkpoint (see streams.worker.checkpoint).
RECAP_CODEC = Codec(
    encode=lambda recap: recap.model_dump(mode="json"),
    decode=ChannelRecap.model_validate,
)


def with_message(
    recap: ChannelRecap, message: Message, offset: int, debounce: float, now: datetime
) -> ChannelRecap:
    """The recap after one more message: the phase, the window's positions and the counts,
    no text work (titles and keyphrases are read when a recap or a view asks)."""
    status = on_message(
        recap.status,
        offset=offset,
        at=now,
        debounce=debounce,
        changes_conversation=is_conversation_change(message),
    )
    if status is recap.status:
        return recap
    if not is_conversation_change(message):
        return recap.model_copy(update={"status": status})
    window_offsets = [*recap.window_offsets, offset][-RECAP_WINDOW:]
    # No text work here beyond the opening (once): titles and keyphrases are read from the
    # window when a recap or a title is asked for (`channel_title`).
    opening = recap.opening
    if opening is None and message.content:
        # Kept as the title it stands in for: this record is written with every message.
        opening = title({}, fallback=message.content)
    return recap.model_copy(
        update={
            "status": status,
            "window_offsets": window_offsets,
            "message_count": recap.message_count + 1,
            "opening": opening,
        }
    )


async def write_recap(
    client: ChatClient | None,
    messages: Sequence[Message],
    summary: str | None,
    keyphrases: dict[str, list[int]] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The recap text (history only: the state part is rendered when it is read) and its
    cost fields; extractive when no model is given. The model gets the same cleaned input:
    no ids, no backchannel."""
    if client is None:
        return extractive_recap(messages, keyphrases, summary), {"tier": "extractive"}
    system, user = build_recap_prompt(
        presentation_transcript(messages, window=RECAP_WINDOW), summary
    )
    completion = await client.complete(system, user, RECAP_MAX_TOKENS)
    return clean_recap(completion.text), {
        "tier": "synthesised",
        "model": completion.model,
        "tokens_in": completion.prompt_tokens,
        "tokens_out": completion.completion_tokens,
        "latency_ms": completion.latency_ms,
    }


class LlmBudget:
    """At most `per_minute` LLM recaps a minute (a token bucket refilled continuously)."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self.tokens = float(per_minute)
        self.at = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.per_minute, self.tokens + (now - self.at) * self.per_minute / 60)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class Recapper:
    def __init__(
        self,
        chorus: Runtime,
        client: ChatClient | None,
        narrative: NarrativeOf,
        clock: Clock = utc_now,
    ) -> None:
        self.chorus = chorus
        self.settings = chorus.settings
        self.client = client
        self.narrative = narrative
        self.clock = clock
        self.budget = LlmBudget(chorus.settings.recap_llm_per_minute)
        # Written once per checkpoint (`streams.worker.checkpoint`).
        self.table = chorus.channel_state.column("recap", RECAP_CODEC)
        self.bodies = LogBodies(
            chorus, MessageBodies(chorus.cache("recap-windows", "bodies", 0.5)), windowed_message
        )
        self.followed = Followed(chorus, chorus.recaps, "record-recaps", self.on_recap)
        self.latest: LatestBook[RecapRecord] = LatestBook(
            "recap",
            self.followed,
            lambda channel, partition: self.recap_of(channel, partition).latest,
            chorus.reader(chorus.recaps.get_topic_name()),
            RecapRecord.model_validate_json,
            chorus.cache("recaps-read", "small", 0.3),
        )
        self.index = Deadlines(chorus.deadlines, KIND)
        # channel -> the generation taken for writing here and not read back yet: in flight
        # only (bounded by the lots being written), forgotten with its partition.
        self.generating: dict[str, int] = {}
        self.lots = chorus.lots()
        self.outbox = chorus.outbox(chorus.recaps)
        self.orphaned_after = timedelta(
            seconds=ORPHANED_AFTER_SECONDS
            + chorus.settings.llm_timeout_seconds * (chorus.settings.llm_max_retries + 1)
        )
        chorus.ownership.on_moved(self.moved)

    def moved(self, gone: frozenset[int], taken: frozenset[int], _: frozenset[int]) -> None:
        """Partitions moved: a generation in flight for them is another worker's now (its
        GENERATING status, read back there, is found orphaned if nobody ends it)."""
        ownership = self.chorus.ownership
        for channel in list(self.generating):
            if ownership.partition_of(channel) in gone | taken:
                del self.generating[channel]

    def store(
        self,
        channel: str,
        recap: ChannelRecap,
        partition: int,
        offset: int,
        topic: str | None = None,
    ) -> None:
        """Write the channel's recap (made by the record at `partition`@`offset` of `topic`,
        chorus.messages unless named)."""
        self.table.set(channel, recap, partition, offset, topic)

    async def window_of(self, channel: str, recap: ChannelRecap, partition: int) -> list[Message]:
        """The window's messages, oldest first: from memory, else read back from the log."""
        bodies = self.bodies.memory.of(channel)
        lacking = frozenset(o for o in recap.window_offsets if o not in bodies)
        if lacking:
            read = await self.bodies.read_back(
                channel, partition, Wanted(lacking), is_conversation_change
            )
            bodies.update(read)
        return [bodies[offset] for offset in recap.window_offsets if offset in bodies]

    def recap_of(self, channel: str, partition: int) -> ChannelRecap:
        recap: ChannelRecap | None = self.table.get(channel, partition)
        return recap if recap is not None else ChannelRecap()

    async def on_message(self, message: Message, partition: int, offset: int) -> None:
        channel = message.channel
        before = self.recap_of(channel, partition)
        debounce = self.chorus.configs.setting(channel, "recap_debounce_seconds", partition)
        after = with_message(before, message, offset, debounce, self.clock())
        if after is before:
            return
        if after.message_count > before.message_count:
            memory = self.bodies.memory
            memory.keep(channel, partition, offset, windowed_message(message))
            memory.drop_through(channel, after.window_offsets[0] - 1)
        self.store(channel, after, partition, offset)
        if before.status.phase is not RecapPhase.PENDING and after.status.due_at is not None:
            self.index.put(channel, after.status.due_at, partition, offset)  # a countdown starts

    def on_recap(self, key: bytes | None, value: bytes | None, partition: int, offset: int) -> None:
        """A record read back from chorus.recaps, at `partition`@`offset`."""
        try:
            record = RecapRecord.model_validate_json(value or b"")
        except ValidationError as error:
            log.warning("ignoring an invalid record on the recaps topic: %s", error)
            return
        channel = record.channel
        if key is not None and key != channel.encode():  # filed by the key's partition
            log.warning(
                "ignoring the recap of %r at %s@%s: its key is %r",
                channel,
                self.followed.name,
                offset,
                key.decode(errors="replace"),
            )
            return
        recap = self.recap_of(channel, partition)
        now = self.clock()
        status = recap.status
        topic = self.followed.name
        if record.phase == RecapPhase.GENERATING:
            status = on_generation_started(status, now)
            if status.phase is RecapPhase.GENERATING:
                self.index.put(channel, now + self.orphaned_after, partition, offset, topic)
        elif record.phase == RecapPhase.COMPLETED:
            started = on_generation_started(status, now)  # an extractive recap: one record
            status = on_generation_succeeded(started, record.generation)
            if status is started:
                status = recap.status
        elif record.phase == RecapPhase.ERROR:
            status = on_generation_failed(
                status,
                now,
                record.error or "unknown error",
                RETRY_BACKOFF_SECONDS,
                RETRY_MAX_BACKOFF_SECONDS,
                generation=record.generation,
            )
            retry = wakes_at(status)
            if retry is not None:
                self.index.put(channel, retry, partition, offset, topic)
        if record.phase != RecapPhase.GENERATING and self.generating.get(channel, -1) <= (
            record.generation
        ):
            self.generating.pop(channel, None)
        latest = recap.latest if record.phase == RecapPhase.GENERATING else [partition, offset]
        if record.phase != RecapPhase.GENERATING and value is not None:
            self.latest.read(channel, partition, offset, value)  # what the next recap reads
        updated = recap.model_copy(update={"status": status, "latest": latest})
        self.store(channel, updated, partition, offset, topic)

    async def check_deadlines(self, now: datetime) -> int:
        """Take the recaps due in the owned partitions, the newest activity first, into a
        lot of at most RECAP_LOT (more due wait in the index), moving the entries that fired
        early or for nothing, and start writing the lot; at most RECAP_LOTS lots are written
        at once, and none while RECAPS_IN_FLIGHT are in flight. Entries in flight are passed
        over unread; the event loop is given back every DUE_ENTRIES_PER_SLICE entries read.
        How many were taken."""
        if self.lots.stopped:
            return 0
        if len(self.lots) >= RECAP_LOTS or len(self.generating) >= RECAPS_IN_FLIGHT:
            self.chorus.meter.recaps_deferred.inc()
            return 0
        candidates: list[tuple[Due, int]] = []
        for partition in sorted(self.chorus.ownership.owned_partitions()):
            candidates.extend(
                (entry, partition)
                for entry in self.index.due(
                    partition, now, RECAP_LOT + len(self.generating), newest_first=True
                )
                if entry.channel not in self.generating  # its record read back moves it on
            )
            await asyncio.sleep(0)
        candidates.sort(key=lambda found: found[0].at, reverse=True)
        lot: list[tuple[str, int]] = []
        room = min(RECAP_LOT, RECAPS_IN_FLIGHT - len(self.generating))
        for read, (entry, partition) in enumerate(candidates, start=1):
            if len(lot) >= room:
                self.chorus.meter.recaps_deferred.inc()
                break
            if entry.channel not in self.generating and self.take(entry, partition, now):
                lot.append((entry.channel, partition))
            if read % DUE_ENTRIES_PER_SLICE == 0:
                await asyncio.sleep(0)
        if lot:
            self.lots.start(self.write_lot(lot))
        self.chorus.meter.recap_queue.set(self.in_flight())
        return len(lot)

    def in_flight(self) -> int:
        """Recaps taken for writing, not read back yet."""
        return len(self.generating)

    def take(self, entry: Due, partition: int, now: datetime) -> bool:
        channel = entry.channel
        status = self.recap_of(channel, partition).status
        orphaned = status.phase is RecapPhase.GENERATING
        if not (orphaned or due(status, now)):
            self.index.move(entry, partition, wakes_at(status))
            return False
        # The entry stays until the recap read back moves the status on (then it is moved
        # or removed as above): a worker that dies meanwhile leaves it to the next one.
        self.generating[channel] = status.generation
        return True

    async def write_lot(self, lot: list[tuple[str, int]]) -> None:
        """Write the recaps of `lot`: the windows memory lacks read back from the log
        together (`LogBodies.read_back_many`: channels whose messages sit together cost one
        read), then each recap, their records in one produce request or a few."""
        lacking: dict[int, dict[str, frozenset[int]]] = {}
        for channel, partition in lot:
            kept = self.bodies.memory.of(channel)
            window = self.recap_of(channel, partition).window_offsets
            missing = frozenset(o for o in window if o not in kept)
            if missing:
                lacking.setdefault(partition, {})[channel] = missing
        try:
            for partition, wanted in lacking.items():
                await self.bodies.read_back_many(partition, wanted, is_conversation_change)
        except Exception:  # each recap reads what it still lacks by itself
            log.exception("reading %d recap windows back failed", len(lot))
        await asyncio.gather(
            *(
                self.generate(channel, self.recap_of(channel, partition), partition)
                for channel, partition in lot
            )
        )
        self.chorus.meter.recap_queue.set(self.in_flight())

    async def generate(self, channel: str, recap: ChannelRecap, partition: int) -> None:
        client = self.client if self.client is not None and self.budget.take() else None
        if self.client is not None and client is None:
            self.chorus.meter.recaps_over_budget.inc()
        try:
            summary = await self.narrative(channel)
            window = await self.window_of(channel, recap, partition)
            keyphrases = channel_keyphrases(window, summary)  # counted once: title and text
            previous = (await self.latest.latest(channel, partition)).record
            base = RecapRecord(
                channel=channel,
                text=previous.text if previous else None,
                narrative=previous.narrative if previous else None,
                phase=RecapPhase.GENERATING,
                covered_offset=recap.status.covered_offset,
                generation=recap.status.generation,
                title=channel_title(window, recap.opening, summary, keyphrases),
            )
            if client is not None:  # a model's answer takes a while: say it is coming
                await self.publish(base, partition)
        except Exception:
            log.exception("recap of %s failed", channel)
            self.generating.pop(channel, None)
            return
        try:
            text, cost = await write_recap(client, window, summary, keyphrases)
            self.chorus.meter.recaps.labels(cost["tier"]).inc()
            done = base.model_copy(
                update={
                    "text": text,
                    "narrative": text,
                    "phase": RecapPhase.COMPLETED,
                    "generated_at": utc_now(),
                    **cost,
                }
            )
            await self.publish(done, partition)
        except LlmError as error:  # the model failed or its answer was unusable
            failed = base.model_copy(update={"phase": RecapPhase.ERROR, "error": str(error)[:300]})
            await self.publish(failed, partition)
        except Exception:
            log.exception("recap of %s failed", channel)
            self.generating.pop(channel, None)

    async def publish(self, record: RecapRecord, partition: int) -> None:
        await self.outbox.send((record.channel.encode(), record.to_bytes(), partition))


def install(chorus: Runtime, narrative: NarrativeOf, clock: Clock = utc_now) -> Recapper:
    """The recap stage (the context role); `narrative` is what the channel's latest summary
    says was said (handed over by the composition root: no stage imports another)."""
    from streams.llm.client import client_from_settings
    from streams.llm.metering import MeteredChatClient

    client = client_from_settings(chorus.settings, secondary=True)
    recapper = Recapper(
        chorus,
        MeteredChatClient(client, chorus.meter, "recap") if client else None,
        narrative,
        clock,
    )

    every(
        chorus.app,
        chorus.meter,
        chorus.settings.recap_check_seconds,
        "recap-deadlines",
        recapper.check_deadlines,
        clock,
    )
    return recapper
