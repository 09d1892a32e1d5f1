"""The stall watch: its decisions (the consumer stopped delivering a partition), and what
the stage does about them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from streams.settings import Settings
from streams.worker.runtime import Runtime
from streams.worker.stages.stalls import Stall, StallGuard, StallWatch


def test_a_partition_with_waiting_records_that_does_not_move_is_stalled() -> None:
    watch = StallWatch(patience=30)
    assert watch.check(0, {0: 10, 1: 5}, {0: 20, 1: 5}) == []  # 1 has nothing waiting
    assert watch.check(29, {0: 10, 1: 5}, {0: 20, 1: 9}) == []  # 1 starts waiting now
    stalls = watch.check(31, {0: 10, 1: 5}, {0: 20, 1: 9})
    assert stalls == [Stall(0, 10, 20, 31)]
    assert "10 records waiting at offset 10" in stalls[0].describe()
    # Reported once; again only after another full wait without progress.
    assert watch.check(40, {0: 10, 1: 5}, {0: 20, 1: 9}) == []
    assert [s.partition for s in watch.check(61, {0: 10, 1: 5}, {0: 20, 1: 9})] == [0, 1]


def test_progress_or_an_empty_backlog_resets_the_wait() -> None:
    watch = StallWatch(patience=30)
    watch.check(0, {0: 10}, {0: 20})
    assert watch.check(25, {0: 11}, {0: 20}) == []  # moved: a new wait starts at 25
    assert watch.check(50, {0: 11}, {0: 20}) == []
    assert watch.check(56, {0: 11}, {0: 20}) != []
    watch.check(60, {0: 20}, {0: 20})  # caught up
    assert watch.check(200, {0: 20}, {0: 25}) == []  # waiting again, from 200


def test_partitions_that_moved_away_are_forgotten() -> None:
    watch = StallWatch(patience=30)
    watch.check(0, {0: 1, 1: 1}, {0: 9, 1: 9})
    watch.check(10, {1: 1}, {1: 9})  # partition 0 went to another worker
    assert watch.check(100, {0: 1, 1: 1}, {0: 9, 1: 9}) == [Stall(1, 1, 9, 100)]


class FakeConsumer:
    def __init__(self, highwaters: dict[int, int]) -> None:
        self._highwaters = highwaters
        self.seeks: list[tuple[int, int]] = []
        self.resumed: list[int] = []

    async def highwaters(self, *tps: Any) -> dict[Any, int]:
        return {tp: self._highwaters[tp.partition] for tp in tps}

    async def seek(self, tp: Any, offset: int) -> None:
        self.seeks.append((tp.partition, offset))

    def resume_partitions(self, tps: list[Any]) -> None:
        self.resumed += [tp.partition for tp in tps]


async def test_the_stage_seeks_a_stalled_partition_back_and_resumes_it() -> None:
    settings = Settings(store="memory://", topic_prefix="stall.", bootstrap_servers="x:1")
    chorus = Runtime(settings, broker="127.0.0.1:1")
    consumer = FakeConsumer({0: 50, 1: 7})
    app = SimpleNamespace(rebalancing=False, in_recovery=False, consumer=consumer)
    runtime = SimpleNamespace(
        app=app,
        messages=chorus.messages,
        meter=chorus.meter,
        next_offset={0: 12, 1: 7}.get,
        ownership=SimpleNamespace(owned_partitions=lambda: frozenset({0, 1})),
    )
    guard = StallGuard(runtime)  # type: ignore[arg-type]
    # 38 records wait on partition 0, none on partition 1
    assert await guard.unstall(0.0) == []
    assert await guard.unstall(10.0) == []
    stalls = await guard.unstall(31.0)
    assert [(s.partition, s.next_offset) for s in stalls] == [(0, 12)]
    assert consumer.seeks == [(0, 12)] and consumer.resumed == [0]
    assert chorus.meter.stalls._value.get() == 1
    app.rebalancing = True  # partitions moving: never act
    assert await guard.unstall(100.0) == []
