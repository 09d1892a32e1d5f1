"""glibc's thresholds for large blocks, kept at their start (both roles).

glibc's `malloc` maps a block of `M_MMAP_THRESHOLD` bytes or more (128 KiB at start) on
its own, given back to the system when it is freed, when its heap has no free space for
it; and it gives the free top of its heap back past `M_TRIM_THRESHOLD` (128 KiB at start).
But each time a mapped block is freed it raises the first to that block's size (up to 32
MiB) and the second to twice that. So a long-running role soon grows its heap for its
large blocks (aiokafka's fetched data, up to a MiB per partition; RocksDB's memtable
blocks; a checkpoint's lists of records; a cache's growing tables), which are freed at
other times than the small blocks between them, and keeps up to 64 MiB free at its top.

So a role sets both thresholds to their starting 128 KiB before it starts (`mallopt`, which
also turns that raising off), as `MALLOC_MMAP_THRESHOLD_=131072` in its environment would.
A mapping costs two system calls and pages touched afresh. Measured with that environment,
chorus alone: each role's peak RSS fell by 6-12 % at 100,000 and at 1,000,000 channels (the
fold role's 794-815 MiB to 721 at 1,000,000), msg/s within the day's spread
(docs/benchmarks.md).

Only where the C library is glibc (elsewhere nothing is done), and never over a threshold
the operator set (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`, which glibc reads at
start: either keeps both as glibc has them).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

# glibc's parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's own starting value of both, kept fixed.
LARGE_BLOCK_BYTES = 128 * 1024
OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def glibc() -> Any | None:
    """This process's C library when it is glibc (None elsewhere: musl, macOS)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def map_large_blocks_apart(libc: Any | None = None) -> bool:
    """Keep glibc's mmap and trim thresholds at `LARGE_BLOCK_BYTES` (see the module); True
    when they were set, False where it is not glibc or the operator set one of their own."""
    if any(setting in os.environ for setting in OPERATOR_SETTINGS):
        return False
    libc = libc if libc is not None else glibc()
    if libc is None:
        return False
    return all(
        libc.mallopt(parameter, LARGE_BLOCK_BYTES)
        for parameter in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD)
    )
