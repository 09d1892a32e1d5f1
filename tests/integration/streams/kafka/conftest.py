"""A topic with a partition of records worth several fetches, and a role's freezes."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest
from aiokafka.admin import NewTopic

from streams.kafka.clients import admin, producer
from streams.settings import Settings

# Enough records that a fetch (1 MiB by default) is full wherever a read starts.
RECORDS = 12_000
RECORD_BYTES = 300


@pytest.fixture
async def filled_topic(chorus_settings: Settings) -> str:
    """A one-partition topic holding RECORDS records of RECORD_BYTES incompressible bytes."""
    topic = chorus_settings.topic("filled")
    client = admin(chorus_settings)
    await client.start()
    try:
        await client.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await client.close()
    kafka = producer(chorus_settings, linger_ms=20)
    await kafka.start()
    try:
        for _ in range(RECORDS):
            await kafka.send(topic, os.urandom(RECORD_BYTES // 2).hex().encode(), partition=0)
        await kafka.flush()
    finally:
        await kafka.stop()
    return topic


@pytest.fixture
def frozen() -> Iterator[None]:
    """For a test that freezes what is alive, as a worker role does after each batch
    (`streams.worker.collector`): the collector's lists are whole again after it."""
    try:
        yield
    finally:
        gc.unfreeze()
