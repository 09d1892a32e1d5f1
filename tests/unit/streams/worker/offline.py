"""A role with no broker, for the worker's unit tests: Faust's test harness drives its
agents, its tables are in memory, and its checkpoints write to an `OfflineProducer`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from streams.settings import Settings
from streams.testing import OfflineProducer
from streams.topology import Role
from streams.worker.compose import Stage, Worker, build_worker


def offline_settings(**settings: Any) -> Settings:
    return Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1", **settings)


def offline_worker(
    role: Role = "fold", stages: tuple[Stage, ...] | None = None, **settings: Any
) -> Worker:
    """`role` (its default stages unless named) with no broker (see the module)."""
    worker = build_worker(
        offline_settings(**settings), broker="127.0.0.1:1", role=role, stages=stages
    )
    changelogs = OfflineProducer()
    worker.runtime.checkpoint.producer = lambda: changelogs
    return worker


class TopicRecords:
    """A topic's records by (partition, offset), read back as `RangeReader.read` does."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.records: dict[tuple[int, int], bytes] = {}

    async def read(
        self, partition: int, first: int, last: int, take: Any, limit: int | None = None
    ) -> list[tuple[int, Any]]:
        found = []
        for offset in range(first, last + 1):
            value = self.records.get((partition, offset))
            if value is not None:
                record = SimpleNamespace(offset=offset, value=value, key=self.key, timestamp=0)
                taken = take(record)
                if taken is not None:
                    found.append((offset, taken))
                    if limit is not None and len(found) >= limit:
                        break
        return found
