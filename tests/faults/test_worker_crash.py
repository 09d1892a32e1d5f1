"""Fault 1: the worker is SIGKILLed again and again while channels are busy.

At the end every channel's live state equals a pure fold of its logged messages (so no
message was applied twice or skipped) and every message has its driver event.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable

import orjson
import pytest

from streams.settings import Settings
from tests.faults.conftest import FaultWorker
from tests.faults.support import (
    Producing,
    channel_names,
    check_driver_events,
    check_live_states,
    prepare_topics,
    read_messages,
    report,
    scaled,
    traffic,
)

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

MESSAGES = 20_000
CHANNELS = 100
KILLS = int(os.environ.get("CHORUS_FAULT_KILLS", "5"))


@pytest.mark.timeout(1200)
async def test_sigkilled_worker_loses_and_duplicates_nothing(
    chorus_settings: Settings,
    fault_workers: Callable[..., FaultWorker],
    fault_seed: int,
) -> None:
    settings = chorus_settings
    rng = random.Random(fault_seed)
    count = scaled(MESSAGES, minimum=CHANNELS * 5)
    channels = channel_names(CHANNELS, "crash")
    messages = traffic(channels, count, seed=fault_seed)
    await prepare_topics(settings)

    started = time.monotonic()
    worker = fault_workers()
    await asyncio.to_thread(worker.start)
    # Produce over roughly the time the kills take, so kills land while traffic arrives.
    producing = Producing(settings, messages, rate=count / (KILLS * 10.0))
    production = asyncio.create_task(producing.run())

    kills: list[dict[str, object]] = []
    for number in range(KILLS):
        # Seeded moments: some kills land during recovery, before the worker is ready.
        await asyncio.sleep(rng.uniform(1.0, 9.0))
        kills.append(
            {
                "uptime_s": round(time.monotonic() - worker.spawned_at, 1),
                "was_ready": await asyncio.to_thread(worker.is_ready),
                "acked_so_far": len(producing.acked),
            }
        )
        pid = worker.pid
        await asyncio.to_thread(worker.kill)
        assert not worker.alive(), f"kill {number + 1}: pid {pid} survived SIGKILL"
        worker = fault_workers()
        worker.spawn()
    await asyncio.to_thread(worker.wait_ready, 180.0)
    await asyncio.wait_for(production, 600)
    assert not producing.failed, producing.failed[:5]
    assert len(producing.acked) == count

    log = await read_messages(settings)
    assert sum(len(items) for items in log.by_channel.values()) == count
    assert {(a.partition, a.offset) for a in producing.acked} == set(log.positions)

    await check_live_states([worker.base_url], log, timeout=900)
    folded_at = time.monotonic()
    events = await check_driver_events(settings, log, timeout=120)
    assert worker.alive()

    elapsed = folded_at - started
    report(
        "worker crash (SIGKILL)",
        messages=count,
        channels=len(log.by_channel),
        kills=len(kills),
        kill_moments=kills,
        driver_events=events,
        redelivered_driver_events=events - count,
        seconds_to_all_folded=round(elapsed, 1),
        messages_per_second_including_restarts=round(count / elapsed, 1),
        lost=0,
        applied_twice=0,
    )


async def test_a_fold_never_applies_past_a_gap_in_its_partition() -> None:
    """The consumer delivers 0, 1, 3 (2 went missing), then 2 and 3 again after a seek.

    `chorus.messages` has no compaction and no transactions, so its offsets are contiguous:
    a jump is a consumer fault, not a hole in the log. The fold must not apply 3 before 2.
    """
    from projections.model import encode_message
    from streams.kafka.batches import Published
    from streams.worker.compose import build_worker
    from streams.worker.stages.fold import signal_of
    from tests.faults.support import expected_state

    settings = Settings(store="memory://", topic_prefix="gap.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1")
    chorus, folder = worker.runtime, worker.folder
    assert folder is not None
    seeks: list[tuple[object, int]] = []
    woken_at: list[int] = []

    async def seek(partition: object, offset: int) -> None:  # faust's Consumer.seek is async
        seeks.append((partition, offset))

    async def publish(topic: object, records: list[tuple[object, bytes, int]]) -> Published:
        woken_at.extend(orjson.loads(value)["offset"] for _, value, _ in records)
        return Published([0] * len(records), [])

    chorus.app.consumer.seek = seek  # type: ignore[method-assign]
    chorus.publish = publish  # type: ignore[method-assign]
    chorus.messages_partitions = lambda: 1  # type: ignore[method-assign]
    messages = traffic(["gap/room"], 4, seed=5)
    for offset in (0, 1, 3, 2, 3):
        message = messages[offset]
        woken = await folder.on_record(message.channel.encode(), encode_message(message), 0, offset)
        await folder.signal([signal_of(event, 1024 * 1024) for event in woken])
    live = {name: chorus.folds_of("gap/room").get(name) for name in ("commitments", "overview")}
    assert {name: folded.state for name, folded in live.items() if folded} == expected_state(
        messages
    )
    assert woken_at == [0, 1, 2, 3]  # the jump to 3 woke nobody: it was sought back
    assert [offset for _, offset in seeks] == [2]
