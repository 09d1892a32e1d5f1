"""A role's timers (both roles): each a Faust timer whose body takes the time it is told
(`Clock`), so that tests drive a stage's tick through its public method with the time they
choose, and whose every tick is measured (`chorus_timer_seconds{timer}` and the slowest
one, `chorus_timer_slowest_seconds{timer}`, on /metrics): a tick holds the event loop, the
heartbeats and the fold up for as long as it runs.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from projections.model import utc_now
from streams.llm.metering import CostMeter

# What a timer reads the time with: UTC now in production.
Clock = Callable[[], datetime]


def moving(app: Any) -> bool:
    """Whether partitions are moving: a rebalance, or the tables' recovery after one (a
    store read then may be behind its changelog)."""
    return bool(getattr(app, "rebalancing", False) or getattr(app, "in_recovery", False))


def every(
    app: Any,
    meter: CostMeter,
    seconds: float,
    name: str,
    tick: Callable[[datetime], Awaitable[object]],
    clock: Clock = utc_now,
    *,
    while_moving: bool = False,
) -> None:
    """Run `tick(clock())` every `seconds` as the Faust timer `name`, measured; not while
    partitions move unless `while_moving` (what is due waits for the next tick)."""
    slowest = 0.0

    @app.timer(seconds, name=name)
    async def timer() -> None:
        nonlocal slowest
        if not while_moving and moving(app):
            return
        started = time.perf_counter()
        try:
            await tick(clock())
        finally:
            took = time.perf_counter() - started
            meter.timer_seconds.labels(name).observe(took)
            if took > slowest:
                slowest = took
                meter.timer_slowest.labels(name).set(took)
