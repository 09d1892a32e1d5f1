"""streams.worker.supervise: restarts with backoff, the restart budget, stopping on a signal.

No processes: children are fakes and the clock is driven by the supervisor's own sleeps.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from streams.worker.run import EXIT_STOPPED_LATE, STOP_GRACE_SECONDS
from streams.worker.runtime import Role
from streams.worker.supervise import (
    EXIT_GAVE_UP,
    RestartBudget,
    RestartPolicy,
    Supervisor,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.hooks: list[Callable[[float], None]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for hook in self.hooks:
            hook(self.now)


class FakeChild:
    """A child process: `exit(code)` ends it; a signal ends it after `stops_after` s."""

    pids = iter(range(1000, 10_000))

    def __init__(self, role: Role, clock: Clock, stops_after: float | None = 0.0) -> None:
        self.role = role
        self.pid = next(self.pids)
        self.clock = clock
        self.code: int | None = None
        self.signals: list[int] = []
        self.stops_after = stops_after
        self.stop_at: float | None = None
        self.killed = False
        self.stop_code = 0

    def poll(self) -> int | None:
        if self.code is None and self.stop_at is not None and self.clock.now >= self.stop_at:
            self.code = self.stop_code
        return self.code

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        if self.stops_after is not None and self.stop_at is None:
            self.stop_at = self.clock.now + self.stops_after

    def kill(self) -> None:
        self.killed = True
        self.code = -signal.SIGKILL


class Spawner:
    def __init__(self, clock: Clock, stops_after: float | None = 0.0) -> None:
        self.clock = clock
        self.stops_after = stops_after
        self.spawned: list[FakeChild] = []

    def __call__(self, role: Role) -> FakeChild:
        child = FakeChild(role, self.clock, self.stops_after)
        self.spawned.append(child)
        return child

    def of(self, role: Role) -> list[FakeChild]:
        return [child for child in self.spawned if child.role == role]


def make(
    policy: RestartPolicy | None = None, stops_after: float | None = 0.0
) -> tuple[Supervisor, Spawner, Clock]:
    clock = Clock()
    spawner = Spawner(clock, stops_after)
    supervisor = Supervisor(spawner, policy=policy, clock=clock, sleep=clock.sleep)
    return supervisor, spawner, clock


def test_the_budget_backs_off_and_forgets_restarts_older_than_its_window() -> None:
    budget = RestartBudget(RestartPolicy(backoff=(0.5, 2.0, 5.0), max_restarts=3, window=60))
    assert budget.delay(0) == 0.5
    assert budget.record(0) == 1
    assert budget.delay(1) == 2.0
    budget.record(1)
    assert budget.delay(2) == 5.0
    budget.record(2)
    assert budget.delay(3) == 5.0  # the last value beyond the list
    assert not budget.allows(30)  # three within the minute
    assert budget.allows(60.5)  # the first one left the window
    assert budget.delay(62) == 0.5  # all three left it


def test_both_roles_start_and_a_dead_one_is_restarted_after_its_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor, spawner, clock = make(RestartPolicy(backoff=(1.0,), max_restarts=5))
    supervisor.start()
    assert [child.role for child in spawner.spawned] == ["fold", "context"]
    context = spawner.of("context")[0]
    context.code = -signal.SIGKILL
    assert supervisor.step() is None
    assert len(spawner.of("context")) == 1  # backing off
    assert any(
        "the context role" in r.message and "restarting it in 1s" in r.message
        for r in caplog.records
    )
    clock.sleep(1.0)
    assert supervisor.step() is None
    assert len(spawner.of("context")) == 2
    assert supervisor.children["context"] is spawner.of("context")[1]
    assert len(spawner.of("fold")) == 1  # the other role is left alone


def test_too_many_restarts_within_the_window_stop_the_worker_non_zero() -> None:
    supervisor, spawner, clock = make(RestartPolicy(backoff=(0.5,), max_restarts=2, window=60))

    def crash_new_fold_roles(now: float) -> None:
        for child in spawner.of("fold"):
            if child.code is None and child.stop_at is None:
                child.code = 1

    clock.hooks.append(crash_new_fold_roles)
    status = supervisor.run()
    assert status == EXIT_GAVE_UP
    assert len(spawner.of("fold")) == 3  # the first and two restarts
    context = spawner.of("context")[0]
    assert context.signals == [signal.SIGTERM] and context.poll() == 0  # stopped, not killed
    assert not context.killed


def test_a_signal_is_forwarded_to_both_and_the_supervisor_exits_once_they_stopped() -> None:
    supervisor, spawner, clock = make(stops_after=2.0)

    def signal_at_five(now: float) -> None:
        if now >= 5:
            supervisor.request_stop(signal.SIGINT)

    clock.hooks.append(signal_at_five)
    assert supervisor.run() == 0
    assert len(spawner.spawned) == 2
    assert all(child.signals == [signal.SIGINT] for child in spawner.spawned)
    assert len(spawner.spawned) == 2  # nothing restarted while stopping
    assert clock.now < 5 + 2 + 1


def test_a_child_that_does_not_stop_in_time_is_killed_and_the_status_says_so() -> None:
    supervisor, spawner, clock = make(stops_after=None)  # ignores signals
    supervisor.start()
    supervisor.request_stop(signal.SIGTERM)
    assert supervisor.stop(signal.SIGTERM) == EXIT_STOPPED_LATE
    assert len(spawner.spawned) == 2 and all(child.killed for child in spawner.spawned)
    assert STOP_GRACE_SECONDS <= clock.now <= STOP_GRACE_SECONDS + 2


def test_a_child_that_stopped_late_itself_makes_the_status_143() -> None:
    supervisor, spawner, _ = make()
    supervisor.start()
    spawner.of("fold")[0].stop_code = EXIT_STOPPED_LATE  # its own deadline fired
    assert supervisor.stop(signal.SIGTERM) == EXIT_STOPPED_LATE


def test_no_restart_once_a_stop_was_asked() -> None:
    supervisor, spawner, clock = make(RestartPolicy(backoff=(1.0,)))
    supervisor.start()
    spawner.of("context")[0].code = 1
    supervisor.step()
    supervisor.request_stop(signal.SIGTERM)
    clock.sleep(2.0)
    supervisor.step()
    assert len(spawner.of("context")) == 1
