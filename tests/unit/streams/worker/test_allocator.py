import pytest

from streams.worker.allocator import (
    LARGE_BLOCK_BYTES,
    M_MMAP_THRESHOLD,
    M_TRIM_THRESHOLD,
    OPERATOR_SETTINGS,
    map_large_blocks_apart,
)


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return 1


def test_both_thresholds_are_kept_at_glibc_s_own_start(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting in OPERATOR_SETTINGS:
        monkeypatch.delenv(setting, raising=False)
    libc = FakeLibc()
    assert map_large_blocks_apart(libc)
    assert libc.calls == [
        (M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES),
        (M_TRIM_THRESHOLD, LARGE_BLOCK_BYTES),
    ]


@pytest.mark.parametrize("setting", OPERATOR_SETTINGS)
def test_a_threshold_the_operator_set_is_kept(
    monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    for other in OPERATOR_SETTINGS:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(setting, "65536")
    libc = FakeLibc()
    assert not map_large_blocks_apart(libc)
    assert libc.calls == []
