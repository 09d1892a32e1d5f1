"""Fault 9: one role's process is SIGKILLed under load while the other goes on.

`chorus worker` runs the fold and context roles as children of a supervisor; they share
data through Kafka topics only. Killing the context role must not slow the fold (driver
events keep flowing meanwhile), and every view of the fold role answers within a second
of asking while it is down (state, summary, recap, context, channels, recaps: the latest
summaries and recaps the topics hold); once the supervisor has restarted it, every message
is covered by a summary. Killing the fold role must not stop the summaries (they read the
log, not the fold), and the context role's own pages answer meanwhile; once it is back,
the fold resumes with no gap: every message has its driver event and every live state
equals the replay of the log.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from projections.summarise.pending import summarisable
from streams.settings import Settings
from streams.topology import DRIVER_EVENTS, SUMMARIES
from tests.faults.conftest import FaultWorker
from tests.faults.support import (
    LogMessages,
    Producing,
    answering_within,
    channel_names,
    check_driver_events,
    check_live_states,
    eventually,
    prepare_topics,
    read_all,
    read_messages,
    report,
    scaled,
    traffic,
)

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

MESSAGES = 4_000
CHANNELS = 40
# Produced over this long, so the kill, the restart and the rejoin land while traffic flows.
PRODUCE_SECONDS = 40.0
ROLE_SETTINGS = {
    "CHORUS_SUMMARY_AFTER_MESSAGES": "10",
    "CHORUS_SUMMARY_AFTER_SECONDS": "3",
}


def survivor_views(channel: str) -> list[str]:
    """Every public view of the fold role, for one channel of the traffic."""
    return [
        "/channels",
        "/recaps",
        f"/channels/{channel}/state",
        f"/channels/{channel}/summary",
        f"/channels/{channel}/recap",
        f"/channels/{channel}/context?max_tokens=1000",
    ]


async def count_records(settings: Settings, topic: str) -> int:
    return len(await read_all(settings, topic))


async def restarted(worker: FaultWorker, role: str, old_pid: int, timeout: float) -> int:
    """The new pid of `role` once the supervisor started it again and it is ready."""

    async def new_pid() -> int | None:
        pid = (await asyncio.to_thread(worker.role_pids)).get(role)
        return pid if pid is not None and pid != old_pid else None

    pid: int = await eventually(new_pid, timeout, 0.2, f"the {role} role restarted")
    ready = worker.is_ready if role == "fold" else worker.context_ready
    await eventually(
        lambda: asyncio.to_thread(ready), timeout, 0.3, f"the restarted {role} role ready"
    )
    return pid


async def check_summaries_cover(settings: Settings, log: LogMessages, timeout: float) -> dict:
    """Every summarisable message of every channel lies in a summary record's
    [first_offset, last_offset] (waits up to `timeout` for the last batches)."""
    wanted = {
        channel: {offset for offset, message in items if summarisable(message)}
        for channel, items in log.by_channel.items()
    }
    result: dict[str, Any] = {}

    async def covered() -> bool:
        spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
        totals: dict[str, int] = {}
        for _, _, _, value in await read_all(settings, SUMMARIES):
            record = json.loads(value or b"null")
            if not record or record.get("first_offset") is None:
                continue
            spans[record["channel"]].append((record["first_offset"], record["last_offset"]))
            totals[record["channel"]] = record["total_messages"]
        missing = {
            channel: sorted(o for o in offsets if not any(a <= o <= b for a, b in spans[channel]))
            for channel, offsets in wanted.items()
        }
        missing = {c: m for c, m in missing.items() if m}
        result.update(missing=missing, totals=totals, records=sum(map(len, spans.values())))
        return not missing

    try:
        await eventually(covered, timeout, 2.0, "every message covered by a summary")
    except AssertionError:
        missing = result.get("missing", {})
        some = {c: m[:5] for c, m in list(missing.items())[:5]}
        raise AssertionError(
            f"{sum(map(len, missing.values()))} messages of {len(missing)} channels in no "
            f"summary, e.g. {some}"
        ) from None
    short = {
        channel: (result["totals"].get(channel), len(offsets))
        for channel, offsets in wanted.items()
        if result["totals"].get(channel, 0) < len(offsets)
    }
    assert not short, f"latest summaries count fewer messages than logged: {short}"
    return result


async def kill_one_role(
    settings: Settings,
    fault_workers: Callable[..., FaultWorker],
    fault_seed: int,
    role: str,
    prefix: str,
) -> dict[str, Any]:
    rng = random.Random(fault_seed)
    count = scaled(MESSAGES, minimum=CHANNELS * 20)
    channels = channel_names(CHANNELS, prefix)
    messages = traffic(channels, count, seed=fault_seed)
    await prepare_topics(settings)
    worker = fault_workers(**ROLE_SETTINGS)
    await asyncio.to_thread(worker.start)
    producing = Producing(settings, messages, rate=count / PRODUCE_SECONDS)
    production = asyncio.create_task(producing.run())

    await asyncio.sleep(rng.uniform(5.0, 10.0))
    old_pid = (await asyncio.to_thread(worker.role_pids))[role]
    other = "context" if role == "fold" else "fold"
    other_pid = (await asyncio.to_thread(worker.role_pids))[other]
    watched = DRIVER_EVENTS if role == "context" else SUMMARIES
    before = await count_records(settings, watched)
    acked_at_kill = len(producing.acked)
    # The views of the role that stays up, each asked while the other is down.
    if role == "context":
        base, paths = worker.base_url, survivor_views(channels[0])
    else:
        base, paths = worker.context_url, ["/ready", "/costs", "/metrics"]
    os.kill(old_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    slowest = await answering_within(base, paths, worker.headers)
    # What the other role did while this one was down (until the supervisor restarted it).
    await asyncio.sleep(max(0.0, 3.0 - (time.monotonic() - killed_at)))
    during = await count_records(settings, watched)
    slowest = max(slowest, await answering_within(base, paths, worker.headers))
    new_pid = await restarted(worker, role, old_pid, 120)
    back_after = time.monotonic() - killed_at
    assert (await asyncio.to_thread(worker.role_pids))[other] == other_pid, "the other role died"
    assert worker.alive(), worker.log_tail()
    assert f"the {role} role (pid {old_pid}) exited" in worker.log_path.read_text()

    await asyncio.wait_for(production, 300)
    assert not producing.failed, producing.failed[:5]
    log = await read_messages(settings)
    assert sum(len(items) for items in log.by_channel.values()) == count

    await check_live_states([worker.base_url], log, timeout=300)
    events = await check_driver_events(settings, log, timeout=120)
    covered = await check_summaries_cover(settings, log, timeout=120)
    return {
        "messages": count,
        "channels": len(log.by_channel),
        "killed": role,
        "acked_at_kill": acked_at_kill,
        f"{watched}_in_3s_after_kill": during - before,
        "slowest_view_while_down_s": round(slowest, 3),
        "seconds_until_back": round(back_after, 1),
        "restarted_pid": new_pid,
        "driver_events": events,
        "summary_records": covered["records"],
        "lost": 0,
    }


@pytest.mark.timeout(900)
async def test_context_role_killed_under_load_the_fold_goes_on_and_summaries_catch_up(
    chorus_settings: Settings,
    fault_workers: Callable[..., FaultWorker],
    fault_seed: int,
) -> None:
    figures = await kill_one_role(chorus_settings, fault_workers, fault_seed, "context", "ctx")
    assert figures[f"{DRIVER_EVENTS}_in_3s_after_kill"] > 0, figures
    report("context role killed (SIGKILL) under load", **figures)


@pytest.mark.timeout(900)
async def test_fold_role_killed_under_load_summaries_go_on_and_the_fold_resumes_without_gap(
    chorus_settings: Settings,
    fault_workers: Callable[..., FaultWorker],
    fault_seed: int,
) -> None:
    figures = await kill_one_role(chorus_settings, fault_workers, fault_seed, "fold", "fld")
    assert figures[f"{SUMMARIES}_in_3s_after_kill"] > 0, figures
    report("fold role killed (SIGKILL) under load", **figures)
