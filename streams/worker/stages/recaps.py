"""The context role's recaps stage: when a channel goes quiet, a cheap secondary model
writes a short recap.

Deadlines live in the changelog-backed channel state (`Runtime.channel_state`, the recap
status beside the summaries' pending batch), so a restarted or rebalanced worker still
fires them on time. A timer checks the channels this worker owns; generation runs in a
task, and every phase change travels through the compacted `chorus.recaps` topic before
the channel state records it (read back by the agent `record-recaps`), as summaries do.

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
from collections.abc import Callable, Sequence
from datetime import datetime
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
from projections.recap.title import channel_keyphrases, channel_title
from projections.summarise.llm import ChatClient, LlmError
from projections.summarise.pending import PendingBatch, PendingItem
from projections.text.lines import cut
from projections.text.titles import title
from streams.records import RecapRecord
from streams.worker.bodies import LogBodies, MessageBodies
from streams.worker.checkpoint import Codec

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

RECAP_WINDOW = 20
# The transcript shows at most 280 characters of a message; the window keeps a little more
# so that truncation still says "…", and only what the transcript reads of a payload.
WINDOW_CONTENT_CHARS = 300
WINDOW_PAYLOAD_KEYS = ("tool", "name")
# A channel's latest summary narrative (None before its first summary).
NarrativeOf = Callable[[str], str | None]

RECAP_MAX_TOKENS = 160
RETRY_BACKOFF_SECONDS = 2.0
RETRY_MAX_BACKOFF_SECONDS = 300.0
# Windows kept in memory: RECAP_WINDOW cut messages for each of about 2,500 channels.
WINDOW_KEPT_MESSAGES = 50_000
WINDOW_KEPT_CHARS = 16 * 1024 * 1024


class ChannelRecap(BaseModel):
    """What the channel state's recap column holds per channel: the phase machine, the
    recent window's positions (its messages are the stage's `bodies`: memory, else the log)
    and the latest recap record."""

    status: RecapStatus = RecapStatus()
    window_offsets: list[int] = []
    message_count: int = 0
    # The title of the channel's first message that says something (`title` of it, at most
    # 60 characters): the title until a phrase repeats.
    opening: str | None = None
    latest: RecapRecord | None = None


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


def windowed_message(message: Message) -> Message:
    """The part of a message the recap transcript uses, so that windows in memory stay
    small. Cut content ends with "…", so a reader of the window (the agent context) can
    tell it is not the whole message."""
    payload = message.payload or {}
    kept = {key: payload[key] for key in WINDOW_PAYLOAD_KEYS if key in payload}
    content = message.content
    if content is not None:
        content = cut(content, WINDOW_CONTENT_CHARS)
    return message.model_copy(update={"content": content, "payload": kept or None})


async def write_recap(
    client: ChatClient | None,
    messages: Sequence[Message],
    summary: str | None,
    keyphrases: dict[str, list[int]] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The recap text (history only: the state part is rendered when it is read) and its
    cost fields; extractive when no model is configured. The model gets the same cleaned
    input: no ids, no backchannel."""
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


