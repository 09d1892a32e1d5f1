"""`streams.kafka.clients` against the real broker."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from aiokafka import TopicPartition

from streams.kafka.clients import consumer, drop_fetched_ahead, started
from streams.settings import Settings

pytestmark = pytest.mark.kafka


async def test_a_consumer_stopped_after_dropping_what_it_fetched_ahead_keeps_none_of_it(
    chorus_settings: Settings, filled_topic: str, frozen: None
) -> None:
    """What a consumer fetched and did not return is freed when it stops, though a role
    froze it (bug 25; without `drop_fetched_ahead`, the rest of the 1 MiB fetch stays)."""
    tracemalloc.start()
    try:
        kafka = consumer(chorus_settings, enable_auto_commit=False, group_id=None)
        await started(kafka, chorus_settings)
        tp = TopicPartition(filled_topic, 0)
        kafka.assign([tp])
        kafka.seek(tp, 0)
        batch = await kafka.getmany(tp, timeout_ms=10_000, max_records=3)
        assert [record.offset for record in batch[tp]] == [0, 1, 2]
        gc.freeze()
        drop_fetched_ahead(kafka)
        await kafka.stop()
        del kafka, batch
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert held < 2**20 / 2, f"{held / 2**20:.2f} MiB still held after the stop"
