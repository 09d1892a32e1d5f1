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


def every(
    app: Any,
    meter: CostMeter,
    seconds: float,
    name: str,
    tick: Callable[[datetime], Awaitable[object]],
    clock: Clock = utc_now,
) -> None:
    """Run `tick(clock())` every `seconds` as the Faust timer `name`, measured."""
    slowest = 0.0

    @app.timer(seconds, name=name)
    async def timer() -> None:
        nonlocal slowest
        started = time.perf_counter()
        try:
            await tick(clock())
        finally:
            took = time.perf_counter() - started
            meter.timer_seconds.labels(name).observe(took)
            if took > slowest:
                slowest = took
                meter.timer_slowest.labels(name).set(took)
