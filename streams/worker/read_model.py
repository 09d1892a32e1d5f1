"""The worker's read model: what its views answer for a channel (state, summary, context),
built from the tables the stages keep. The HTTP views (`streams.worker.http`) and the CLI's
no-worker fallback share these shapes.

One owner per fact: where a channel stands (the decision, what is open, what ended) is
read from the fold tables through `Runtime.standing`, the same states and conditions the
fold decided with; the summary and recap stages contribute text only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from projections.commitments import CommitmentProjection
from projections.context import (
    ChannelContext,
    ChannelHeader,
    RecapPart,
    RecentMessage,
    SummaryPart,
    assemble_context,
)
from projections.model import validate_channel_name
from projections.readable import commitment_views
from projections.summarise.state import narrative_of
from streams.worker.runtime import Runtime

if TYPE_CHECKING:
    from streams.worker.context_source import RecentText


class UnknownChannel(LookupError):
    """No message of the channel was folded here (404 on HTTP)."""

    def __init__(self, channel: str) -> None:
        super().__init__(f"no messages folded for channel {channel!r}")


def checked_channel(channel: str) -> str:
    """`channel` when it is a valid channel name, else ValueError with the rule (400)."""
    return validate_channel_name(channel)


def channel_state(chorus: Runtime, channel: str) -> dict[str, Any] | None:
    """Every projection's fold of the channel and the decision over them (`decision`,
    `detail`, `offset`), or None when the channel is unknown here."""
    found = chorus.standing(channel)
    if found is None:
        return None
    projections = {}
    for name in chorus.folds:
        folded = chorus.folded(channel, name)
        if folded is None:
            continue
        projections[name] = {
            "version": folded.version,
            "offset": folded.offset,
            "state": folded.state,
        }
    return {
        "channel": channel,
        "decision": found.decision_json(),
        "projections": projections,
        "config": chorus.channel_config.get(channel),
    }


DEFAULT_CONTEXT_TOKENS = 1000
# Far above anything the stages keep (summary, ring, commitments); a bound on the work.
MAX_CONTEXT_TOKENS = 100_000


def channel_context(
    chorus: Runtime,
    recent: RecentText,
    channel: str,
    max_tokens: int,
    for_agent: str | None = None,
) -> ChannelContext:
    """What an agent reads before deciding whether to read the history (context v2, see
    `projections.context`): the header and commitments from the fold here, the summary,
    recap and recent messages from the context role (`recent`). UnknownChannel when nothing
    of the channel was folded here."""
    found = chorus.standing(channel)
    if found is None:
        raise UnknownChannel(channel)
    window = recent.messages
    commitments_state = found.states.get(CommitmentProjection.name)
    excerpts = {m.id: m.content for _, m in window if m.content}
    summary = None
    if recent.summary is not None:
        latest = recent.summary
        text = narrative_of(latest.text, latest.narrative)
        summary = SummaryPart(text, latest.first_offset, latest.last_offset)
    recap_part = None
    if recent.recap is not None and recent.recap.text:
        recap_part = RecapPart(recent.recap.text, recent.recap.covered_offset)
    return assemble_context(
        max_tokens,
        header=ChannelHeader(
            channel=channel,
            decision=found.decision_json(),
            offset=found.offset,
            at=found.at,
            message_count=found.message_count,
        ),
        commitments=commitment_views(commitments_state, excerpts),
        summary=summary,
        recap=recap_part,
        messages=[RecentMessage.of(m, offset) for offset, m in window],
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
    if not 0 <= value <= MAX_CONTEXT_TOKENS:
        raise ValueError(f"max_tokens must be between 0 and {MAX_CONTEXT_TOKENS}, got {value}")
    return value
