"""streams.worker.restore: which members of a group are other workers; what a restore reads
of each partition, and where it stops."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from streams.worker.restore import other_members, restore_stores


def test_a_static_member_of_this_worker_s_instance_id_is_not_another_worker() -> None:
    members = ["host-abc-3f2c", "host-abd-77aa", "faust-0.11-91b0"]
    assert other_members(members, "host-abc") == ["host-abd-77aa", "faust-0.11-91b0"]
    assert other_members(["host-abc-3f2c"], "host-abc") == []
    assert other_members([], "host-abc") == []


def test_without_an_instance_id_every_member_is_another_worker() -> None:
    assert other_members(["host-abc-3f2c"], None) == ["host-abc-3f2c"]


class FakeCluster:
    def __init__(self, partitions: dict[str, set[int]]) -> None:
        self.partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.partitions.get(topic)


class FakeChangelogs:
    """A consumer of changelogs whose every fetch returns `per_fetch` more records of each
    partition behind, up to `ends`."""

    def __init__(self, ends: dict[TopicPartition, int], per_fetch: int) -> None:
        self.ends, self.per_fetch = ends, per_fetch
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        topics: dict[str, set[int]] = {}
        for tp in ends:
            topics.setdefault(tp.topic, set()).add(tp.partition)
        cluster = FakeCluster(topics)

        async def fetch_all_metadata() -> FakeCluster:
            return cluster

        self._client = SimpleNamespace(fetch_all_metadata=fetch_all_metadata)
        self.fetches = 0

    def assign(self, tps: list[TopicPartition]) -> None:
        self.positions = {tp: 0 for tp in tps}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.ends[tp] for tp in tps}

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 0 for tp in tps}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    async def getmany(self, *tps: TopicPartition, timeout_ms: int) -> dict[TopicPartition, list]:
        self.fetches += 1
        fetched = {}
        for tp in tps:
            start = self.positions[tp]
            stop = min(self.ends[tp], start + self.per_fetch)
            fetched[tp] = [
                SimpleNamespace(offset=o, key=b'"k%d"' % o, value=b"{}") for o in range(start, stop)
            ]
            self.positions[tp] = stop
        return fetched


class FakeTable:
    def __init__(self, topic: str, persisted: dict[int, int]) -> None:
        self.changelog_topic = SimpleNamespace(get_topic_name=lambda: topic)
        self.data = SimpleNamespace(persisted_offset=lambda tp: persisted.get(tp.partition))
        self.batches: list[list[Any]] = []

    def apply_changelog_batch(self, events: list[Any]) -> None:
        self.batches.append(events)


async def test_each_partition_is_read_from_after_its_store_s_offset_to_its_end() -> None:
    topic = "app-t-changelog"
    ends = {TopicPartition(topic, 0): 25, TopicPartition(topic, 1): 4, TopicPartition(topic, 2): 9}
    table = FakeTable(topic, persisted={1: 3, 2: 4})  # 1 is at its end
    kafka = FakeChangelogs(ends, per_fetch=10)
    restored = await restore_stores(SimpleNamespace(should_stop=False), kafka, [table])
    assert (restored.records, restored.partitions) == (25 + 4, 2)
    offsets = sorted((e.message.partition, e.message.offset) for b in table.batches for e in b)
    assert offsets == [(0, o) for o in range(25)] + [(2, o) for o in range(5, 9)]
    assert all(len({e.message.partition for e in batch}) == 1 for batch in table.batches)
    assert kafka.paused == set(ends)


async def test_a_restore_stops_after_the_fetch_under_way_when_the_app_stops() -> None:
    topic = "app-t-changelog"
    app = SimpleNamespace(should_stop=False)
    table = FakeTable(topic, persisted={})
    kafka = FakeChangelogs({TopicPartition(topic, 0): 1_000}, per_fetch=10)

    def stop_after_the_first(events: list[Any]) -> None:
        table.batches.append(events)
        app.should_stop = True

    table.apply_changelog_batch = stop_after_the_first  # type: ignore[method-assign]
    restored = await restore_stores(app, kafka, [table])
    assert (kafka.fetches, restored.records) == (1, 10)  # the store keeps the 10, and says so


async def test_a_table_whose_changelog_is_not_there_yet_is_left_to_faust() -> None:
    table = FakeTable("app-t-changelog", persisted={})
    restored = await restore_stores(
        SimpleNamespace(should_stop=False), FakeChangelogs({}, 10), [table]
    )
    assert restored.skipped == "no changelog yet"
