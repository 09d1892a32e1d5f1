"""The fold role's recent messages: windows of offsets per channel, bodies in bounded memory,
shown through the fold's gate, read back from the log when memory lacks them; a partition
taken over again starts afresh."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import orjson

from projections.recap.window import RECAP_WINDOW
from streams.records import key_partition
from streams.worker.runtime import Runtime
from streams.worker.stages import recent as recent_module
from streams.worker.stages.recent import (
    RECENT_RECORDS,
    WINDOW_BYTES,
    WINDOW_RECORD_BYTES,
    RecentMessages,
)
from tests.unit.streams.worker.offline import TopicRecords, offline_worker

PARTITIONS = 4
CHANNEL = "store/age"
PARTITION = key_partition(CHANNEL.encode(), PARTITIONS)
# A channel on another partition.
OTHER = next(
    f"x/c{n}" for n in range(100) if key_partition(f"x/c{n}".encode(), PARTITIONS) != PARTITION
)


def said(content: str, kind: str = "STATUS", channel: str = CHANNEL, **extra: Any) -> bytes:
    return orjson.dumps(
        {"channel": channel, "sender": "ann", "type": kind, "content": content, **extra}
    )


def owning(chorus: Runtime, partitions: set[int]) -> None:
    """The group assigned `partitions` to `chorus`."""
    chorus.ownership.owned_partitions = lambda: frozenset(partitions)  # type: ignore[method-assign]
    chorus.ownership.assigned(frozenset(partitions))


def windows(log: TopicRecords | None = None) -> RecentMessages:
    """Windows of a worker that owns the channel's partition."""
    chorus = offline_worker().runtime
    recent = RecentMessages(chorus, log)  # type: ignore[arg-type]
    chorus.ownership.on_moved(recent.moved)
    owning(chorus, {PARTITION})
    return recent


def window_of(recent: RecentMessages, channel: str) -> list[int]:
    window = recent.windows.get(channel)
    return [] if window is None else [offset for offset, _ in window.records]


async def test_a_view_shows_the_conversation_folded_so_far_through_the_fold_s_gate() -> None:
    recent = windows()
    key = CHANNEL.encode()
    recent.on_record(key, said("plan the release"), PARTITION, 0, 5_000)
    recent.on_record(key, said("", "EVENT", payload={"kind": "typing"}), PARTITION, 1, 5_100)
    recent.on_record(key, b"{not json", PARTITION, 2, 5_200)  # dead-lettered by the fold
    recent.on_record(key, said("x" * 400), PARTITION, 3, 5_300)
    recent.on_record(key, said("not folded yet"), PARTITION, 4, 5_400)
    found = await recent.recent(CHANNEL, through=3)
    assert [offset for offset, _ in found.messages] == [0, 3]
    assert found.messages[1][1].content == "x" * 299 + "…"  # cut as the recap window cuts
    assert found.last_change == (3, 5_300) and found.last_record_ms == 5_300
    recent.on_record(key, said("plan the release"), PARTITION, 0, 5_000)  # redelivered
    assert window_of(recent, CHANNEL) == [0, 1, 2, 3, 4]


async def test_a_window_is_bounded_and_shows_at_most_the_recap_window() -> None:
    recent = windows()
    for offset in range(3 * RECENT_RECORDS):
        recent.on_record(CHANNEL.encode(), said(f"m{offset}"), PARTITION, offset, offset)
    assert len(window_of(recent, CHANNEL)) == RECENT_RECORDS
    found = await recent.recent(CHANNEL, through=10**6)
    assert len(found.messages) == RECAP_WINDOW
    assert found.messages[-1][1].content == f"m{3 * RECENT_RECORDS - 1}"


