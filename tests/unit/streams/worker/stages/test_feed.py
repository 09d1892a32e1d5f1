"""streams.worker.stages.feed: the context role's messages reach its followers in log order,
never past a gap, and what the fold's gate refuses is skipped without a second dead letter."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from projections.model import Message, MessageType, encode_message
from streams.settings import Settings
from streams.worker.checkpoint import Checkpoint
from streams.worker.runtime import Runtime
from streams.worker.stages.feed import Feed


class Positions(dict[str, Any]):
    """The positions table's store, with a Faust table's name."""

    name = "context-positions"


class Topic:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, **record: Any) -> None:
        self.sent.append(record)

    def get_topic_name(self) -> str:
        return "t.messages"


def feed_with(followed: list[tuple[str, int]]) -> tuple[Feed, Any]:
    seeks: list[tuple[Any, int]] = []

    async def seek(partition: Any, offset: int) -> None:
        seeks.append((partition, offset))

    async def follower(message: Message, partition: int, offset: int) -> None:
        followed.append((message.content or "", offset))

    class Chorus(SimpleNamespace):
        """The part of `Runtime` the feed uses: its gap guard, gate and dead letters."""

        in_order = Runtime.in_order
        next_offset = Runtime.next_offset
        validate = Runtime.validate
        dead_letter = Runtime.dead_letter

    app = SimpleNamespace(consumer=SimpleNamespace(seek=seek))
    checkpoint = Checkpoint(app, "t.messages", interval=5.0, max_keys=10, max_held=10)
    chorus = Chorus(
        settings=Settings(),
        positions=checkpoint.table(Positions()),
        checkpoint=checkpoint,
        messages=Topic(),
        dead_letters=Topic(),
        app=app,
        messages_partitions=lambda: 1,
        seeks=seeks,
    )
    return Feed(chorus, [follower]), chorus  # type: ignore[arg-type]


def said(n: int) -> bytes:
    return encode_message(
        Message(channel="feed/room", sender="ann", type=MessageType.STATUS, content=f"m{n}")
    )


async def test_a_jump_is_sought_back_and_redeliveries_reach_the_followers_again() -> None:
    followed: list[tuple[str, int]] = []
    feed, chorus = feed_with(followed)
    for offset in (0, 1, 3, 2, 3, 3):
        await feed.on_record(b"feed/room", said(offset), 0, offset)
    assert followed == [("m0", 0), ("m1", 1), ("m2", 2), ("m3", 3), ("m3", 3)]
    assert [offset for _, offset in chorus.seeks] == [2]
    assert chorus.next_offset(0) == 4


async def test_a_record_the_gate_refuses_is_skipped_without_a_dead_letter() -> None:
    followed: list[tuple[str, int]] = []
    feed, chorus = feed_with(followed)
    await feed.on_record(b"feed/room", b"{not json", 0, 0)
    await feed.on_record(b"feed/room", said(1), 0, 1)
    assert followed == [("m1", 1)]
    assert chorus.dead_letters.sent == []  # the fold role dead-letters it


async def test_a_follower_that_raises_is_dead_lettered_and_the_next_record_goes_on() -> None:
    feed, chorus = feed_with([])

    async def broken(message: Message, partition: int, offset: int) -> None:
        raise RuntimeError("boom")

    feed.followers = [broken]
    await feed.on_record(b"feed/room", said(0), 0, 0)
    assert len(chorus.dead_letters.sent) == 1
    assert chorus.next_offset(0) == 1