class Recapper:
    def __init__(
        self,
        chorus: Runtime,
        client: ChatClient | None,
        narrative: NarrativeOf,
    ) -> None:
        self.chorus = chorus
        self.settings = chorus.settings
        self.client = client
        self.narrative = narrative
        # Written once per checkpoint (`streams.worker.checkpoint`).
        self.table = chorus.channel_state.column("recap", RECAP_CODEC)
        self.bodies = LogBodies(
            chorus, MessageBodies(WINDOW_KEPT_MESSAGES, WINDOW_KEPT_CHARS), windowed_message
        )
        self.generating: dict[str, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.outbox = chorus.outbox(chorus.recaps)
        # channel -> its recap status, for the deadline timer: kept by every write, rebuilt
        # from the table by `rescan`.
        self.statuses: dict[str, RecapStatus] = {}
        self.rescan = chorus.checkpoint.rescan()

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
        self.statuses[channel] = recap.status

    async def window_of(self, channel: str, recap: ChannelRecap) -> list[Message]:
        """The window's messages, oldest first: from memory, else read back from the log."""
        batch = PendingBatch(items=[PendingItem(offset=o) for o in recap.window_offsets])
        partition = self.chorus.messages_partition(channel)
        if partition is None:  # not this worker's channel (any more): what memory has
            bodies = self.bodies.memory.of(channel)
        else:
            bodies = await self.bodies.of(channel, partition, batch, is_conversation_change)
        return [bodies[offset] for offset in recap.window_offsets if offset in bodies]

    def recap_of(self, channel: str) -> ChannelRecap:
        recap: ChannelRecap | None = self.table.get(channel)
        return recap if recap is not None else ChannelRecap()

    async def on_message(self, message: Message, partition: int, offset: int) -> None:
        channel = message.channel
        before = self.recap_of(channel)
        debounce = self.chorus.configs.setting(channel, "recap_debounce_seconds")
        after = with_message(before, message, offset, debounce, utc_now())
        if after is before:
            return
        if after.message_count > before.message_count:
            memory = self.bodies.memory
            memory.keep(channel, offset, windowed_message(message))
            memory.drop_through(channel, after.window_offsets[0] - 1)
        self.store(channel, after, partition, offset)

    async def on_recap(self, value: bytes | None, partition: int, offset: int) -> None:
        """A record read back from chorus.recaps, at `partition`@`offset`."""
        try:
            record = RecapRecord.model_validate_json(value or b"")
        except ValidationError as error:
            log.warning("ignoring an invalid record on the recaps topic: %s", error)
            return
        channel = record.channel
        recap = self.recap_of(channel)
        now = utc_now()
        status = recap.status
        if record.phase == RecapPhase.GENERATING:
            status = on_generation_started(status, now)
        elif record.phase == RecapPhase.COMPLETED:
            status = on_generation_succeeded(status, record.generation)
            self.generating.pop(channel, None)
        elif record.phase == RecapPhase.ERROR:
            status = on_generation_failed(
                status,
                now,
                record.error or "unknown error",
                RETRY_BACKOFF_SECONDS,
                RETRY_MAX_BACKOFF_SECONDS,
                generation=record.generation,
            )
            self.generating.pop(channel, None)
        latest = recap.latest if record.phase == RecapPhase.GENERATING else record
        updated = recap.model_copy(update={"status": status, "latest": latest})
        self.store(channel, updated, partition, offset, self.chorus.recaps.get_topic_name())

    async def check_deadlines(self) -> None:
        now = utc_now()
        if self.rescan.due():
            self.statuses = {
                str(channel): recap.status
                for channel, recap in list(self.table.items())
                if recap is not None
            }
        for channel, status in list(self.statuses.items()):
            if channel in self.generating:
                continue
            # GENERATING with no task here: the worker that started it died or moved on.
            orphaned = status.phase is RecapPhase.GENERATING
            if not (orphaned or due(status, now)):
                continue
            recap = self.recap_of(channel)
            partition = self.chorus.messages_partition(channel)
            if partition is None:
                continue
            self.generating[channel] = recap.status.generation
            task = asyncio.ensure_future(self.generate(channel, recap, partition))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def generate(self, channel: str, recap: ChannelRecap, partition: int) -> None:
        try:
            summary = self.narrative(channel)
            window = await self.window_of(channel, recap)
            base = RecapRecord(
                channel=channel,
                text=recap.latest.text if recap.latest else None,
                narrative=recap.latest.narrative if recap.latest else None,
                phase=RecapPhase.GENERATING,
                covered_offset=recap.status.covered_offset,
                generation=recap.status.generation,
                title=channel_title(window, recap.opening, summary),
            )
            await self.publish(base, partition)
        except Exception:
            log.exception("recap of %s failed", channel)
            self.generating.pop(channel, None)
            return
        try:
            text, cost = await write_recap(
                self.client, window, summary, channel_keyphrases(window, summary)
            )
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


def install(chorus: Runtime, narrative: NarrativeOf) -> Recapper:
    """The recap stage (the context role); `narrative` is what the channel's latest summary
    says was said (handed over by the composition root: no stage imports another)."""
    from streams.llm.client import client_from_settings
    from streams.llm.metering import MeteredChatClient

    client = client_from_settings(chorus.settings, secondary=True)
    recapper = Recapper(
        chorus,
        MeteredChatClient(client, chorus.meter, "recap") if client else None,
        narrative,
    )

    @chorus.app.agent(chorus.recaps, name="record-recaps")
    async def record_recaps(stream: Any) -> None:
        async for event in stream.events():
            async with chorus.checkpoint.between_batches():
                chorus.checkpoint.hold(event)
                record = event.message
                await recapper.on_recap(event.value, record.partition, record.offset)

    @chorus.app.timer(chorus.settings.recap_check_seconds, name="recap-deadlines")
    async def deadlines() -> None:
        await recapper.check_deadlines()

    return recapper
