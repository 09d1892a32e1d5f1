"""Recovery: a restarted worker restores its state and resumes.

Two restarts of the worker that folded the throughput run's N messages:
  warm: same data dir (RocksDB kept; Faust reads only the changelog tail past its persisted
        offsets), as after a deploy or a crash on the same host;
  cold: an empty data dir (a new host, a lost disk): every table is rebuilt from its
        changelog topic.
For each: seconds from launch until a probe message produced just before the launch has its
driver events (restored *and* resumed), and, from the worker's log, the restore itself
("Restoring state from changelog topics" → "Done reading from changelog topics"), with the
changelog records and bytes it had to read: keys/s and MB/s.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from bench.common import Phase, Worker, log
from projections.model import Message, encode_message


async def changelog_totals(bootstrap: str, app_id: str) -> dict[str, Any]:
    """Records and bytes (on disk, from the broker's log dirs) of the app's changelogs."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [
            t
            for t in await admin.list_topics()
            if t.startswith(app_id + "-") and t.endswith("-changelog")
        ]
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(t, p) for t in names for p in consumer.partitions_for_topic(t) or ()]
        ends = await consumer.end_offsets(tps)
        begins = await consumer.beginning_offsets(tps)
    finally:
        await consumer.stop()
    records: dict[str, int] = {}
    for tp in tps:
        table = tp.topic[len(app_id) + 1 : -len("-changelog")]
        records[table] = records.get(table, 0) + ends[tp] - begins[tp]
    return {"records": sum(records.values()), "by_table": records}


def changelog_bytes(log_dirs: list[Path], app_id: str) -> dict[str, int]:
    """Bytes of the app's changelog segments on the broker's disk, by table."""
    sizes: dict[str, int] = {}
    for root in log_dirs:
        for path in root.glob(f"**/{app_id}-*-changelog-*/*.log"):
            table = path.parent.name[len(app_id) + 1 :].rsplit("-changelog-", 1)[0]
            sizes[table] = sizes.get(table, 0) + path.stat().st_size
    return sizes


async def _probe(
    bootstrap: str, topic: str, driver_topic: str, index: int
) -> tuple[str, dict[str, Any]]:
    """Produce one message on a fresh channel; returns its id and driver-events end offsets."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [
            TopicPartition(driver_topic, p)
            for p in consumer.partitions_for_topic(driver_topic) or ()
        ]
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    message = Message.model_validate(
        {
            "id": f"probe-{index}-{int(time.time())}",
            "channel": f"bench/probe-{index}",
            "sender": "bench",
            "type": "STATUS",
            "content": "recovery probe",
        }
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, encode_message(message), key=message.channel.encode())
    finally:
        await producer.stop()
    return message.id, ends


async def _wait_for(
    bootstrap: str, ends: dict[Any, int], message_id: str, timeout: float, worker: Worker
) -> float:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        consumer.assign(list(ends))
        for tp, offset in ends.items():
            consumer.seek(tp, offset)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            worker.check_alive()
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    if orjson.loads(record.value).get("message_id") == message_id:
                        return time.time()
        raise TimeoutError(f"probe {message_id} not driven in {timeout}s:\n{worker.log_tail()}")
    finally:
        await consumer.stop()


async def restart(
    phase: Phase, data_dir: Path, label: str, index: int, timeout: float
) -> dict[str, Any]:
    env = phase.env(CHORUS_DATA_DIR=str(data_dir))
    message_id, ends = await _probe(
        phase.broker.bootstrap, phase.topic("messages"), phase.topic("driver-events"), index
    )
    worker = Worker(env, phase.work / f"{phase.name}-{label}.log", loglevel="info")
    worker.start(wait=False)
    try:
        done = await _wait_for(phase.broker.bootstrap, ends, message_id, timeout, worker)
        resumed = done - worker.started_at
        begins = worker.log_times("Restoring state from changelog topics")
        ends_ = worker.log_times("Done reading from changelog topics")
        restore = (ends_[-1] - begins[0]) if begins and ends_ else None
        rss = worker.rss()
    finally:
        worker.stop()
    return {"resume_s": resumed, "restore_s": restore, "rss_mb": rss / 1e6}


async def measure(
    phase: Phase, data_dir: Path, messages: int, timeout: float, log_dirs: list[Path]
) -> dict[str, Any]:
    totals = await changelog_totals(phase.broker.bootstrap, phase.app_id)
    by_table = changelog_bytes(log_dirs, phase.app_id)
    size = sum(by_table.values())
    warm = await restart(phase, data_dir, "warm-restart", 1, timeout)
    log(f"  warm restart: resumed in {warm['resume_s']:.1f}s")
    cold_dir = data_dir.parent / "cold-restore-data"
    if cold_dir.exists():
        shutil.rmtree(cold_dir)
    cold = await restart(phase, cold_dir, "cold-restore", 2, timeout)
    restore = cold["restore_s"] or cold["resume_s"]
    keys_per_s = totals["records"] / restore if restore else None
    mb = size / 1e6
    result = {
        "messages": messages,
        "changelog_records": totals["records"],
        "changelog_records_by_table": totals["by_table"],
        "changelog_mb": mb,
        "changelog_mb_by_table": {t: b / 1e6 for t, b in sorted(by_table.items())},
        "warm": warm,
        "cold": cold,
        "cold_keys_per_s": keys_per_s,
        "cold_mb_per_s": mb / restore if restore else None,
        "records_per_message": totals["records"] / messages if messages else None,
        "mb_per_message": mb / messages if messages else None,
    }
    # Restore is linear in what the changelog holds (uncompacted: every write since the last
    # segment roll), so 1M messages cost 1M × records_per_message at the measured rate.
    if keys_per_s and messages:
        result["projected_1m_cold_restore_s"] = (
            1_000_000 * totals["records"] / messages / keys_per_s
        )
    log(
        f"  cold restore: {totals['records']:,} changelog records ({mb:,.0f} MB) in "
        f"{restore:.1f}s = {keys_per_s or 0:,.0f} keys/s; resumed in {cold['resume_s']:.1f}s"
    )
    return result
