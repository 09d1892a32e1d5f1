"""The limit: how fast N records can be read at all, by Kafka's own tool and by aiokafka."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.common import log


def consumer_performance(lib: Path, bootstrap: str, topic: str, count: int) -> dict[str, Any]:
    """org.apache.kafka.tools.ConsumerPerformance over `count` records of `topic`."""
    command = [
        "java",
        "-Xmx512m",
        "-cp",
        f"{lib}/*",
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(count),
        "--group",
        f"bench-perf-{uuid.uuid4().hex[:6]}",
        "--timeout",
        "60000",
    ]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    wall = time.perf_counter() - started
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    header_index = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if proc.returncode != 0 or header_index is None or header_index + 1 >= len(lines):
        raise RuntimeError(
            f"ConsumerPerformance failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
            f"\n{proc.stderr[-2000:]}"
        )
    header = [h.strip() for h in lines[header_index].split(",")]
    values = [v.strip() for v in lines[header_index + 1].split(",")]
    row = dict(zip(header, values, strict=False))
    consumed = int(row["data.consumed.in.nMsg"])
    fetch_ms = float(row["fetch.time.ms"])
    return {
        "messages": consumed,
        "msgs_per_s": float(row["fetch.nMsg.sec"]),
        "mb_per_s": float(row["fetch.MB.sec"]),
        "fetch_seconds": fetch_ms / 1000.0,
        "rebalance_ms": float(row["rebalance.time.ms"]),
        "wall_seconds": wall,
    }


async def aiokafka_read(bootstrap: str, topic: str, count: int) -> dict[str, Any]:
    """A raw `getmany` loop over every partition from the beginning: no decoding, no group."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        await consumer.beginning_offsets(tps)  # connections are up before the clock starts
        seen = 0
        nbytes = 0
        # From assignment (the background fetcher starts then) to the last record;
        # ConsumerPerformance's fetch time likewise excludes joining its group.
        started = time.perf_counter()
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while seen < count:
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                seen += len(records)
                nbytes += sum(len(r.value or b"") for r in records)
        elapsed = time.perf_counter() - started
    finally:
        await consumer.stop()
    return {
        "messages": seen,
        "seconds": elapsed,
        "msgs_per_s": seen / elapsed,
        "mb_per_s": nbytes / elapsed / 1e6,
    }


async def measure_limits(
    lib: Path | None, bootstrap: str, topic: str, count: int, repeats: int
) -> dict[str, Any]:
    """Best of `repeats` for each reader (the limit is the fastest the machine manages)."""
    result: dict[str, Any] = {"repeats": repeats}
    runs = []
    for _ in range(repeats):
        runs.append(await aiokafka_read(bootstrap, topic, count))
        log(f"  aiokafka getmany: {runs[-1]['msgs_per_s']:,.0f} msg/s")
    result["aiokafka"] = max(runs, key=lambda r: r["msgs_per_s"]) | {
        "all_msgs_per_s": [r["msgs_per_s"] for r in runs]
    }
    if lib is not None:
        runs = []
        for _ in range(repeats):
            try:
                runs.append(consumer_performance(lib, bootstrap, topic, count))
                log(f"  ConsumerPerformance: {runs[-1]['msgs_per_s']:,.0f} msg/s")
            except Exception as error:
                log(f"  ConsumerPerformance failed: {error}")
        if runs:
            result["consumer_performance"] = max(runs, key=lambda r: r["msgs_per_s"]) | {
                "all_msgs_per_s": [r["msgs_per_s"] for r in runs]
            }
    return result
