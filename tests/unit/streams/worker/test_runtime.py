"""streams.worker.runtime: what a role does as its partitions move."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from unittest.mock import patch

import pytest
from faust.exceptions import ConsumerNotStarted
from faust.types import TP, Message

from tests.unit.streams.worker.offline import offline_worker, taking


async def test_partitions_moving_have_the_next_checkpoint_collect_what_was_dropped() -> None:
    chorus = offline_worker().runtime
    assert not chorus.collector.moved
    await chorus.app.on_partitions_assigned.send({TP(chorus.messages.get_topic_name(), 0)})
    assert chorus.collector.moved  # `Collector.after_moved`: bug 25


async def test_the_stage_on_the_messages_holds_each_batch_until_a_checkpoint() -> None:
    chorus = offline_worker(stages=("config",)).runtime
    seen: list[list[int]] = []

    async def on_batch(batch: Sequence[Message]) -> None:
        seen.append([message.offset for message in batch])
        assert chorus.checkpoint.held == len(seen)  # held before the stage has them

    chorus.take_messages("test-messages", on_batch)
    async with taking(chorus) as put:
        taken = [await put(b"{}", key=b"k", partition=0) for _ in range(2)]
    assert seen == [[0], [1]] and chorus.checkpoint.held == 2
    assert not any(message.acked for message in taken)
    await chorus.checkpoint.checkpoint()
    assert all(message.acked for message in taken) and chorus.checkpoint.held == 0


async def test_a_batch_the_stage_fails_on_crashes_the_role() -> None:
    """Nothing of a batch the stage could not finish may be acknowledged as done: the role
    stops (the supervisor starts it again, and the records fold again from the commit)."""
    chorus = offline_worker(stages=("config",)).runtime
    crashed: list[BaseException] = []

    async def on_batch(batch: Sequence[Message]) -> None:
        raise RuntimeError("broken stage")

    async def crash(reason: BaseException) -> None:
        crashed.append(reason)

    chorus.take_messages("test-messages", on_batch)
    taken: list[Message] = []
    with patch.object(chorus.app, "crash", crash), pytest.raises(RuntimeError, match="broken"):
        async with taking(chorus) as put:
            taken.append(await put(b"{}", key=b"k", partition=0))
    assert [str(reason) for reason in crashed] == ["broken stage"]
    # Released unacknowledged: no checkpoint acknowledges it, Faust's wait is not held.
    assert chorus.checkpoint.held == 0
    await chorus.checkpoint.checkpoint()
    assert not chorus.app.consumer.unacked


async def test_a_stages_lots_are_cancelled_as_the_role_stops_and_none_starts_after() -> None:
    import asyncio

    chorus = offline_worker(stages=("config",)).runtime
    lots = chorus.lots()
    writing = asyncio.Event()
    finished: list[str] = []

    async def lot(name: str) -> None:
        writing.set()
        await asyncio.Event().wait()
        finished.append(name)

    lots.start(lot("first"))
    await asyncio.wait_for(writing.wait(), 5)
    assert len(lots) == 1 and not lots.stopped
    await chorus.app.on_before_shutdown.send()  # Faust's stop, before its producer's
    assert len(lots) == 0 and lots.stopped
    late = lot("late")
    lots.start(late)  # closed unstarted: never run, never warned about as never awaited
    assert late.cr_frame is None and len(lots) == 0 and finished == []


async def test_how_far_the_role_read_the_log_is_its_last_record_or_nothing_left_unread() -> None:
    """`unread`: the records past the next one to apply, as of the consumer's last fetch (0
    when not known); `read_through(at)`: a record stamped at or after `at` applied, or none
    left unread."""
    chorus = offline_worker("context", stages=("summaries",)).runtime
    highwater: dict[str, object] = {"at": 10}

    def last_fetched(_: TP) -> object:
        if isinstance(highwater["at"], Exception):
            raise highwater["at"]
        return highwater["at"]

    written = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    with patch.object(chorus.app.consumer, "highwater", last_fetched):
        assert chorus.unread(0) == 0  # nothing applied yet
        assert await chorus.in_order(0, 0, int(written.timestamp() * 1000))
        assert await chorus.in_order(0, 1)  # a record without a timestamp moves nothing
        assert chorus.unread(0) == 8
        assert chorus.read_through(0, written)
        assert not chorus.read_through(0, written + timedelta(milliseconds=1))
        highwater["at"] = 2
        assert chorus.unread(0) == 0 and chorus.read_through(0, written + timedelta(days=1))
        for unknown in (None, ConsumerNotStarted("not yet"), AssertionError("not assigned")):
            highwater["at"] = unknown
            assert chorus.unread(0) == 0


async def test_a_partition_that_moves_away_and_back_is_read_through_only_once_read_again() -> None:
    """How far the role read a partition in time is forgotten as the partition moves:
    taken over again, its records from the last checkpoint on are read again, and a time
    threshold falls due only once they are (bug 27's fix, kept across a move)."""
    chorus = offline_worker("context", stages=("summaries",)).runtime
    topic = chorus.messages.get_topic_name()
    written = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    with patch.object(chorus.app.consumer, "highwater", lambda _: 10):
        await chorus.app.on_partitions_assigned.send({TP(topic, 0)})
        assert await chorus.in_order(0, 0, int(written.timestamp() * 1000))
        assert chorus.read_through(0, written)
        await chorus.checkpoint.checkpoint()  # the next offset to apply, 1, kept
        await chorus.app.on_partitions_assigned.send(set())  # gone
        await chorus.app.on_partitions_assigned.send({TP(topic, 0)})  # taken over again
        assert chorus.unread(0) == 9
        assert not chorus.read_through(0, written)
        assert await chorus.in_order(0, 1, int(written.timestamp() * 1000))
        assert chorus.read_through(0, written)
