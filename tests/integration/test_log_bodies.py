"""The log is the one copy of message bodies: the summary stage keeps positions, and a
restarted worker reads the pending messages back from `chorus.messages`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from streams.interfaces.control import configure_channel
from streams.kafka.clients import producer
from streams.kafka.consume import RangeReader
from streams.ops.topics import create_topics
from streams.records import key_partition
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_until

pytestmark = pytest.mark.kafka

CHANNEL = "bodies/room"
PENDING = 12


def neighbour_of(channel: str, partitions: int) -> str:
    """Another channel on the same partition, so its records sit between the channel's."""
    home = key_partition(channel.encode(), partitions)
    return next(
        name
        for i in range(1000)
        for name in [f"bodies/neighbour-{i}"]
        if key_partition(name.encode(), partitions) == home
    )


async def produce_interleaved(settings: Settings) -> tuple[int, list[int]]:
    """The channel's messages with a neighbour's and an invalid record of its own between
    them, all on its partition; (partition, the channel's valid offsets)."""
    home = key_partition(CHANNEL.encode(), settings.partitions)
    neighbour = neighbour_of(CHANNEL, settings.partitions)
    offsets: list[int] = []
    kafka = producer(settings)
    await kafka.start()
    try:
        for i in range(PENDING):
            said = f"pending point {i}: the shard rollout needs review before Friday"
            message = {"channel": CHANNEL, "sender": f"dev{i % 3}", "type": "STATUS"}
            sent = await kafka.send_and_wait(
                settings.topic("messages"),
                key=CHANNEL.encode(),
                value=orjson.dumps({**message, "content": said}),
                partition=home,
            )
            offsets.append(sent.offset)
            other = {"channel": neighbour, "sender": "nora", "type": "STATUS"}
            await kafka.send_and_wait(
                settings.topic("messages"),
                key=neighbour.encode(),
                value=orjson.dumps({**other, "content": "the neighbour talks about lunch"}),
                partition=home,
            )
            if i % 4 == 0:
                await kafka.send_and_wait(
                    settings.topic("messages"), key=CHANNEL.encode(), value=b"{not", partition=home
                )
    finally:
        await kafka.stop()
    return home, offsets


def folded_count(worker: WorkerProcess) -> int:
    answer = worker.get(f"/channels/{CHANNEL}/state")
    if answer.status_code != 200:
        return 0
    overview: dict[str, Any] = answer.json()["projections"]["overview"]["state"]
    return int(overview["message_count"])


async def test_a_restarted_worker_summarises_pending_messages_read_back_from_the_log(
    chorus_settings: Settings, start_worker: Any
) -> None:
    await create_topics(chorus_settings)
    quiet = {"CHORUS_SUMMARY_AFTER_MESSAGES": "1000", "CHORUS_SUMMARY_AFTER_SECONDS": "3600"}
    first: WorkerProcess = start_worker(**quiet)
    _, offsets = await produce_interleaved(chorus_settings)
    deadline = time.monotonic() + 60
    while folded_count(first) < PENDING:
        assert time.monotonic() < deadline, "the first worker did not fold the messages"
        await asyncio.sleep(0.25)
    first.stop()  # its memory held the pending bodies; no table did

    second: WorkerProcess = start_worker(**quiet)
    # The recap window too is positions: the context's recent messages come from the log.
    context = second.get(f"/channels/{CHANNEL}/context?max_tokens=4000").json()
    recent = [m["content"] for m in context["parts"]["messages"]["shown"]]
    assert recent[-1].startswith(f"pending point {PENDING - 1}:") and len(recent) == PENDING
    assert not any("lunch" in said for said in recent)
    # Now the pending batch is due: its bodies are read back from the log (the context role
    # summarises in a process of its own, so it is told only after the context was read).
    await configure_channel(chorus_settings, CHANNEL, summary_after_seconds=1)
    records = await read_until(
        chorus_settings, "summaries", lambda rs: any(r.key == CHANNEL for r in rs), 90
    )

    summary = next(r.value for r in records if r.key == CHANNEL)
    assert summary["total_messages"] == PENDING
    assert (summary["first_offset"], summary["last_offset"]) == (offsets[0], offsets[-1])
    text = summary["text"].lower()
    assert "shard rollout" in text and "lunch" not in text


async def test_the_range_reader_keeps_what_it_is_asked_for_and_stops_at_the_end(
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    home, offsets = await produce_interleaved(chorus_settings)
    reader = RangeReader(
        chorus_settings, chorus_settings.topic("messages"), chorus_settings.bootstrap_servers
    )
    key = CHANNEL.encode()

    def of_the_channel(record: Any) -> Any:
        return record if record.key == key else None

    try:
        middle = await reader.read(home, offsets[2], offsets[5], of_the_channel)
        first_two = await reader.read(home, offsets[0], offsets[-1], of_the_channel, limit=2)
        past_the_end = await reader.read(home, offsets[-2], offsets[-1] + 10_000, lambda r: r)
    finally:
        await reader.stop()

    valid = [offset for offset, record in middle if record.value != b"{not"]
    assert valid == offsets[2:6] and all(record.key == key for _, record in middle)
    assert [offset for offset, _ in first_two] == [offsets[0], offsets[0] + 2]  # then it stops
    assert past_the_end[0][0] == offsets[-2]
    assert past_the_end[-1][0] == offsets[-1] + 1  # the neighbour's record after it
