"""Recovery: a process killed under load, and how long the agents wait (issue 30).

The wake-latency client sends at a fixed rate (100 msg/s) against a warmed-up system; a
third of the way in, the fold is SIGKILLed: `chorus worker`'s fold role process (its
supervisor starts a new one), or the Quix Streams peer (started again at once, as a
supervisor would). Reported: the longest any message waited for its driver event, the
percentiles, messages never woken (lost) and events that came again (redelivered from the
last checkpoint; consumers dedupe them by (channel, offset)).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from bench.measure import wake_figures
from bench.systems import Broker, Makers, System, chorus_worker, log, quix_peer, side_by_side
from bench.wake import Record, send_and_clock, warm_and_load, warm_up
from streams.conversations import Conversation


def kill_fold(system: System) -> None:
    if system.process.command is None:  # chorus worker: its fold role, the supervisor lives
        os.kill(system.process.role_pids()["fold"], signal.SIGKILL)
    else:
        system.process.kill()
        system.process.spawn()


async def killed_once(
    system: System,
    broker: Broker,
    warm: list[Record],
    load: list[Record],
    rate: float,
    drain: float,
) -> dict[str, Any]:
    system.start()
    try:
        await warm_up(system, broker, warm)
        kill_at = len(load) / rate / 3
        killed: list[float] = []

        def on_tick(seconds: float) -> None:
            if not killed and seconds >= kill_at:
                kill_fold(system)
                killed.append(seconds)

        sent, clock = await send_and_clock(system, broker, load, rate, drain, on_tick)
    finally:
        system.process.stop()
    figures = wake_figures(sent, clock.woken)
    figures.update(killed_at_s=killed[0] if killed else None, repeated=clock.repeated(list(sent)))
    log(
        f"  {system.name}: longest wait {(figures['max_ms'] or 0) / 1000:.1f} s, "
        f"never woken {figures['never_woken']}, repeated {figures['repeated']}"
    )
    return figures


async def measure(
    broker: Broker,
    work: Path,
    conversations: list[Conversation],
    rate: float,
    seconds: float,
    channels: int,
    drain: float,
) -> dict[str, Any]:
    warm, load = warm_and_load(conversations, channels, int(rate * seconds), "kill")
    result: dict[str, Any] = {"rate": rate, "seconds": seconds, "channels": channels}
    makers: Makers = [
        ("chorus", lambda: chorus_worker(broker, work, "kill-chorus")),
        ("quix", lambda: quix_peer(broker, work, "kill-quix")),
    ]

    async def run(system: System) -> dict[str, Any]:
        return await killed_once(system, broker, warm, load, rate, drain)

    result.update(await side_by_side("recovery", makers, run))
    return result
