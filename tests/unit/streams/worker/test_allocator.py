import ctypes

import pytest

from streams.worker.allocator import (
    LARGE_BLOCK_BYTES,
    M_MMAP_THRESHOLD,
    OPERATOR_SETTING,
    glibc,
    map_large_blocks_apart,
)

needs_glibc = pytest.mark.skipif(glibc() is None, reason="glibc's allocator only")


MALLINFO2_FIELDS = (
    *("arena", "ordblks", "smblks", "hblks", "hblkhd"),
    *("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"),
)


class MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2`: `hblks` counts the blocks mapped on their own."""

    _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO2_FIELDS]


@needs_glibc
def test_large_blocks_stay_mappings_of_their_own_after_one_is_freed() -> None:
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    size = 300 * 1024  # past glibc's starting threshold
    assert map_large_blocks_apart()
    freed = bytes(size)
    del freed  # by glibc's default this raises the threshold past `size`
    before = libc.mallinfo2().hblks
    kept = [bytes(size) for _ in range(10)]
    assert libc.mallinfo2().hblks - before == len(kept)


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return 1


def test_the_threshold_is_fixed_at_glibc_s_own_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OPERATOR_SETTING, raising=False)
    libc = FakeLibc()
    assert map_large_blocks_apart(libc)
    assert libc.calls == [(M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES)]


def test_a_threshold_the_operator_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPERATOR_SETTING, "65536")
    libc = FakeLibc()
    assert not map_large_blocks_apart(libc)
    assert libc.calls == []
