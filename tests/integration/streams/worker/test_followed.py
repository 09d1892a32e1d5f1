"""streams.worker.followed on a real broker: a role follows `chorus.summaries` with a
consumer of its own; a restart, and a worker taking partitions over, read only what was
published after the positions the role checkpointed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from streams.kafka.clients import producer, started
from streams.kafka.consume import read_topic
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.records import SummaryRecord, key_partition
from streams.settings import Settings
from streams.testing import WorkerProcess, free_web_port
from streams.topology import POSITIONS_TABLE, SUMMARIES, changelog_name
from tests.conftest import owned_partitions
from tests.factories import conversation

pytestmark = pytest.mark.kafka

CHANNEL = "team/followed"


async def publish_summaries(
    settings: Settings, first: int, count: int, channels: Sequence[str] = (CHANNEL,)
) -> dict[int, int]:
    """`count` summaries of each of `channels` on chorus.summaries, covering through
    `first`, `first` + 1...; per partition, the offset after its last."""
    kafka = await started(producer(settings), settings)
    ends: dict[int, int] = {}
    try:
        for last in range(first, first + count):
            for channel in channels:
                key = channel.encode()
                partition = key_partition(key, settings.partitions)
                record = SummaryRecord(channel=channel, text=f"through {last}", last_offset=last)
                sent = await kafka.send_and_wait(
                    settings.topic(SUMMARIES), record.to_bytes(), key=key, partition=partition
                )
                ends[partition] = int(sent.offset) + 1
    finally:
        await kafka.stop()
    return ends


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


async def positions_written(
    settings: Settings, ends: dict[int, int], timeout: float = 60.0
) -> None:
    """Until the fold role's positions changelog holds, for each partition of `ends`, its
    end as how far it read that partition of chorus.summaries."""
    changelog = changelog_name(settings, POSITIONS_TABLE["fold"])
    wanted = {f"read|{settings.topic(SUMMARIES)}|{p}": end for p, end in ends.items()}

    async def written() -> None:
        async for record in read_topic(settings, changelog, follow=True):
            key = (record.key or "").strip('"')
            if wanted.get(key) == record.value:
                del wanted[key]
                if not wanted:
                    return

    try:
        await asyncio.wait_for(written(), timeout)
    except TimeoutError:
        pytest.fail(f"{changelog} never held these positions: {wanted}")


async def test_a_warm_restart_reads_only_the_summaries_published_since_its_position(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker()
    ends = await publish_summaries(chorus_settings, 0, 20)
    await until(lambda: followed_records(worker, chorus_settings) >= 20)
    await positions_written(chorus_settings, ends)
    worker.stop()

    await publish_summaries(chorus_settings, 20, 5)
    again = start_worker()  # the same data directory: a warm start
    await until(lambda: followed_records(again, chorus_settings) >= 5)
    assert followed_records(again, chorus_settings) == 5  # not the 20 before its position


def summary_of(worker: WorkerProcess, channel: str) -> str | None:
    """The channel's summary as the views answer it (routed to its owner)."""
    answer = worker.get(f"/channels/{channel}/summary")
    content = answer.json().get("content") if answer.status_code == 200 else None
    return content.split("\n")[0] if content else None


async def test_partitions_moving_to_another_worker_are_read_on_from_their_positions(
    chorus_settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    settings = chorus_settings
    await create_topics(settings)
    quiet = {"CHORUS_SUMMARY_AFTER_MESSAGES": "1000"}  # the summaries are the test's
    first = start_worker(**quiet)
    channels = [f"team/moved-{i}" for i in range(12)]
    assert len({key_partition(c.encode(), settings.partitions) for c in channels}) > 1
    await send_messages(settings, conversation(channels, 5 * len(channels)))
    ends = await publish_summaries(settings, 0, 1, channels)
    await until(lambda: all(summary_of(first, c) == "through 0" for c in channels))
    await positions_written(settings, ends)

    second = start_worker(
        **quiet,
        CHORUS_WEB_PORT=str(free_web_port(taken=int(first.env["CHORUS_WEB_PORT"]))),
        CHORUS_DATA_DIR=str(tmp_path / "second-data"),
    )
    await until(
        lambda: all(owned_partitions(first, settings).get(w.base_url) for w in (first, second))
    )
    await publish_summaries(settings, 1, 1, channels)
    await until(lambda: all(summary_of(first, c) == "through 1" for c in channels))
    taken = owned_partitions(first, settings)[second.base_url]
    # It read its partitions from the first worker's positions: only what came after.
    its_channels = [c for c in channels if key_partition(c.encode(), settings.partitions) in taken]
    assert followed_records(second, settings) == len(its_channels) > 0