async def test_past_the_bounds_windows_and_bodies_are_dropped_and_read_back() -> None:
    log = TopicRecords()
    recent = windows(log)
    recent.windows.budget = 2 * WINDOW_BYTES + 4 * WINDOW_RECORD_BYTES  # two small windows
    recent.bodies.budget = 200
    for offset, channel in enumerate(["a/1", "b/1", CHANNEL, CHANNEL, CHANNEL]):
        value = said(f"m{offset}", channel=channel)
        log.records[(PARTITION, offset)] = (channel.encode(), value)
        recent.on_record(channel.encode(), value, PARTITION, offset, offset)
    assert recent.windows.keys() == ["b/1", CHANNEL]  # a/1, the least recently active
    assert recent.bodies.bytes <= 200 and (CHANNEL, 2) not in recent.bodies
    found = await recent.recent(CHANNEL, through=4)
    assert [m.content for _, m in found.messages] == ["m2", "m3", "m4"]
    assert (2, 2, None) in log.reads  # what memory let go, read back from the log


async def test_after_a_move_a_window_is_read_back_from_before_the_agent_took_over() -> None:
    log = TopicRecords()
    for offset in range(30):
        channel = CHANNEL if offset % 3 == 0 else "other/c"
        log.records[(PARTITION, offset)] = (channel.encode(), said(f"m{offset}", channel=channel))
    recent = windows(log)
    recent.on_record(CHANNEL.encode(), said("live"), PARTITION, 30, 30)
    with patch.object(recent_module, "RECENT_READ_BACK", 10):
        found = await recent.recent(CHANNEL, through=30)
    # At most RECENT_READ_BACK records before the first the fold handed over (offset 30).
    assert log.reads[0] == (20, 29, None)
    assert [offset for offset, _ in found.messages] == [21, 24, 27, 30]
    await recent.recent(CHANNEL, through=30)
    assert len(log.reads) == 1  # once per channel until partitions move
    owning(recent.chorus, {PARTITION + 1})  # the partition moved away: its windows forgotten
    assert recent.windows.get(CHANNEL) is None and PARTITION not in recent.live_from


async def test_a_channel_this_worker_does_not_own_or_has_not_folded_shows_nothing() -> None:
    recent = windows()
    recent.on_record(CHANNEL.encode(), said("hello"), PARTITION, 0, 0)
    assert (await recent.recent(CHANNEL, through=None)).messages == []
    recent.chorus.ownership.owned_partitions = lambda: frozenset()  # type: ignore[method-assign]
    assert (await recent.recent(CHANNEL, through=0)).messages == []


async def test_a_partition_taken_over_again_forgets_its_old_windows() -> None:
    other = key_partition(OTHER.encode(), PARTITIONS)
    recent = windows()
    owning(recent.chorus, {PARTITION, other})
    recent.on_record(CHANNEL.encode(), said("before"), PARTITION, 0, 0)
    recent.on_record(OTHER.encode(), said("elsewhere", channel=OTHER), other, 0, 0)
    owning(recent.chorus, {other})
    owning(recent.chorus, {PARTITION, other})  # away and back: what came between is not kept
    assert CHANNEL not in recent.windows and PARTITION not in recent.live_from
    assert OTHER in recent.windows and recent.live_from[other] == 0  # another partition's stay


async def test_before_the_fold_hands_over_a_record_a_view_reads_back_to_the_fold_s_offset() -> None:
    """Taken over with nothing handed over yet: what the fold folded is read back once, and
    every record of the channel after it comes from the fold."""
    log = TopicRecords()
    for offset in range(6):
        log.records[(PARTITION, offset)] = (CHANNEL.encode(), said(f"m{offset}"))
    recent = windows(log)
    assert [o for o, _ in (await recent.recent(CHANNEL, through=2)).messages] == [0, 1, 2]
    for offset in range(3, 6):
        recent.on_record(CHANNEL.encode(), said(f"m{offset}"), PARTITION, offset, offset)
    assert [o for o, _ in (await recent.recent(CHANNEL, through=5)).messages] == [0, 1, 2, 3, 4, 5]
    assert log.reads == [(0, 2, None)]
    window = recent.windows.get(CHANNEL)
    assert window is not None and window.filled
