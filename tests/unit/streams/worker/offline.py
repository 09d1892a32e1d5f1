"""A role with no broker, for the worker's unit tests: its stage on chorus.messages takes
what `taking` hands it (Faust's test harness drives its other agents), its tables are in
memory, and its checkpoints write to an `OfflineProducer`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any, TypeVar
from unittest.mock import patch

from faust.exceptions import NotReady
from faust.types import Message

from streams.kafka.batches import Outbox, Published
from streams.settings import Settings
from streams.testing import OfflineProducer
from streams.topology import Role
from streams.worker.compose import Stage, Worker, build_worker
from streams.worker.runtime import Runtime


def offline_settings(**settings: Any) -> Settings:
    offline = {"store": "memory://", "topic_prefix": "offline.", "bootstrap_servers": "x:1"}
    return Settings(**{**offline, **settings})


def offline_worker(
    role: Role = "fold", stages: tuple[Stage, ...] | None = None, **settings: Any
) -> Worker:
    """`role` (its default stages unless named) with no broker (see the module)."""
    worker = build_worker(
        offline_settings(**settings), broker="127.0.0.1:1", role=role, stages=stages
    )
    changelogs = OfflineProducer()

    async def offline() -> OfflineProducer:
        return changelogs

    worker.runtime.checkpoint.producer = offline
    return worker


# Hands the stage a record of chorus.messages (`value`, key=, partition=) and returns once
# the stage has taken its batch.
Put = Callable[..., Awaitable[Message]]


@asynccontextmanager
async def taking(runtime: Runtime) -> AsyncIterator[Put]:
    """The role's stage on chorus.messages, taking the records `put` hands it as the
    consumer hands a lot over (`Intake.put`), each in the group's current generation; their
    offsets count from 0 over all partitions (as Faust's agent test harness counts them)."""
    intake, app = runtime.intake, runtime.app
    assert intake is not None
    app.flow_control.resume()  # as after the first assignment
    topic = runtime.messages.get_topic_name()
    taker = app.lot_takers[topic]
    task = asyncio.ensure_future(intake.run())
    sent = 0

    async def put(value: bytes, key: bytes | None = None, partition: int = 0) -> Message:
        nonlocal sent
        message = Message(
            topic,
            partition,
            sent,
            time.time(),
            0,
            [],
            key,
            value,
            None,
            generation_id=app.consumer_generation_id,
        )
        sent += 1
        await taker([message])
        while intake.passed < sent and not task.done():
            await asyncio.sleep(0.001)
        if task.done():
            task.result()  # the stage's error, if it failed
        return message

    try:
        yield put
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class TopicRecords:
    """A topic's records by (partition, offset), read back as `RangeReader.read` does;
    `reads` lists each read's (first, last, limit)."""

    def __init__(self, key: bytes = b"") -> None:
        self.key = key
        self.records: dict[tuple[int, int], bytes | tuple[bytes, bytes]] = {}
        self.reads: list[tuple[int, int, int | None]] = []

    async def read(
        self, partition: int, first: int, last: int, take: Any, limit: int | None = None
    ) -> list[tuple[int, Any]]:
        self.reads.append((first, last, limit))
        found = []
        for offset in range(first, last + 1):
            kept = self.records.get((partition, offset))
            if kept is None:
                continue
            key, value = kept if isinstance(kept, tuple) else (self.key, kept)
            record = SimpleNamespace(offset=offset, value=value, key=key, timestamp=1000 + offset)
            taken = take(record)
            if taken is not None:
                found.append((offset, taken))
                if limit is not None and len(found) >= limit:
                    break
        return found


T = TypeVar("T")


async def turns_given(work: Coroutine[Any, Any, T]) -> tuple[T, int]:
    """`work`'s result, and how many turns of the event loop another task got while it ran
    (what the heartbeats, the fold and the views would get)."""
    task = asyncio.ensure_future(work)
    turns = 0
    while not task.done():
        turns += 1
        await asyncio.sleep(0)
    return await task, turns


async def stopped_while_publishing(
    runtime: Runtime, start: Callable[[], Awaitable[int]], outbox: Outbox
) -> int:
    """Start a stage's lots (`start`: how many it took), stop the role while their records
    wait for the broker (Faust's stop: `on_before_shutdown`, before its producer's), then
    fail that publish as Faust's stopped producer does; how many `start` took."""
    writing, producer_stopped = asyncio.Event(), asyncio.Event()

    async def publish(*_: Any) -> Published:
        writing.set()
        await producer_stopped.wait()  # the broker is slow: still writing as the role stops
        raise NotReady("Producer service not yet started")

    with patch.object(Runtime, "publish", publish):
        taken = await start()
        await asyncio.wait_for(writing.wait(), 5)
        await runtime.app.on_before_shutdown.send()
        producer_stopped.set()
        await asyncio.gather(*outbox._sending)  # the publish the lot waited on fails
    return taken
