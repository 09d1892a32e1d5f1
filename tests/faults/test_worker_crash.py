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
from types import SimpleNamespace

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


class _Chorus(SimpleNamespace):
    """Stands in for streams.worker.runtime.Runtime: any other table the fold keeps is a dict."""

    def __getattr__(self, name: str) -> dict[str, object]:
        table: dict[str, object] = {}
        setattr(self, name, table)
        return table


class _Topic:
    def __init__(self) -> None:
        self.sent: list[dict[str, object]] = []

    async def send(self, **record: object) -> None:
        self.sent.append(record)

    def get_topic_name(self) -> str:
        return "t.messages"


async def _publish(topic: _Topic, records: list[tuple[object, object, object]]) -> list[object]:
    """Runtime.publish's stand-in: every record acknowledged, none refused."""
    for key, value, partition in records:
        topic.sent.append({"key": key, "value": value, "partition": partition})
    return []


async def _acknowledged() -> None:
    """Runtime.acknowledged's stand-in: nothing is in flight."""


async def test_a_fold_never_applies_past_a_gap_in_its_partition() -> None:
    """The consumer delivers 0, 1, 3 (2 went missing), then 2 and 3 again after a seek.

    `chorus.messages` has no compaction and no transactions, so its offsets are contiguous:
    a jump is a consumer fault, not a hole in the log. The fold must not apply 3 before 2.
    """
    from projections.commitments import CommitmentProjection
    from projections.model import encode_message
    from projections.overview import ChannelOverviewProjection
    from streams.fold_store import whole_fold
    from streams.worker.configs import ChannelConfigs
    from streams.worker.stages.fold import Folder, signal_of
    from streams.worker.staging import Staging
    from tests.faults.support import expected_state

    seeks: list[tuple[object, int]] = []

    async def seek(partition: object, offset: int) -> None:  # faust's Consumer.seek is async
        seeks.append((partition, offset))

    chorus = _Chorus(
        settings=Settings(),
        projections=[CommitmentProjection(), ChannelOverviewProjection()],
        folds={"commitments": {}, "overview": {}},
        parts={"commitments": {}, "overview": {}},  # split folds' second tables
        acknowledged=_acknowledged,
        configs=ChannelConfigs({}),
        driver_events=_Topic(),
        dead_letters=_Topic(),
        messages=_Topic(),
        app=SimpleNamespace(consumer=SimpleNamespace(seek=seek)),
        staging=Staging(),
        messages_partitions=lambda: 1,  # every record of partition 0 is at home
        publish=_publish,
    )
    folder = Folder(chorus)  # type: ignore[arg-type]
    messages = traffic(["gap/room"], 4, seed=5)
    for offset in (0, 1, 3, 2, 3):
        message = messages[offset]
        woken = await folder.on_record(message.channel.encode(), encode_message(message), 0, offset)
        await folder.wake([signal_of(event, 1024 * 1024) for event in woken])
    live = {
        name: whole_fold(chorus.folds[name]["gap/room"], chorus.parts[name].get, "gap/room").state
        for name in ("commitments", "overview")
    }
    assert live == expected_state(messages)
    woken_at = [orjson.loads(sent["value"])["offset"] for sent in chorus.driver_events.sent]
    assert woken_at == [0, 1, 2, 3]  # the jump to 3 woke nobody: it was sought back
