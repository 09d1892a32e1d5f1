"""The latest record of each channel on a followed topic (`LatestBook`): read back by its
position, unless the agent that follows the topic has just read it."""

from __future__ import annotations

from typing import Any

from streams.memory import ByteCache
from streams.records import SummaryRecord
from streams.worker.followed import Current, LatestBook
from tests.unit.streams.worker.offline import TopicRecords

CHANNEL = "team/plan"


class Following:
    """What a book asks of its topic's agent: how far each partition has been read."""

    def current(self, partition: int | None) -> Current:
        return Current("t.summaries", partition, 7, restoring=False)


def book(reader: TopicRecords, positions: dict[str, list[int]]) -> LatestBook[SummaryRecord]:
    def position_of(channel: str, _: int) -> list[int] | None:
        return positions.get(channel)

    cache: ByteCache[Any, Any] = ByteCache("latest", 1 << 20)
    return LatestBook(
        "summary",
        Following(),  # type: ignore[arg-type]
        position_of,
        reader,  # type: ignore[arg-type]
        SummaryRecord.model_validate_json,
        cache,
    )


async def test_a_record_the_agent_read_is_not_read_back_from_the_topic() -> None:
    """The next summary builds on the channel's latest, which the stage's agent read a
    moment before: it is kept (within the cache's bytes) instead of fetched back by its
    position, a request to the broker for each summary, one at a time."""
    record = SummaryRecord(channel=CHANNEL, text="so far", last_offset=4)
    reader = TopicRecords(CHANNEL.encode())
    reader.records[(0, 5)] = record.to_bytes()
    latest = book(reader, {CHANNEL: [0, 5, 4]})

    latest.read(CHANNEL, 0, 5, record.to_bytes())
    assert (await latest.latest(CHANNEL, 0)).record == record
    assert (await latest.latest(CHANNEL, 0)).record == record  # parsed once, then kept
    assert reader.reads == []


async def test_a_record_not_kept_or_not_the_latest_is_read_back_by_its_position() -> None:
    older = SummaryRecord(channel=CHANNEL, text="before", last_offset=1)
    newer = SummaryRecord(channel=CHANNEL, text="so far", last_offset=4)
    reader = TopicRecords(CHANNEL.encode())
    reader.records[(0, 5)] = newer.to_bytes()
    latest = book(reader, {CHANNEL: [0, 5, 4]})

    latest.read(CHANNEL, 0, 2, older.to_bytes())  # read, but the position says offset 5
    assert (await latest.latest(CHANNEL, 0)).record == newer
    assert reader.reads == [(5, 5, None)]
    latest.cache.clear()  # memory let it go (a restart, the cache's bound)
    assert (await latest.latest(CHANNEL, 0)).record == newer
    assert reader.reads == [(5, 5, None), (5, 5, None)]
