"""streams.worker.followed on a real broker: a role follows `chorus.summaries` with a
consumer of its own, and a restart reads only what was published since its position."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from streams.kafka.clients import producer, started
from streams.kafka.consume import read_topic
from streams.ops.topics import create_topics
from streams.records import SummaryRecord, key_partition
from streams.settings import Settings
from streams.testing import WorkerProcess
from streams.topology import POSITIONS_TABLE, SUMMARIES, changelog_name

pytestmark = pytest.mark.kafka

CHANNEL = "team/followed"


async def publish_summaries(settings: Settings, first: int, count: int) -> int:
    """`count` summaries of CHANNEL on chorus.summaries, covering through `first`...; the
    offset after the last."""
    kafka = await started(producer(settings), settings)
    key = CHANNEL.encode()
    partition = key_partition(key, settings.partitions)
    try:
        for last in range(first, first + count):
            record = SummaryRecord(channel=CHANNEL, text=f"through {last}", last_offset=last)
            sent = await kafka.send_and_wait(
                settings.topic(SUMMARIES), record.to_bytes(), key=key, partition=partition
            )
    finally:
        await kafka.stop()
    return int(sent.offset) + 1


def followed_records(worker: WorkerProcess, settings: Settings) -> float:
    """The fold role's count of summaries records read since it started."""
    wanted = f'chorus_followed_records_total{{topic="{settings.topic(SUMMARIES)}"}}'
    for line in worker.get("/metrics").text.splitlines():
        if line.startswith(wanted):
            return float(line.split()[-1])
    return 0.0


async def until(done: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not done():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail("the condition was not met in time")
        await asyncio.sleep(0.2)


async def position_written(settings: Settings, next_offset: int, timeout: float = 60.0) -> None:
    """Until the fold role's positions changelog holds `next_offset` as how far it read
    CHANNEL's partition of chorus.summaries."""
    partition = key_partition(CHANNEL.encode(), settings.partitions)
    key = f"read|{settings.topic(SUMMARIES)}|{partition}"
    changelog = changelog_name(settings, POSITIONS_TABLE["fold"])

    async def written() -> None:
        async for record in read_topic(settings, changelog, follow=True):
            if record.key is not None and key in record.key and record.value == next_offset:
                return

    try:
        await asyncio.wait_for(written(), timeout)
    except TimeoutError:
        pytest.fail(f"{changelog} never held {next_offset} for {key}")


async def test_a_warm_restart_reads_only_the_summaries_published_since_its_position(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker()
    end = await publish_summaries(chorus_settings, 0, 20)
    await until(lambda: followed_records(worker, chorus_settings) >= 20)
    await position_written(chorus_settings, end)
    worker.stop()

    await publish_summaries(chorus_settings, 20, 5)
    again = start_worker()  # the same data directory: a warm start
    await until(lambda: followed_records(again, chorus_settings) >= 5)
    assert followed_records(again, chorus_settings) == 5  # not the 20 before its position
