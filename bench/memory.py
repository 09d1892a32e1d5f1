"""Memory: the worker's RSS per 10,000 active channels.

A fresh worker (rocksdb store, heuristic summaries), ready and idle, then new channels in
rounds (one real message each), every round folded, summarised-pending and recap-tracked
before RSS is read (psutil). The slope of RSS over channels is the figure; the state bytes
per channel (every projection's encoded state, as the channel's last driver event carries
it) are read back from the driver events. A round that is
not driven within `round_timeout` stops the phase: the worker has stalled at that many
channels, which is itself the finding (see docs/benchmarks.md, "timers").
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from bench.common import Phase, Worker, end_offsets, log, produce, read_records, wait_for_count
from bench.data import encoded_messages
from streams.conversations import Conversation
from streams.ops.topics import create_topics


async def measure(
    phase: Phase,
    conversations: list[Conversation],
    channels: int,
    projections: int,
    round_timeout: float,
    rounds: int = 4,
) -> dict[str, Any]:
    await create_topics(phase.settings())
    worker = Worker(phase.env(), phase.work / f"{phase.name}-worker.log", loglevel="info")
    worker.start(wait=True)
    stalled_at = None
    try:
        await asyncio.sleep(3)
        points = [(0, worker.rss())]
        # One message per channel, each channel's first (a shared stream would repeat some).
        records = []
        for index in range(channels):
            records.extend(encoded_messages(conversations, 1, 1, seed=index, tag=f"mem{index}"))
        step = max(1, channels // rounds)
        for upto in range(step, channels + 1, step):
            done = points[-1][0]
            await produce(phase.broker.bootstrap, phase.topic("messages"), records[done:upto])
            try:
                await wait_for_count(
                    phase.broker.bootstrap,
                    phase.topic("driver-events"),
                    upto * projections,
                    round_timeout,
                    alive=worker.check_alive,
                )
            except TimeoutError:
                stalled_at = upto
                log(f"  memory: not driven in {round_timeout:.0f}s at {upto:,} channels: stalled")
                break
            await asyncio.sleep(2)
            points.append((upto, worker.rss()))
            log(f"  memory: {upto:,} channels, RSS {points[-1][1] / 1e6:,.0f} MB")
    finally:
        worker.stop()
    result: dict[str, Any] = {
        "channels": points[-1][0],
        "channels_asked": channels,
        "stalled_at_channels": stalled_at,
        "rss_mb": [(c, r / 1e6) for c, r in points],
    }
    result.update(await state_bytes(phase.broker.bootstrap, phase.topic("driver-events")))
    if len(points) >= 2:
        (c0, r0), (c1, r1) = points[0], points[-1]
        result["mb_per_10k_channels"] = (r1 - r0) / (c1 - c0) * 10_000 / 1e6
    return result


async def state_bytes(bootstrap: str, topic: str) -> dict[str, Any]:
    """Mean and largest encoded live state per channel (all projections' `live` part: what a
    v3 driver event carries of the state), from each channel's last driver event."""
    latest: dict[str, int] = {}
    for partition, end in (await end_offsets(bootstrap, topic)).items():
        for record in await read_records(bootstrap, topic, partition, 0, end, keep_values=True):
            event = orjson.loads(record.value or b"{}")
            parts = event.get("projections") or {}
            latest[event["channel"]] = sum(
                len(orjson.dumps(entry.get("live"))) for entry in parts.values()
            )
    if not latest:
        return {}
    return {
        "state_bytes_per_channel": sum(latest.values()) / len(latest),
        "state_bytes_per_channel_max": max(latest.values()),
    }
