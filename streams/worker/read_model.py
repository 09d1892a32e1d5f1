"""The worker's read model: what its views answer for a channel (state, summary, context),
built from the tables the stages keep. The HTTP views (`streams.worker.http`) and the CLI's
no-worker fallback share these shapes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from projections.context import ChannelContext, RecentMessage, assemble_context
from streams.worker.runtime import Runtime
from streams.worker.stages.recaps import channel_commitments

if TYPE_CHECKING:
    from streams.worker.stages.recaps import Recapper
    from streams.worker.stages.summaries import Summariser


def channel_state(chorus: Runtime, channel: str) -> dict[str, Any] | None:
    """Every projection's fold of the channel, or None when the channel is unknown here."""
    folds = {name: chorus.folded(channel, name) for name in chorus.folds}
    if all(folded is None for folded in folds.values()):
        return None
    projections = {}
    for name, folded in folds.items():
        if folded is None:
            continue
        projections[name] = {
            "version": folded.version,
            "offset": folded.offset,
            "state": folded.state,
        }
    return {
        "channel": channel,
        "projections": projections,
        "config": chorus.channel_config.get(channel),
    }


DEFAULT_CONTEXT_TOKENS = 1000
# Far above anything the stages keep (summary, ring, commitments); a bound on the work.
MAX_CONTEXT_TOKENS = 100_000


async def channel_context(
    summariser: Summariser, recapper: Recapper, channel: str, max_tokens: int
) -> ChannelContext:
    """What an agent reads before deciding whether to read the history (see
    `projections.context`): the summary, open commitments, latest recap, recent messages."""
    latest = summariser.latest.get(channel)
    recap = recapper.recap_of(channel)
    window = await recapper.window_of(channel, recap)
    return assemble_context(
        channel,
        max_tokens,
        summary=latest.get("text") if latest else None,
        commitments=channel_commitments(recapper.commitments_fold(channel), window),
        recap=recap.latest.text if recap.latest else None,
        messages=[RecentMessage(m.sender, m.type.value, m.content, m.created_at) for m in window],
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
