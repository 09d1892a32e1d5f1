"""Replay: `chorus replay`'s fold of the messages topic against a raw aiokafka read.

Uses `streams.replay.measure_replay_vs_raw` (the replay command's own measurement: raw read
first and last, the better counting; decode-only; full replay in one process, then in one
process per CPU over shares of the partitions, `replay_messages_per_s` being the better of the
two) when it is there. Without it,
a minimal replay loop stands in: the worker's validation (`validate_record`) and the pure
`step` per record, states kept in memory, next to a raw read of the same topic.
"""

from __future__ import annotations

import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.limits import aiokafka_read
from streams.settings import Settings


async def measure(settings: Settings, messages: int) -> dict[str, Any]:
    try:  # another checkout (BENCH_WORKER_SRC) may have no such function
        from streams.replay import measure_replay_vs_raw
    except ImportError:
        return await _minimal(settings, messages)
    benchmark = await measure_replay_vs_raw(settings)
    return {"implementation": "streams.replay.measure_replay_vs_raw", **benchmark.as_json()}


async def _minimal(settings: Settings, messages: int) -> dict[str, Any]:
    from projections.channel import step
    from projections.model import MessageError
    from projections.projection import Folded
    from streams.records import validate_record
    from streams.registry import registered_projections

    bootstrap = settings.bootstrap_servers or ""
    topic = settings.topic("messages")
    raw_first = await aiokafka_read(bootstrap, topic, messages)
    projections = registered_projections(settings.projections, settings)
    states: dict[str, dict[str, Folded | None]] = {}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 << 20,
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        await consumer.beginning_offsets(tps)
        seen = 0
        started = time.perf_counter()
        while seen < messages:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    seen += 1
                    try:
                        message = validate_record(
                            record.key,
                            record.value,
                            settings.max_message_bytes,
                            partition=record.partition,
                            partitions=len(tps),
                        )
                    except MessageError:
                        continue
                    stored = states.setdefault(message.channel, {})
                    for done in step(projections, stored, message, record.offset):
                        stored[done.projection.name] = done.folded
        seconds = time.perf_counter() - started
    finally:
        await consumer.stop()
    raw_second = await aiokafka_read(bootstrap, topic, messages)
    raw = max(raw_first["msgs_per_s"], raw_second["msgs_per_s"])
    rate = seen / seconds
    return {
        "implementation": "bench minimal replay (streams.replay not available)",
        "messages": seen,
        "raw_messages_per_s": round(raw),
        "replay_messages_per_s": round(rate),
        "replay_vs_raw": round(rate / raw, 3),
    }
