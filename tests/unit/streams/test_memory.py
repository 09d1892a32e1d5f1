"""streams.memory: the one cache kind (bounded in bytes, forgotten per partition, evictions
told) and the memory budget's shares."""

from __future__ import annotations

import tracemalloc

import orjson
import pytest

from streams.memory import MIB, ByteCache, MemoryBudget, exact_bytes


def test_the_least_recently_used_go_first_at_the_byte_bound_never_the_one_put() -> None:
    evicted: list[tuple[str, int]] = []
    cache: ByteCache[str, int] = ByteCache("c", 100, lambda key, v: evicted.append((key, v)))
    cache.put("a", 1, 40, 0)
    cache.put("b", 2, 40, 1)
    assert cache.get("a") == 1  # a is now the most recently used
    cache.put("c", 3, 40, 0)  # 120 > 100: b goes
    assert cache.keys() == ["a", "c"] and cache.bytes == 80 and evicted == [("b", 2)]
    cache.put("a", 9, 100, 0)  # the whole budget: everything else goes, not the one put
    assert cache.keys() == ["a"] and cache.get("a") == 9 and cache.bytes == 100
    assert evicted == [("b", 2), ("c", 3)]
    assert list(cache.values()) == [9]


def test_an_entry_larger_than_the_cache_is_not_kept() -> None:
    evicted: list[int] = []
    cache: ByteCache[str, int] = ByteCache("c", 100, lambda _, value: evicted.append(value))
    cache.put("a", 1, 10, 0)
    assert not cache.put("a", 2, 101, 0)
    assert "a" not in cache and cache.bytes == 0 and evicted == [2]


def test_partitions_are_forgotten_by_themselves() -> None:
    cache: ByteCache[str, int] = ByteCache("c", 1000)
    for n, partition in enumerate([0, 1, 2, 1]):
        cache.put(f"k{n}", n, 10, partition)
    cache.forget_partitions([1])
    assert cache.keys() == ["k0", "k2"] and cache.bytes == 20
    cache.keep_only([2])
    assert cache.keys() == ["k2"]
    assert cache.partition_of("k2") == 2 and cache.size_of("k2") == 10
    assert cache.peek("k2") == 2 and cache.pop("k2") == 2 and len(cache) == 0


def test_a_budget_is_split_into_shares_that_add_up_to_it() -> None:
    budget = MemoryBudget(100 * MIB, {"rocksdb": 0.25, "folds": 0.75})
    assert budget.share("rocksdb") == 25 * MIB and budget.share("folds") == 75 * MIB
    assert budget.describe() == "100 MiB: rocksdb 25, folds 75"
    with pytest.raises(ValueError, match="must add up to 1"):
        MemoryBudget(MIB, {"a": 0.5})


def test_a_loop_over_the_keys_may_pop_them() -> None:
    cache: ByteCache[str, int] = ByteCache("c", 100)
    for key in "abc":
        cache.put(key, 1, 10)
    for key in cache:
        cache.pop(key)
    assert len(cache) == 0 and cache.bytes == 0


def test_a_put_after_the_budget_was_lowered_evicts_down_to_it() -> None:
    evicted: list[str] = []
    cache: ByteCache[str, int] = ByteCache("c", 100, lambda key, _: evicted.append(key))
    cache.put("a", 1, 40)
    cache.put("b", 1, 40)
    cache.budget = 30
    assert not cache.put("c", 1, 50)  # larger than the whole cache: not kept
    assert evicted == ["c", "a", "b"] and cache.bytes == 0


@pytest.mark.parametrize("size", [3, 600, 20_000])
def test_exact_bytes_are_the_same_bytes_in_an_allocation_of_their_size(size: int) -> None:
    encoded = orjson.dumps("x" * size)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        copy = exact_bytes(encoded)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert copy == encoded and copy is not encoded
    assert held <= len(encoded) + 64, (held, len(encoded))
