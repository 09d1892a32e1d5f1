"""Fault 2: two workers in one group with a standby replica each; one is SIGKILLed mid-stream.

Its partitions move to the survivor, whose state for them comes from the changelogs (its
standby copy plus the rest of the changelog), and every channel still equals a replay of
its log. Then the killed worker comes back, the group splits the partitions again, and
the same end check holds on both.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.settings import Settings
from tests.conftest import free_web_port, owned_partitions
from tests.faults.conftest import FaultWorker
from tests.faults.support import (
    Producing,
    channel_names,
    check_driver_events,
    check_live_states,
    eventually,
    prepare_topics,
    read_messages,
    report,
    scaled,
    traffic,
)

pytestmark = [pytest.mark.kafka, pytest.mark.faults]


@pytest.mark.timeout(900)
async def test_killed_group_member_hands_over_from_changelogs_and_rejoins(
    chorus_settings: Settings,
    fault_workers: Callable[..., FaultWorker],
    fault_seed: int,
    tmp_path: Path,
) -> None:
    settings = chorus_settings
    rng = random.Random(fault_seed + 2)
    await prepare_topics(settings)
    channels = channel_names(60, "rebalance")
    first = scaled(6_000, minimum=300)
    second = scaled(2_000, minimum=100)
    messages = traffic(channels, first + second, seed=fault_seed + 2)
    group = {"CHORUS_STANDBY_REPLICAS": "1"}
    survivor = fault_workers(**group)
    victim_env = {
        **group,
        "CHORUS_WEB_PORT": str(free_web_port(taken=int(survivor.env["CHORUS_WEB_PORT"]))),
        "CHORUS_DATA_DIR": str(tmp_path / "worker-b-data"),
    }
    victim = fault_workers(**victim_env)
    survivor.spawn()
    victim.spawn()
    await asyncio.gather(
        asyncio.to_thread(survivor.wait_ready, 120.0), asyncio.to_thread(victim.wait_ready, 120.0)
    )
    everything = list(range(settings.partitions))

    def split() -> bool:
        hosts = owned_partitions(survivor, settings)
        return len(hosts) == 2 and all(hosts.values())

    await eventually(lambda: asyncio.to_thread(split), 90, 1.0, "partitions split over two")

    producing = Producing(settings, messages[:first], rate=first / 40.0)
    production = asyncio.create_task(producing.run())
    await asyncio.sleep(rng.uniform(5.0, 15.0))
    before = owned_partitions(survivor, settings)
    moved = before[victim.base_url]
    acked_at_kill = len(producing.acked)
    victim.kill()
    killed_at = time.monotonic()

    def took_over() -> bool:
        return owned_partitions(survivor, settings).get(survivor.base_url) == everything

    await eventually(lambda: asyncio.to_thread(took_over), 120, 0.5, "survivor owns everything")
    handover_seconds = time.monotonic() - killed_at
    await asyncio.wait_for(production, 300)
    assert not producing.failed and len(producing.acked) == first

    log = await read_messages(settings)
    await check_live_states([survivor.base_url], log, timeout=600)
    caught_up_seconds = time.monotonic() - killed_at
    await check_driver_events(settings, log, timeout=120)

    # The killed worker comes back with its old data dir; the group splits again.
    back = fault_workers(**victim_env)
    rejoin_started = time.monotonic()
    await asyncio.to_thread(back.start, 120.0)
    await eventually(lambda: asyncio.to_thread(split), 120, 1.0, "partitions split again")
    rejoin_seconds = time.monotonic() - rejoin_started
    after = owned_partitions(survivor, settings)
    more = Producing(settings, messages[first:], rate=second / 10.0)
    await asyncio.wait_for(more.run(), 300)
    assert not more.failed

    log = await read_messages(settings)
    await check_live_states([survivor.base_url, back.base_url], log, timeout=600)
    events = await check_driver_events(settings, log, timeout=120)
    assert survivor.alive() and back.alive()
    report(
        "rebalance (group member SIGKILLed, standby replicas 1)",
        messages=first + second,
        channels=len(log.by_channel),
        killed_after_acked=acked_at_kill,
        partitions_moved=moved,
        handover_s=round(handover_seconds, 1),
        caught_up_after_kill_s=round(caught_up_seconds, 1),
        rejoin_s=round(rejoin_seconds, 1),
        assignment_after_rejoin={
            ("survivor" if h == survivor.base_url else "rejoined"): p for h, p in after.items()
        },
        driver_events=events,
        lost=0,
        applied_twice=0,
    )


@pytest.mark.timeout(900)
async def test_rebalances_in_the_middle_of_checkpoints_lose_nothing_and_agree_with_a_replay(
    chorus_settings: Settings,
    fault_workers: Callable[..., FaultWorker],
    fault_seed: int,
    tmp_path: Path,
) -> None:
    """Issue 40: a member joins and leaves the group three times while messages flow and
    checkpoints run back to back (every 200 ms): each rebalance revokes partitions in the
    middle of a checkpoint's write. Nothing is lost, nothing applied twice, every channel
    equals a replay of its log, and every message has its driver event."""
    settings = chorus_settings
    rng = random.Random(fault_seed + 5)
    await prepare_topics(settings)
    channels = channel_names(40, "churn")
    total = scaled(4_000, minimum=400)
    messages = traffic(channels, total, seed=fault_seed + 5)
    busy = {"CHORUS_STANDBY_REPLICAS": "1", "CHORUS_CHECKPOINT_MS": "200"}
    stays = fault_workers(**busy)
    await asyncio.to_thread(stays.start, 120.0)
    producing = Producing(settings, messages, rate=total / 60.0)
    production = asyncio.create_task(producing.run())
    joins = []
    for round_ in range(3):
        await asyncio.sleep(rng.uniform(3.0, 8.0))
        joiner = fault_workers(
            **busy,
            CHORUS_WEB_PORT=str(free_web_port(taken=int(stays.env["CHORUS_WEB_PORT"]))),
            CHORUS_DATA_DIR=str(tmp_path / f"joiner-{round_}"),
        )
        started = time.monotonic()
        await asyncio.to_thread(joiner.start, 120.0)
        joins.append(round(time.monotonic() - started, 1))
        await asyncio.sleep(rng.uniform(2.0, 6.0))
        joiner.stop()  # SIGTERM: it hands its partitions back, mid-checkpoint
    await asyncio.wait_for(production, 300)
    assert not producing.failed and len(producing.acked) == total

    log = await read_messages(settings)
    await check_live_states([stays.base_url], log, timeout=600)
    events = await check_driver_events(settings, log, timeout=120)
    assert stays.alive()
    report(
        "rebalances in the middle of checkpoints (a member joins and leaves three times)",
        messages=total,
        channels=len(log.by_channel),
        joins_ready_s=joins,
        driver_events=events,
        lost=0,
        applied_twice=0,
    )
