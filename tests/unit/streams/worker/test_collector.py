"""The role's garbage collector: what lives is frozen, and a full collection runs only when
Python's heap has doubled past its floor, measured without walking what is frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from streams.llm.metering import CostMeter
from streams.worker.collector import BLOCKS_PER_MIB, LEAK_FACTOR, Collector

FLOOR = 384 * BLOCKS_PER_MIB  # the default memory budget's


class Blocks:
    """The allocator's block count as the test sets it."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.count


def full_collections(meter: CostMeter) -> float:
    return meter.registry.get_sample_value("chorus_gc_full_collections_total") or 0.0


@pytest.fixture(autouse=True)
def unfrozen() -> object:
    yield
    gc.unfreeze()


def test_a_checkpoint_never_walks_the_frozen_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    def walks(*_: object) -> int:
        raise AssertionError("gc.get_freeze_count walks every frozen object")

    monkeypatch.setattr(gc, "get_freeze_count", walks)
    blocks, meter = Blocks(FLOOR), CostMeter()
    collector = Collector(meter, FLOOR, blocks)
    collector.after_checkpoint()  # the first mark
    for _ in range(3):
        blocks.count = int(LEAK_FACTOR * blocks.count) + 1
        collector.after_checkpoint()
    assert full_collections(meter) == 3
    assert meter.registry.get_sample_value("chorus_python_heap_blocks") == blocks.count


def test_the_heap_growing_below_its_floor_collects_nothing() -> None:
    blocks, meter = Blocks(1_000), CostMeter()
    collector = Collector(meter, FLOOR, blocks)
    collector.after_checkpoint()
    blocks.count = FLOOR  # a thousand times its mark, at the floor
    collector.after_checkpoint()
    assert full_collections(meter) == 0
    assert blocks.reads == 2  # read at each checkpoint: it is cheap


def test_the_heap_doubling_past_its_floor_collects_once_and_marks_anew() -> None:
    blocks, meter = Blocks(FLOOR), CostMeter()
    collector = Collector(meter, FLOOR, blocks)
    collector.after_checkpoint()
    blocks.count = int(LEAK_FACTOR * FLOOR)  # doubled, not past it
    collector.after_checkpoint()
    assert full_collections(meter) == 0
    blocks.count += 1
    collector.after_checkpoint()
    assert full_collections(meter) == 1
    assert collector.mark == blocks.count
    collector.after_checkpoint()  # the same heap, now the mark: nothing more
    assert full_collections(meter) == 1


def test_what_lives_after_a_checkpoint_is_frozen() -> None:
    gc.unfreeze()
    collector = Collector(CostMeter(), FLOOR, Blocks(1_000))
    alive = [object() for _ in range(10)]
    collector.after_checkpoint()
    assert gc.get_freeze_count() >= len(alive)


@pytest.fixture
def full_collections_seen() -> Iterator[list[int]]:
    """The generation-2 collections CPython runs meanwhile (what each found); the
    thresholds as they were after."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(info["collected"])

    thresholds = gc.get_threshold()
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    gc.set_threshold(*thresholds)


def survivors(count: int) -> list[list[int]]:
    """Objects that outlive the young collections, as a checkpoint's encoded keys do."""
    return [[i] for i in range(count)]


def test_cpython_runs_full_collections_of_what_came_since_a_freeze(
    full_collections_seen: list[int],
) -> None:
    gc.freeze()
    kept = survivors(1_000_000)
    assert full_collections_seen  # the default: every tenth young collection or so
    assert len(kept) == 1_000_000


def test_once_started_a_role_runs_a_full_collection_only_at_its_leak_check(
    full_collections_seen: list[int],
) -> None:
    blocks = Blocks(FLOOR)
    collector = Collector(CostMeter(), FLOOR, blocks)
    collector.start()
    assert gc.get_freeze_count() > 0  # what the start made
    kept = survivors(1_000_000)
    assert full_collections_seen == []
    collector.after_checkpoint()  # the first mark
    blocks.count = int(LEAK_FACTOR * FLOOR) + 1
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    collector.after_checkpoint()
    assert len(full_collections_seen) == 1
    assert full_collections_seen[0] >= 1  # the cycle, found by the leak check's collection
    assert len(kept) == 1_000_000


class Fetched:
    """What a consumer fetched ahead: a large buffer in a cycle, as aiokafka's unread
    records are (bug 25)."""

    def __init__(self) -> None:
        self.itself = self
        self.data = bytes(2**20)


def test_after_partitions_move_the_next_checkpoint_collects_what_was_frozen() -> None:
    """A rebalance drops what Faust's consumer fetched of the partitions unread: cycles a
    freeze kept, whose buffers the block count does not see."""
    meter = CostMeter()
    collector = Collector(meter, FLOOR, Blocks(FLOOR))
    collector.after_checkpoint()  # the first mark
    fetched = Fetched()
    dropped = weakref.ref(fetched)
    collector.after_batch()  # frozen while it was alive
    del fetched
    collector.after_checkpoint()  # the same block count: no collection
    assert dropped() is not None
    collector.after_moved()
    collector.after_checkpoint()
    assert dropped() is None
    assert full_collections(meter) == 1
    collector.after_checkpoint()  # once per move
    assert full_collections(meter) == 1
