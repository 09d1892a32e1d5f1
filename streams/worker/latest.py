"""The latest summary and recap of each channel, as the fold role's views read them: from the
compacted `chorus.summaries` and `chorus.recaps` topics, never from the context role.

Both topics are keyed and partitioned like `chorus.messages`, so the summaries and recaps of
the channels a fold worker owns are on the partitions with the same numbers: the views'
follower (`streams.kafka.follow`) reads exactly those, from their beginning when the worker
takes one over. A view answers from memory, without asking another process, and says how far
each partition has been read (`Current`): a record published after that is not in it.

Bounded: per channel, the position of its latest record; the records themselves up to
`LATEST_KEPT_BYTES` per topic (about 20,000 channels' summaries: a narrative of at most 500
tokens with its annotations). Past that, the channel whose record was read or written
longest ago is dropped from memory (`chorus_latest_records_dropped_total{topic}`) and read
back from the topic by its position when a view asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streams.kafka.follow import LATEST_KEPT_BYTES, Followed, Follower, LatestBook
from streams.records import RecapRecord, SummaryRecord

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime

__all__ = ["LATEST_KEPT_BYTES", "LatestViews", "install", "summary_goes_back"]


def summary_goes_back(kept: SummaryRecord, new: SummaryRecord) -> bool:
    """A summary covering less than the one kept (an older copy published again, bug 19)
    never replaces it."""
    return (
        new.last_offset is not None
        and kept.last_offset is not None
        and new.last_offset < kept.last_offset
    )


class LatestViews:
    """The books of `chorus.summaries` and `chorus.recaps` and the follower that fills them
    for the messages partitions this worker actively owns."""

    def __init__(self, chorus: Runtime) -> None:
        self.chorus = chorus
        settings = chorus.settings
        summaries = chorus.summaries.get_topic_name()
        recaps = chorus.recaps.get_topic_name()
        dropped = chorus.meter.latest_dropped
        self.summaries: LatestBook[SummaryRecord] = LatestBook(
            summaries,
            SummaryRecord.model_validate_json,
            chorus.reader(summaries),
            goes_back=summary_goes_back,
            on_dropped=dropped.labels(summaries).inc,
        )
        self.recaps: LatestBook[RecapRecord] = LatestBook(
            recaps,
            RecapRecord.model_validate_json,
            chorus.reader(recaps),
            on_dropped=dropped.labels(recaps).inc,
        )
        readers: list[Followed] = [self.summaries, self.recaps]
        self.follower = Follower(settings, chorus.servers, readers, chorus.owned_partitions)


def install(chorus: Runtime) -> LatestViews:
    """The books and their follower, as a task of the fold role's app."""
    views = LatestViews(chorus)

    @chorus.app.task
    async def follow_what_the_views_read() -> None:
        await views.follower.run()

    return views
