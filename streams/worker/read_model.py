"""The worker's read model: what the fold role's views answer for a channel (state, summary,
recap, context), built in this process from the fold tables, the latest summary and recap
read from their compacted topics (`streams.worker.latest`) and the recent messages
(`streams.worker.stages.recent`). No view asks another process.

One owner per fact: where a channel stands (the decision, what is open, what ended) is
read from the fold through `Runtime.standing`, computed once per request, the same states
and conditions the fold decided with; the summaries and recaps contribute what was said
(their narrative), and their state part is rendered here from the fold as it is now.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projections.channel import ChannelStanding
from projections.commitments import CommitmentProjection
from projections.context import (
    DEFAULT_CONTEXT_TOKENS,
    ChannelContext,
    ChannelHeader,
    RecapPart,
    RecentMessage,
    SummaryPart,
    assemble_context,
    budget_refusal,
)
from projections.model import ActorType, MessageType
from projections.overview import ChannelOverview
from projections.projection import Folded
from projections.readable import CommitmentView, commitment_views
from projections.recap import countdown_label, status_as_read, with_recap_state
from projections.recap.title import channel_title
from projections.summarise.state import narrative_of
from streams.memory import ByteCache
from streams.records import RecapRecord, SummaryRecord, summary_view
from streams.worker.followed import Latest
from streams.worker.runtime import Runtime
from streams.worker.stages.recent import Recent

# A channel whose last record is younger than this reads as "active" in `chorus watch`.
ACTIVE_SECONDS = 5.0
# What a title kept between views weighs in memory.
TITLE_BYTES = 300


class UnknownChannel(LookupError):
    """No message of the channel was folded here (404 on HTTP)."""

    def __init__(self, channel: str) -> None:
        super().__init__(f"no messages folded for channel {channel!r}")


def state_answer(chorus: Runtime, channel: str) -> dict[str, Any] | None:
    """Every projection's fold of the channel and the decision over them (`decision`,
    `detail`, `offset`), or None when the channel is unknown here."""
    found = chorus.standing(channel)
    if found is None:
        return None
    projections = {}
    for name, folded in chorus.folds_of(channel).items():
        if folded is None:
            continue
        projections[name] = {
            "version": folded.version,
            "offset": folded.offset,
            "state": folded.state,
        }
    config = chorus.configs.get(channel)
    return {
        "channel": channel,
        "decision": found.decision_json(),
        "projections": projections,
        "config": config.model_dump(mode="json") if config is not None else None,
    }


def summary_answer(
    channel: str, commitments: Folded | None, latest: Latest[SummaryRecord]
) -> dict[str, Any]:
    """The latest summary read from the topic with its state part rendered from the
    commitments fold as it is now, and how far the summaries partition was read."""
    record = latest.record.rendered(commitments) if latest.record is not None else None
    view = summary_view(channel, record.model_dump(mode="json") if record else None)
    return {**view, "current_at": latest.current.as_json()}


def commitments_of(found: ChannelStanding, recent: Recent) -> list[CommitmentView]:
    """The channel's commitments as the fold holds them (what was asked taken from the
    recent messages when a commitment has no excerpt)."""
    excerpts = {m.id: m.content for _, m in recent.messages if m.content}
    return commitment_views(found.states.get(CommitmentProjection.name), excerpts)


class Titles:
    """Each channel's title (`channel_title` of its recent messages and summary), read again
    only when either changed; kept in a cache bounded in bytes, the least recently asked
    forgotten first."""

    def __init__(self, cache: ByteCache[str, tuple[tuple[int | None, int | None], str | None]]):
        self.cache = cache

    def of(
        self,
        channel: str,
        partition: int,
        recent: Recent,
        summary: SummaryRecord | None,
        fallback: str | None,
    ) -> str | None:
        """The title; `fallback` (the latest recap's) while nothing of it repeats and no
        message says anything."""
        last = recent.messages[-1][0] if recent.messages else None
        key = (last, summary.last_offset if summary else None)
        cached = self.cache.get(channel)
        if cached is not None and cached[0] == key:
            return cached[1]
        window = [m for _, m in recent.messages]
        opening = next((m.content for m in window if m.content), fallback)
        narrative = narrative_of(summary.text, summary.narrative) if summary else None
        found = channel_title(window, opening, narrative) or fallback
        self.cache.put(channel, (key, found), TITLE_BYTES, partition)
        return found


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def conversation_count(found: ChannelStanding) -> int:
    """Messages folded that changed the conversation (every type but EVENT)."""
    overview = found.states.get("overview")
    if not isinstance(overview, ChannelOverview):
        return found.message_count
    return found.message_count - overview.by_type.get(MessageType.EVENT, 0)


def recap_answer(
    channel: str,
    found: ChannelStanding,
    latest: Latest[RecapRecord],
    recent: Recent,
    *,
    title: str | None,
    debounce: float,
    model: str,
    now: datetime,
) -> dict[str, Any]:
    """The recap view: the latest recap's narrative with the goal, what is open and the
    next step rendered from the fold now (`with_recap_state`); the phase and countdown as
    the recaps topic and the log show them (`status_as_read`); the decision; and how far
    the recaps partition was read."""
    record = latest.record
    last_change = (
        (recent.last_change[0], _at(recent.last_change[1])) if recent.last_change else None
    )
    status = status_as_read(
        (record.phase, record.covered_offset) if record else None, last_change, debounce
    )
    tools = list(
        dict.fromkeys(m.sender for _, m in recent.messages if m.actor_type is ActorType.TOOL)
    )
    active = recent.last_record_ms is not None and now - _at(recent.last_record_ms) < timedelta(
        seconds=ACTIVE_SECONDS
    )
    text = None
    if record is not None:
        text = with_recap_state(record.narrative, commitments_of(found, recent))
    return {
        "channel": channel,
        "phase": status.phase.value,
        "label": countdown_label(status, now),
        "due_at": status.due_at,
        "message_count": conversation_count(found),
        "title": title,
        "tools": tools,
        "activity": "active" if active else "idle",
        "model": (record.model if record and record.model else None) or model,
        "text": text,
        "recap": record.model_dump(mode="json") if record else None,
        "decision": found.decision_json(),
        "current_at": latest.current.as_json(),
    }


def channel_context(
    found: ChannelStanding,
    summary: SummaryRecord | None,
    recap: RecapRecord | None,
    recent: Recent,
    channel: str,
    max_tokens: int,
    for_agent: str | None = None,
) -> ChannelContext:
    """What an agent reads before deciding whether to read the history (context v2, see
    `projections.context`): the header and commitments from the channel's standing
    (`found`, computed once by the caller), the narratives of its latest summary and recap,
    and its recent messages."""
    summary_part = None
    if summary is not None:
        text = narrative_of(summary.text, summary.narrative)
        summary_part = SummaryPart(text, summary.first_offset, summary.last_offset)
    recap_part = None
    if recap is not None and recap.narrative:
        recap_part = RecapPart(recap.narrative, recap.covered_offset)
    return assemble_context(
        max_tokens,
        header=ChannelHeader(
            channel=channel,
            decision=found.decision_json(),
            offset=found.offset,
            at=found.at,
            message_count=found.message_count,
        ),
        commitments=commitments_of(found, recent),
        summary=summary_part,
        recap=recap_part,
        messages=[RecentMessage.of(m, offset) for offset, m in recent.messages],
        for_agent=for_agent,
    )


def context_budget(raw: str | None) -> int:
    """`max_tokens` from the query string; ValueError with the rule when it breaks it."""
    if raw is None:
        return DEFAULT_CONTEXT_TOKENS
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"max_tokens must be an integer, got {raw[:40]!r}") from None
    refusal = budget_refusal(value)
    if refusal is not None:
        raise ValueError(refusal)
    return value
