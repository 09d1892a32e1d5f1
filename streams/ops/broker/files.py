"""Small file helpers of the broker: a cross-process lock, log tails, packaged assets."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

LOG_TAIL_LINES = 30


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def read_from(path: Path, offset: int = 0) -> str:
    """The file's text from `offset` on ("" when missing; all of it when it shrank)."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(offset if offset <= size else 0)  # smaller: the log rolled over
            return fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def asset_text(name: str) -> str:
    """A file shipped in streams/ops/broker/assets."""
    return resources.files("streams.ops.broker").joinpath("assets", name).read_text("utf-8")
