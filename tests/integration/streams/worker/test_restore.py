"""streams.worker.restore on a real broker: a role's RocksDB stores brought to the end of
their changelogs before it joins its group, only when no other worker is in it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.kafka.clients import client_options, producer, started, topic_partitions
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.records import key_partition
from streams.settings import Settings
from streams.worker.app import SharedRocksDB, build_app, share_rocksdb_budget
from streams.worker.restore import Restored, restore_before_joining
from streams.worker.store import TableStore, encoded_key
from tests.conftest import WorkerProcess, read_until
from tests.factories import conversation

pytestmark = pytest.mark.kafka

MIB = 1024 * 1024


def fold_app_and_table(settings: Settings) -> tuple[Any, Any]:
    """The fold role's app with one RocksDB table, as a runtime declares its tables."""
    app = build_app(settings, "fold")
    table = app.Table("restored", partitions=settings.partitions)
    share_rocksdb_budget(table, SharedRocksDB(16 * MIB))
    return app, table


async def write_changelog(
    settings: Settings, topic: str, records: list[tuple[str, bytes | None]]
) -> None:
    """Each (key, value) to the key's partition, as a checkpoint writes a changelog (a
    None value is a deletion)."""
    kafka = await started(producer(settings), settings)
    try:
        for key, value in records:
            partition = key_partition(key.encode(), settings.partitions)
            await kafka.send_and_wait(topic, value, key=encoded_key(key), partition=partition)
    finally:
        await kafka.stop()


def stored(table: Any, settings: Settings, key: str) -> bytes | None:
    return TableStore(table).get(key, key_partition(key.encode(), settings.partitions))


async def test_a_cold_store_is_brought_to_the_changelog_s_end_and_read_from_there_after(
    chorus_settings: Settings,
) -> None:
    app, table = fold_app_and_table(chorus_settings)
    topic = table.changelog_topic.get_topic_name()
    await create_topics(chorus_settings, [topic])
    keys = [f"room/{i}" for i in range(40)]
    first = [(k, b'{"v": 1}') for k in keys] + [(k, b'{"v": 2}') for k in keys[:10]]
    first += [(k, None) for k in keys[30:]]  # deleted
    await write_changelog(chorus_settings, topic, first)

    restored = await restore_before_joining(app, chorus_settings, [table])
    assert restored.skipped is None
    assert restored.records == len(first)
    assert restored.partitions == chorus_settings.partitions
    assert [stored(table, chorus_settings, k) for k in keys] == (
        [b'{"v": 2}'] * 10 + [b'{"v": 1}'] * 20 + [None] * 10
    )
    # Each store says where it is: Faust's recovery starts after it, with nothing to read.
    kafka = AIOKafkaConsumer(**client_options(chorus_settings))
    await kafka.start()
    try:
        partitions = [TopicPartition(topic, p) for p in await topic_partitions(kafka, topic)]
        ends = await kafka.end_offsets(partitions)
    finally:
        await kafka.stop()
    for tp in partitions:
        assert table.data.persisted_offset(tp) == ends[tp] - 1

    again = await restore_before_joining(app, chorus_settings, [table])
    assert (again.records, again.partitions) == (0, 0)

    later = [("room/0", b'{"v": 3}'), ("room/1", None)]
    await write_changelog(chorus_settings, topic, later)
    resumed = await restore_before_joining(app, chorus_settings, [table])
    assert resumed.records == len(later)  # from where the store was, not the beginning
    assert stored(table, chorus_settings, "room/0") == b'{"v": 3}'
    assert stored(table, chorus_settings, "room/1") is None


async def member_of_the_group(settings: Settings, app: Any, **options: Any) -> AIOKafkaConsumer:
    """A consumer in the app's group, once the group has assigned it its partitions."""
    await create_topics(settings)
    kafka = AIOKafkaConsumer(
        settings.topic("messages"), group_id=app.conf.id, **client_options(settings), **options
    )
    await kafka.start()
    for _ in range(300):
        if kafka.assignment():
            return kafka
        await asyncio.sleep(0.1)
    await kafka.stop()
    raise AssertionError("the consumer was never assigned partitions")


async def restore_beside_a_member(
    settings: Settings, its_instance_id: str | None
) -> tuple[Restored, bytes | None]:
    """A restore while a member of `its_instance_id` (None: this worker's own) is in the
    group, and what the store then holds of the one key its changelog has."""
    app, table = fold_app_and_table(settings)
    topic = table.changelog_topic.get_topic_name()
    await create_topics(settings, [topic])
    await write_changelog(settings, topic, [("room/a", b"{}")])
    instance_id = its_instance_id or app.conf.consumer_group_instance_id
    member = await member_of_the_group(settings, app, group_instance_id=instance_id)
    try:
        restored = await restore_before_joining(app, settings, [table])
    finally:
        await member.stop()
    return restored, stored(table, settings, "room/a")


async def test_with_another_worker_in_the_group_it_reads_nothing(
    chorus_settings: Settings,
) -> None:
    restored, value = await restore_beside_a_member(chorus_settings, "another-host")
    assert restored.skipped == "1 other member(s) in the group"
    assert restored.records == 0
    assert value is None  # Faust's recovery restores it, for the partitions assigned


async def test_its_own_earlier_process_still_in_the_group_is_not_another_worker(
    chorus_settings: Settings,
) -> None:
    # A crashed worker's static member stays in the group until its session ends.
    restored, value = await restore_beside_a_member(chorus_settings, None)
    assert restored.skipped is None
    assert value == b"{}"


async def test_a_worker_on_an_empty_data_directory_restores_before_it_joins(
    chorus_env: dict[str, str], chorus_settings: Settings, tmp_path: Path
) -> None:
    await create_topics(chorus_settings)
    channels = ["team/alpha", "team/beta"]
    messages = conversation(channels, 40, seed=3)

    def states(worker: WorkerProcess) -> dict[str, Any]:
        return {c: worker.get(f"/channels/{c}/state").json()["projections"] for c in channels}

    first = WorkerProcess(chorus_env, tmp_path / "first.log").start()
    try:
        await send_messages(chorus_settings, messages)
        await read_until(chorus_settings, "driver-events", lambda rs: len(rs) >= 40, 90)
        folded = states(first)
    finally:
        first.stop()

    cold_env = {**chorus_env, "CHORUS_DATA_DIR": str(tmp_path / "cold")}
    cold = WorkerProcess(cold_env, tmp_path / "cold.log", loglevel="info").start()
    try:
        assert states(cold) == folded
    finally:
        cold.stop()
    restored = re.findall(r"restored (\d+) changelog records", cold.log_path.read_text())
    assert len(restored) == 2  # each role, before it joined its group
    assert sum(int(n) for n in restored) > 0
