"""glibc's allocator in a fresh interpreter, as a role starts (a subprocess each: what the
thresholds do depends on what the process allocated and freed before)."""

import os
import subprocess
import sys
import textwrap

import pytest

from streams.worker.allocator import OPERATOR_SETTINGS, glibc

pytestmark = pytest.mark.skipif(glibc() is None, reason="glibc's allocator only")

# Frees one large block (glibc's default then raises its thresholds past it), makes ten more
# of the same size and prints how many of them are mappings of their own.
LARGE_BLOCKS_MAPPED = textwrap.dedent(
    """
    import ctypes, sys
    from streams.worker.allocator import map_large_blocks_apart

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    if sys.argv[1] == "kept":
        assert map_large_blocks_apart()
    size = 300 * 1024
    freed = bytes(size)
    del freed
    before = libc.mallinfo2().hblks
    kept = [bytes(size) for _ in range(10)]
    print(libc.mallinfo2().hblks - before)
    """
)


def mapped_blocks(thresholds: str) -> int:
    env = {k: v for k, v in os.environ.items() if k not in OPERATOR_SETTINGS}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run(
        [sys.executable, "-c", LARGE_BLOCKS_MAPPED, thresholds],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return int(done.stdout)


def test_large_blocks_stay_mappings_of_their_own_after_one_is_freed() -> None:
    assert mapped_blocks("kept") == 10
    # glibc's default: the free raised the threshold, and the ten grew the heap instead.
    assert mapped_blocks("default") == 0
