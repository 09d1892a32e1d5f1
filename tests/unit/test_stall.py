"""The stall watchdog's decisions (the consumer stopped delivering a partition)."""

from __future__ import annotations

from streams.stall import Stall, StallWatch


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
