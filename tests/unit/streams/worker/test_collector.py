"""The role's garbage collector: what lives is frozen, and a full collection runs only when
Python's heap has doubled past its floor, measured without walking what is frozen."""

from __future__ import annotations

import gc

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
