"""The latest summary and recap of each channel, as the fold role's views read them: from the
compacted `chorus.summaries` and `chorus.recaps` topics, never from the context role (fold
role).

Both topics are keyed and partitioned like `chorus.messages`, so the summaries and recaps of
the channels a fold worker owns are on the partitions with the same numbers. A follower
reads each (`streams.worker.followed`: a consumer of its own, in record batches, how far it
read checkpointed with the role's state) and keeps per channel only where its latest record
is: the `latest` table (partition and offset of each, and the offset a summary covers
through), one record per channel, checkpointed, so a restart, warm or cold, reads only what
was published since.
A view reads a record back from its topic by that position and keeps the parsed records in
a cache bounded in bytes (the `latest` share of the role's memory); it says how far each
partition has been read (`Current`): a record published after that is not in it.

A summary that covers less than the one the channel has (an older copy published again,
bug 19) never replaces it (`streams.worker.followed.covers_less`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import orjson

from streams.records import RecapRecord, SummaryRecord
from streams.topology import LATEST_TABLE
from streams.worker.followed import Followed, LatestBook, covers_less

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime


class LatestViews:
    """The books of `chorus.summaries` and `chorus.recaps` of the channels this worker owns."""

    def __init__(self, chorus: Runtime) -> None:
        self.chorus = chorus
        self.positions = chorus.checkpoint.table(
            chorus.table(LATEST_TABLE), cache=chorus.cache("latest-positions", "latest", 0.25)
        )
        records = chorus.cache("latest-records", "latest", 0.75)
        self.summaries_followed = Followed(
            chorus, chorus.summaries, "latest-summaries", self.on_summary
        )
        self.recaps_followed = Followed(chorus, chorus.recaps, "latest-recaps", self.on_recap)
        self.summaries: LatestBook[SummaryRecord] = LatestBook(
            "summary",
            self.summaries_followed,
            self.position_of("summary"),
            chorus.reader(chorus.summaries.get_topic_name()),
            SummaryRecord.model_validate_json,
            records,
        )
        self.recaps: LatestBook[RecapRecord] = LatestBook(
            "recap",
            self.recaps_followed,
            self.position_of("recap"),
            chorus.reader(chorus.recaps.get_topic_name()),
            RecapRecord.model_validate_json,
            records,
        )

    def position_of(self, column: str) -> Callable[[str, int], list[int] | None]:
        def position(channel: str, partition: int) -> list[int] | None:
            found: list[int] | None = (self.positions.get(channel, partition) or {}).get(column)
            return found

        return position

    def _write(
        self, key: bytes | None, partition: int, offset: int, column: str, position: list[int]
    ) -> None:
        if not key:
            return
        channel = key.decode(errors="replace")
        row = self.positions.get(channel, partition) or {}
        topic = self.summaries_followed.name if column == "summary" else self.recaps_followed.name
        self.positions.set(channel, {**row, column: position}, partition, offset, topic)

    def on_summary(
        self, key: bytes | None, value: bytes | None, partition: int, offset: int
    ) -> None:
        """A record of chorus.summaries: the channel's latest unless it covers less."""
        if value is None:  # a tombstone: the channel has no summary any more
            self._forget(key, partition, offset, "summary")
            return
        try:
            last = orjson.loads(value).get("last_offset")
        except orjson.JSONDecodeError:
            return
        channel = (key or b"").decode(errors="replace")
        kept = (self.positions.get(channel, partition) or {}).get("summary")
        if kept is not None and covers_less(kept[2], last):
            return
        self._write(key, partition, offset, "summary", [partition, offset, last])

    def on_recap(self, key: bytes | None, value: bytes | None, partition: int, offset: int) -> None:
        if value is None:
            self._forget(key, partition, offset, "recap")
            return
        self._write(key, partition, offset, "recap", [partition, offset])

    def _forget(self, key: bytes | None, partition: int, offset: int, column: str) -> None:
        if not key:
            return
        channel = key.decode(errors="replace")
        row = dict(self.positions.get(channel, partition) or {})
        if row.pop(column, None) is not None:
            self.positions.set(channel, row, partition, offset)


def install(chorus: Runtime) -> LatestViews:
    """The books and the followers of their topics (the fold role's views)."""
    return LatestViews(chorus)
