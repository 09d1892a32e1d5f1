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
    return {
        "implementation": "streams.replay.measure_replay_vs_raw",
        **benchmark.as_json(),
        "cpu_us_per_message": await cpu_breakdown(settings),
    }


async def cpu_breakdown(settings: Settings) -> dict[str, float]:
    """Where one process's replay spends its CPU, per message: the raw read (a no-op
    `read_spans`), then, over the topic's records held in memory, JSON parsing alone, the
    worker's whole gate (`validate_record`: parse, pydantic, key and partition), each
    projection's `apply`, and each projection's size rule (`dump_state` and encoding, which
    the fold step and replay run on every changed state). Best of three runs each, process
    CPU time divided by the topic's record count."""
    import orjson

    from projections.channel import oversize
    from projections.model import MessageError
    from projections.projection import dump_state
    from streams.records import validate_record
    from streams.registry import registered_projections
    from streams.replay.log import read_spans, reading, topic_spans
    from streams.topology import MESSAGES

    topic = settings.topic(MESSAGES)
    held: list[tuple[int, Any]] = []
    read_cpu = float("inf")
    for keep in (False, False, True):
        async with reading(settings) as kafka:
            spans = await topic_spans(kafka, topic)
            started = time.process_time()
            if keep:
                await read_spans(kafka, topic, spans, lambda p, rs: held.extend((p, r) for r in rs))
            else:
                await read_spans(kafka, topic, spans, lambda _p, _r: None)
                read_cpu = min(read_cpu, time.process_time() - started)
    partitions = len(spans)

    def valid() -> list[Any]:
        out = []
        for partition, record in held:
            try:
                out.append(
                    validate_record(
                        record.key,
                        record.value,
                        settings.max_message_bytes,
                        partition=partition,
                        partitions=partitions,
                    )
                )
            except MessageError:
                continue
        return out

    def cost(work: Any) -> float:
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            work()
            best = min(best, time.process_time() - started)
        return best * 1e6 / max(1, len(held))

    messages = valid()
    result = {
        "raw_read": read_cpu * 1e6 / max(1, len(held)),
        "json_parse": cost(lambda: [orjson.loads(r.value) for _, r in held if r.value]),
        "validate_record": cost(valid),
    }
    for projection in registered_projections(settings.projections, settings):
        states: dict[str, Any] = {}
        applied = []
        for message in messages:
            old = states.get(message.channel, projection.identity())
            states[message.channel] = new = projection.apply(old, message)
            if new is not old:  # replay checks the size of a changed state only
                applied.append(new)

        def fold(projection: Any = projection) -> None:
            kept: dict[str, Any] = {}
            for message in messages:
                kept[message.channel] = projection.apply(
                    kept.get(message.channel, projection.identity()), message
                )

        result[f"{projection.name}_apply"] = cost(fold)
        result[f"{projection.name}_size_rule"] = cost(
            lambda applied=applied: [
                oversize(dump_state(s), settings.max_state_bytes) for s in applied
            ]
        )
    return {name: round(value, 2) for name, value in result.items()}


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
