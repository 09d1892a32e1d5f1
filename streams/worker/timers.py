"""A role's timers (both roles): each a Faust timer whose body takes the time it is told
(`Clock`), so that tests drive a stage's tick through its public method with the time they
choose, and whose every tick is measured twice on /metrics:

- how long it took, start to end (`chorus_timer_seconds{timer}`, the slowest one
  `chorus_timer_slowest_seconds{timer}`): while it waits for the broker or a store, the
  event loop serves the fold, the heartbeats and the views, so this is how late what the
  tick does can be, not what it costs them;
- the longest it held the event loop without letting go
  (`chorus_timer_held_slowest_seconds{timer}`): this is what holds the heartbeats, the fold
  and every view up, and what must stay short (`Held`). It is wall time, so a step that
  waits for a core (both cores busy, the context role niced) counts the wait too; beside it
  the most CPU any one step used (`chorus_timer_held_cpu_slowest_seconds{timer}`) tells
  the tick's own work from the machine's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from datetime import datetime
from functools import partial
from typing import Any

from projections.model import utc_now
from streams.llm.metering import CostMeter

# What a timer reads the time with: UTC now in production.
Clock = Callable[[], datetime]


def moving(app: Any) -> bool:
    """Whether partitions are moving: a rebalance, or the tables' recovery after one (a
    store read then may be behind its changelog)."""
    return bool(getattr(app, "rebalancing", False) or getattr(app, "in_recovery", False))


class Held:
    """Awaits a coroutine step by step and remembers its longest step (`longest`, seconds):
    a step runs from a resumption to the next suspension, the time the coroutine holds the
    event loop at once. `counter` reads the time (`time.perf_counter` in production);
    `cpu` reads the thread's CPU time (`time.thread_time`), and `longest_cpu` is the most
    CPU any one step used: a step whose `longest` is far above it waited for a core."""

    def __init__(
        self,
        coroutine: Coroutine[Any, Any, Any],
        counter: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        self.coroutine = coroutine
        self.counter = counter
        self.cpu = cpu
        self.longest = 0.0
        self.longest_cpu = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        step: Callable[[], Any] = partial(self.coroutine.send, None)
        while True:
            started, started_cpu = self.counter(), self.cpu()
            try:
                suspended_on = step()
            except StopIteration as done:
                return done.value
            finally:
                self.longest = max(self.longest, self.counter() - started)
                self.longest_cpu = max(self.longest_cpu, self.cpu() - started_cpu)
            try:
                resumed_with = yield suspended_on
            except GeneratorExit:
                self.coroutine.close()
                raise
            except BaseException as thrown:  # a cancellation goes into the coroutine
                step = partial(self.coroutine.throw, thrown)
            else:
                step = partial(self.coroutine.send, resumed_with)


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
    slowest = held_slowest = held_cpu_slowest = 0.0

    @app.timer(seconds, name=name)
    async def timer() -> None:
        nonlocal slowest, held_slowest, held_cpu_slowest
        if not while_moving and moving(app):
            return
        started = time.perf_counter()
        held = Held(_coroutine(tick(clock())))
        try:
            await held
        finally:
            took = time.perf_counter() - started
            meter.timer_seconds.labels(name).observe(took)
            if took > slowest:
                slowest = took
                meter.timer_slowest.labels(name).set(took)
            if held.longest > held_slowest:
                held_slowest = held.longest
                meter.timer_held_slowest.labels(name).set(held.longest)
            if held.longest_cpu > held_cpu_slowest:
                held_cpu_slowest = held.longest_cpu
                meter.timer_held_cpu_slowest.labels(name).set(held.longest_cpu)


async def _coroutine(awaitable: Awaitable[object]) -> object:
    """Any awaitable as a coroutine (what `Held` steps through)."""
    return await awaitable
