"""`streams.kafka.consume` against the real broker."""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc

import pytest
from aiokafka import TopicPartition

from streams.kafka.consume import RangeReader
from streams.settings import Settings
from tests.integration.streams.kafka.conftest import RECORDS

pytestmark = pytest.mark.kafka

READS = 20


async def fetched_ahead(reader: RangeReader, tp: TopicPartition) -> None:
    """Once the reader's consumer has had the fetch ahead it starts when a read returns
    answered."""
    kafka = reader._kafka
    assert kafka is not None
    read_answered = kafka.last_poll_timestamp(tp)
    deadline = time.monotonic() + 10
    while kafka.last_poll_timestamp(tp) == read_answered:
        assert time.monotonic() < deadline, "the consumer fetched nothing ahead in 10 s"
        await asyncio.sleep(0.01)


async def test_reads_leave_nothing_their_consumer_fetched_ahead_for_the_collector(
    chorus_settings: Settings, filled_topic: str, frozen: None
) -> None:
    """Bug 25: each read left its consumer's fetch ahead (up to 1 MiB) to be dropped by the
    next read's seek, in a reference cycle only the cyclic collector frees; a role freezes
    it first, so every read kept about a MiB for good (11.8 MiB after 20 reads here)."""
    reader = RangeReader(chorus_settings, filled_topic, chorus_settings.bootstrap_servers)
    step = RECORDS // (READS + 1)
    tp = TopicPartition(filled_topic, 0)
    try:
        await reader.read(0, 0, 0, lambda record: record.offset)  # started, and warm
        await fetched_ahead(reader, tp)
        gc.freeze()
        tracemalloc.start()
        for read in range(1, READS + 1):
            first = read * step
            found = await reader.read(0, first, first + 2, lambda record: record.offset)
            assert [offset for offset, _ in found] == [first, first + 1, first + 2]
            await fetched_ahead(reader, tp)
            gc.freeze()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await reader.stop()

    # One fetch ahead (the last read's) may still be alive: not one per read.
    assert held < 3 * 2**20, f"{held / 2**20:.1f} MiB still held after {READS} reads"
