"""The in-memory bodies the summary stage keeps while messages are pending: bounded by count
and characters, oldest forgotten first (the log still has them)."""

from __future__ import annotations

from projections.model import Message, MessageType
from streams.worker.bodies import MessageBodies


def said(i: int, chars: int = 2) -> Message:
    return Message(channel="c", sender="s", type=MessageType.STATUS, content=str(i).rjust(chars))


def test_bodies_are_kept_per_channel_and_forgotten_through_an_offset() -> None:
    bodies = MessageBodies(max_messages=100, max_chars=10_000)
    for i in range(5):
        bodies.keep("a", i, said(i))
        bodies.keep("b", 10 + i, said(10 + i))

    bodies.drop_through("a", 2)

    assert sorted(bodies.of("a")) == [3, 4] and sorted(bodies.of("b")) == list(range(10, 15))
    assert len(bodies) == 7 and bodies.chars == 14
    bodies.drop_through("a", 4)
    bodies.drop_through("unknown", 4)
    assert bodies.of("a") == {} and len(bodies) == 5


def test_the_count_bound_forgets_the_oldest_first() -> None:
    bodies = MessageBodies(max_messages=3, max_chars=10_000)
    for i in range(5):
        bodies.keep("a" if i % 2 else "b", i, said(i))

    assert len(bodies) == 3
    assert sorted(bodies.of("a")) == [3] and sorted(bodies.of("b")) == [2, 4]


def test_the_character_bound_holds_and_a_kept_body_is_not_counted_twice() -> None:
    bodies = MessageBodies(max_messages=100, max_chars=250)
    for i in range(5):
        bodies.keep("a", i, said(i, chars=100))
        bodies.keep("a", i, said(i, chars=100))  # redelivered

    assert bodies.chars <= 250 and sorted(bodies.of("a")) == [3, 4]
    assert bodies.chars == 200


def test_of_is_a_copy() -> None:
    bodies = MessageBodies()
    bodies.keep("a", 0, said(0))
    bodies.of("a").clear()
    assert sorted(bodies.of("a")) == [0]
