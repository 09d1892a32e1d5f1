"""A timer's ticks measured twice: start to end, and the longest hold of the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from streams.llm.metering import CostMeter
from streams.worker.timers import Held, every

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


class Counter:
    """A perf counter the test moves by hand: a step 'takes' what the test adds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def holds_then_waits(counter: Counter, cpu: Counter, released: asyncio.Event) -> str:
    counter.now += 0.05  # holds the loop 50 ms, 10 ms of it on a core
    cpu.now += 0.01
    await released.wait()  # meanwhile others run for 10 s
    counter.now += 0.03  # holds it again 30 ms, all of it on a core
    cpu.now += 0.03
    return "done"


async def others(counter: Counter, cpu: Counter, released: asyncio.Event) -> None:
    counter.now += 10.0
    cpu.now += 10.0
    released.set()


def test_held_is_the_longest_step_not_the_time_spent_waiting() -> None:
    async def main() -> tuple[str, Held, float]:
        counter, cpu, released = Counter(), Counter(), asyncio.Event()
        held = Held(holds_then_waits(counter, cpu, released), counter, cpu)
        both = asyncio.gather(held, others(counter, cpu, released))
        result, _ = await both
        return result, held, counter.now

    result, held, wall = asyncio.run(main())
    assert result == "done"
    assert held.longest == pytest.approx(0.05)
    assert wall == pytest.approx(10.08)
    # The most CPU of any step, which need not be the longest step's: the first step waited
    # 40 ms for a core.
    assert held.longest_cpu == pytest.approx(0.03)


def test_held_passes_an_error_and_a_cancellation_through() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("the tick failed")

    async def waits_forever(started: asyncio.Event) -> None:
        started.set()
        await asyncio.Event().wait()

    async def main() -> bool:
        with pytest.raises(ValueError, match="the tick failed"):
            await Held(fails())
        started = asyncio.Event()
        task = asyncio.ensure_future(Held(waits_forever(started)))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert asyncio.run(main())


class App:
    """Faust's `app.timer` as far as `every` uses it: the test calls the tick itself."""

    rebalancing = False
    in_recovery = False

    def __init__(self) -> None:
        self.timers: dict[str, Callable[[], Awaitable[None]]] = {}

    def timer(self, seconds: float, name: str) -> Callable[[Any], Any]:
        def register(body: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
            self.timers[name] = body
            return body

        return register


def gauge(meter: CostMeter, metric: str, timer: str) -> float | None:
    return meter.registry.get_sample_value(metric, {"timer": timer})


def test_every_reports_the_slowest_tick_and_its_longest_hold() -> None:
    app, meter, told = App(), CostMeter(), []

    async def tick(now: datetime) -> None:
        told.append(now)
        await asyncio.sleep(0.01)  # waits: counts in the tick's time, not in its hold

    every(app, meter, 1.0, "tick", tick, clock=lambda: NOW)
    asyncio.run(app.timers["tick"]())

    assert told == [NOW]
    slowest = gauge(meter, "chorus_timer_slowest_seconds", "tick")
    held = gauge(meter, "chorus_timer_held_slowest_seconds", "tick")
    held_cpu = gauge(meter, "chorus_timer_held_cpu_slowest_seconds", "tick")
    assert slowest is not None and held is not None and held_cpu is not None
    assert slowest >= 0.01
    assert held < slowest
    assert held_cpu < slowest


def test_every_skips_a_tick_while_partitions_move() -> None:
    app, meter, told = App(), CostMeter(), []

    async def tick(now: datetime) -> None:
        told.append(now)

    every(app, meter, 1.0, "tick", tick, clock=lambda: NOW)
    app.rebalancing = True
    asyncio.run(app.timers["tick"]())

    assert told == []
    assert gauge(meter, "chorus_timer_held_slowest_seconds", "tick") is None
