"""Static membership against a real broker: a stopped static member keeps its place in the
group until it leaves by its instance id (streams.kafka.groups.leave_group)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer

from streams.kafka.clients import admin, client_options, started
from streams.kafka.groups import leave_group
from streams.ops.topics import create_topics
from streams.settings import Settings
from streams.topology import MESSAGES

pytestmark = pytest.mark.kafka


async def members(settings: Settings, group: str) -> list[str]:
    client = await started(admin(settings), settings)
    try:
        (described,) = await client.describe_consumer_groups([group])
    finally:
        await client.close()
    return [member[0] for member in described.groups[0][5]]


async def test_a_static_member_stays_after_it_stops_until_it_leaves(
    chorus_settings: Settings,
) -> None:
    settings = chorus_settings
    await create_topics(settings)
    group = f"{settings.app_id}-static"
    consumer = AIOKafkaConsumer(
        settings.topic(MESSAGES),
        group_id=group,
        group_instance_id="worker-1",
        session_timeout_ms=60_000,
        **client_options(settings),
    )
    await consumer.start()
    try:
        await asyncio.wait_for(_assigned(consumer), 30)
    finally:
        await consumer.stop()
    assert len(await members(settings, group)) == 1  # no LeaveGroup from a static member

    assert await leave_group(settings, group, "worker-1")
    assert await members(settings, group) == []
    assert await leave_group(settings, group, "worker-1")  # nothing left to leave: fine


async def _assigned(consumer: AIOKafkaConsumer) -> None:
    while not consumer.assignment():
        await consumer.getmany(timeout_ms=200)
