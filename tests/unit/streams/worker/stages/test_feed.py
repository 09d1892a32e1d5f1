"""streams.worker.stages.feed: the context role's messages reach its readers in log order,
never past a gap, and what the fold's gate refuses is skipped without a second dead letter."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

from projections.model import Message, MessageType, encode_message
from streams.records import key_partition
from streams.worker.stages.feed import Feed
from tests.unit.streams.worker.offline import offline_worker

CHANNEL = "feed/room"
HOME = key_partition(CHANNEL.encode(), 4)


def feed_with(read: list[tuple[str, int]]) -> tuple[Feed, Any, list[int], list[Any]]:
    chorus = offline_worker("context", stages=("config",)).runtime
    seeks: list[int] = []
    letters: list[Any] = []

    async def seek(partition: Any, offset: int) -> None:
        seeks.append(offset)

    async def reader(message: Message, partition: int, offset: int) -> None:
        read.append((message.content or "", offset))

    async def dead_letter(reason: str, *args: Any, **kwargs: Any) -> None:
        letters.append(reason)

    chorus.app.consumer.seek = seek
    chorus.gate.dead_letter = dead_letter  # type: ignore[method-assign]
    return Feed(chorus, [reader]), chorus, seeks, letters


def said(n: int) -> bytes:
    return encode_message(
        Message(channel=CHANNEL, sender="ann", type=MessageType.STATUS, content=f"m{n}")
    )


async def test_a_jump_is_sought_back_and_redeliveries_reach_the_readers_again() -> None:
    read: list[tuple[str, int]] = []
    feed, chorus, seeks, _ = feed_with(read)
    for offset in (0, 1, 3, 2, 3, 3):
        await feed.on_record(CHANNEL.encode(), said(offset), HOME, offset)
    assert read == [("m0", 0), ("m1", 1), ("m2", 2), ("m3", 3), ("m3", 3)]
    assert seeks == [2]
    assert chorus.next_offset(HOME) == 4


async def test_a_record_the_gate_refuses_is_skipped_without_a_dead_letter() -> None:
    read: list[tuple[str, int]] = []
    feed, _, _, letters = feed_with(read)
    await feed.on_record(CHANNEL.encode(), b"{not json", HOME, 0)
    await feed.on_record(CHANNEL.encode(), said(1), HOME, 1)
    assert read == [("m1", 1)]
    assert letters == []  # the fold role dead-letters it


async def test_a_reader_that_raises_is_dead_lettered_and_the_next_record_goes_on() -> None:
    feed, chorus, _, letters = feed_with([])

    async def broken(message: Message, partition: int, offset: int) -> None:
        raise RuntimeError("boom")

    with patch.object(feed, "readers", [broken]):
        await feed.on_record(CHANNEL.encode(), said(0), HOME, 0)
    assert len(letters) == 1 and "RuntimeError: boom" in letters[0]
    assert chorus.next_offset(HOME) == 1


async def test_the_role_reads_the_log_as_far_as_its_latest_record_applied_is_stamped() -> None:
    """What the summaries' time thresholds wait for behind a backlog (`read_through`)."""
    read: list[tuple[str, int]] = []
    feed, chorus, _, _ = feed_with(read)
    await feed.on_record(CHANNEL.encode(), said(0), HOME, 0, 1_000)
    await feed.on_record(CHANNEL.encode(), said(2), HOME, 2, 3_000)  # a jump: not applied
    await feed.on_record(CHANNEL.encode(), said(1), HOME, 1, 2_000)
    assert chorus.read_ms == {HOME: 2_000}
