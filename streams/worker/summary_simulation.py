"""The summaries stage offline (`chorus summary simulate`, the summary quality bench): a
file of messages batched and summarised as the context role would, with no Kafka.

It runs the stage's own parts, `pending.replay` for the batching and `summarise_batch` for
the records, so what it prints is what the stage would publish.
"""

from __future__ import annotations

from collections.abc import Iterable

from projections.model import Message
from projections.summarise import ContentSummariser
from projections.summarise.pending import replay
from streams.records import SummaryRecord
from streams.settings import Settings
from streams.worker.stages.summaries import summarise_batch, summariser_from_settings


async def simulate(
    messages: Iterable[Message],
    settings: Settings,
    summariser: ContentSummariser[Message] | None = None,
) -> dict[str, SummaryRecord]:
    """Each channel's final summary, as the stage would publish it, offline (no Kafka).

    Offsets are positions in the input per channel; batching is `pending.replay` with the
    stage's thresholds and bound; the summariser is the default wiring without an LLM.
    """
    summariser = summariser or summariser_from_settings(settings, None)
    by_channel: dict[str, list[tuple[int, Message]]] = {}
    for message in messages:
        log_of = by_channel.setdefault(message.channel, [])
        log_of.append((len(log_of), message))
    latest: dict[str, SummaryRecord] = {}
    for channel, log_of in by_channel.items():
        for batch, batch_messages in replay(
            log_of,
            after_messages=settings.summary_after_messages,
            after_seconds=settings.summary_after_seconds,
            max_pending=settings.summary_max_pending,
        ):
            at = log_of[batch.last_offset][1].created_at
            latest[channel] = await summarise_batch(
                summariser, channel, batch, batch_messages, latest.get(channel), at
            )
    return latest
