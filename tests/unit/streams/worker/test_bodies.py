"""The in-memory bodies the summary and recap stages keep while they may need them: a cache
of channels bounded in bytes, the least recently used forgotten first (the log still has
them), and what memory lacks read back through the fold's gate."""

from __future__ import annotations

from projections.model import Message, MessageType, encode_message
from streams.memory import ByteCache
from streams.worker.bodies import LogBodies, MessageBodies, Wanted, message_bytes
from tests.unit.streams.worker.offline import TopicRecords, offline_worker


def said(i: int, chars: int = 2, channel: str = "c") -> Message:
    return Message(
        channel=channel, sender="s", type=MessageType.STATUS, content=str(i).rjust(chars)
    )


def bodies_of(budget: int = 100_000) -> MessageBodies:
    return MessageBodies(ByteCache("bodies", budget))


def test_bodies_are_kept_per_channel_and_forgotten_through_an_offset() -> None:
    bodies = bodies_of()
    for i in range(5):
        bodies.keep("a", 0, i, said(i))
        bodies.keep("b", 1, 10 + i, said(10 + i))
    bodies.drop_through("a", 2)
    assert sorted(bodies.of("a")) == [3, 4] and sorted(bodies.of("b")) == list(range(10, 15))
    assert bodies.cache.size_of("a") == 2 * message_bytes(said(3))
    bodies.drop_through("a", 4)
    bodies.drop_through("unknown", 4)
    assert bodies.of("a") == {} and "a" not in bodies.cache


def test_the_byte_bound_forgets_the_least_recently_used_channel_and_counts_a_body_once() -> None:
    one = message_bytes(said(0))
    bodies = bodies_of(budget=5 * one)
    for i in range(3):
        bodies.keep("a", 0, i, said(i))
        bodies.keep("a", 0, i, said(i))  # redelivered: counted once
    bodies.keep("b", 1, 10, said(10))
    bodies.keep("b", 1, 11, said(11))
    assert bodies.cache.bytes == 5 * one
    bodies.keep("b", 1, 12, said(12))  # over the bound: "a", the least recently used, goes
    assert bodies.of("a") == {} and sorted(bodies.of("b")) == [10, 11, 12]


def test_of_is_a_copy() -> None:
    bodies = bodies_of()
    bodies.keep("a", 0, 0, said(0))
    bodies.of("a").clear()
    assert sorted(bodies.of("a")) == [0]


async def test_what_is_wanted_is_read_back_through_the_gate_and_kept_again() -> None:
    chorus = offline_worker("context").runtime
    partition = chorus.ownership.partition_of("c")
    log = TopicRecords()
    for offset, record in {
        0: (b"c", encode_message(said(0))),
        1: (b"other", encode_message(said(1, channel="other"))),
        2: (b"c", b"{not json"),  # the fold dead-lettered it
        3: (b"c", encode_message(said(3))),
        5: (b"c", encode_message(said(5))),
        6: (b"c", encode_message(said(6))),
    }.items():
        log.records[(partition, offset)] = record
    bodies = LogBodies(chorus, MessageBodies(ByteCache("bodies", 100_000)))
    bodies.reader = log  # type: ignore[assignment]
    wanted = Wanted(frozenset({0, 2, 3}), ((5, 6, 1),))
    found = await bodies.read_back("c", partition, wanted, lambda message: True)
    assert sorted(found) == [0, 3, 5]  # the run stops at its limit
    assert sorted(bodies.memory.of("c")) == [0, 3, 5]
    assert sorted(log.reads) == [(0, 3, None), (5, 6, 1)]


def test_what_a_channel_is_counted_for_after_a_drop_is_what_it_still_holds() -> None:
    bodies = bodies_of()
    for i in range(6):
        bodies.keep("a", 0, i, said(i, chars=10 * (i + 1)))
    bodies.drop_through("a", -1)  # nothing to forget
    bodies.drop_through("a", 3)
    assert bodies.cache.size_of("a") == sum(message_bytes(m) for m in bodies.of("a").values())
    assert bodies.cache.bytes == bodies.cache.size_of("a") and sorted(bodies.of("a")) == [4, 5]
