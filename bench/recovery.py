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
    """Records of the app's changelogs, by table: `records` are read from the beginning to
    the end, what a cold restore reads; `offsets`, the span of offsets, is every write since
    the topic was created, and the two differ by what the broker's cleaner has compacted."""
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
        present = await _count_records(
            consumer, {tp: ends[tp] for tp in tps if ends[tp] > begins[tp]}
        )
    finally:
        await consumer.stop()
    records: dict[str, int] = {}
    offsets: dict[str, int] = {}
    for tp in tps:
        table = tp.topic[len(app_id) + 1 : -len("-changelog")]
        records[table] = records.get(table, 0) + present.get(tp, 0)
        offsets[table] = offsets.get(table, 0) + ends[tp] - begins[tp]
    return {
        "records": sum(records.values()),
        "by_table": records,
        "offsets": sum(offsets.values()),
        "offsets_by_table": offsets,
    }


async def _count_records(
    consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Records in each partition from its beginning to `ends` (compaction leaves gaps)."""
    counts = dict.fromkeys(ends, 0)
    if not ends:
        return counts
    consumer.assign(list(ends))
    await consumer.seek_to_beginning(*ends)
    pending = set(ends)
    while pending:
        batches = await consumer.getmany(*pending, timeout_ms=1000, max_records=10_000)
        for tp, batch in batches.items():
            counts[tp] += sum(1 for record in batch if record.offset < ends[tp])
        for tp in list(pending):  # positions move past compacted gaps too
            if await consumer.position(tp) >= ends[tp]:
                pending.discard(tp)
    return counts


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
        "changelog_offsets": totals["offsets"],
        "records_per_message": totals["records"] / messages if messages else None,
        "mb_per_message": mb / messages if messages else None,
    }
    log(
        f"  cold restore: {totals['records']:,} changelog records ({mb:,.0f} MB) in "
        f"{restore:.1f}s = {keys_per_s or 0:,.0f} keys/s; resumed in {cold['resume_s']:.1f}s"
    )
    return result


# --------------------------------------------------------------------------------------------
# Cold restore at scale: N messages' state built by a rebuild, not folded by a worker first.


async def _commit_group_offsets(
    bootstrap: str, group: str, ends: dict[int, int], topic: str
) -> None:
    """The worker group's committed offsets on the messages topic: as if it had folded them."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = {TopicPartition(topic, p): offset for p, offset in ends.items()}
        consumer.assign(list(tps))
        await consumer.commit(tps)
    finally:
        await consumer.stop()


async def _produce_cold_messages(phase: Phase, messages: int, channels: int) -> tuple[int, float]:
    from bench.common import produce
    from bench.data import load_conversations, message_stream
    from streams.ops.topics import create_topics

    await create_topics(phase.settings())
    _, conversations = load_conversations()
    stream = message_stream(conversations, channels, tag="cold")

    def records() -> Any:
        for _, message in zip(range(messages), stream, strict=False):
            yield message.channel.encode(), encode_message(message)

    started = time.perf_counter()
    count, produce_s = await produce(phase.broker.bootstrap, phase.topic("messages"), records())
    log(f"  produced {count:,} messages in {time.perf_counter() - started:.0f}s")
    return count, produce_s


async def build_state_by_worker(
    phase: Phase, messages: int, channels: int, timeout: float
) -> dict[str, Any]:
    """Produce `messages` real messages over `channels` channels, then let a real `chorus
    worker` fold them all, every stage, and stop it: every table's changelog as a live
    worker leaves it, with whatever the broker's cleaner has compacted by then."""
    from bench.fold import run_chorus

    count, produce_s = await _produce_cold_messages(phase, messages, channels)
    started = time.perf_counter()
    folded, _ = await run_chorus(phase, count, 1, max(timeout, count / 100))
    build_s = time.perf_counter() - started
    log(f"  the worker folded {count:,} messages in {build_s:.0f}s")
    return {
        "messages": count,
        "channels": channels,
        "built_by": "worker",
        "produce_s": produce_s,
        "build_s": build_s,
        "worker_msgs_per_s": folded["msgs_per_s"],
    }


async def build_state_by_rebuild(phase: Phase, messages: int, channels: int) -> dict[str, Any]:
    """Produce `messages` real messages over `channels` channels to a fresh phase's topics and
    write the state a worker would restore, the fastest honest way: `streams.replay.rebuild`
    folds the log with the worker's projection code into the fold tables' changelogs (one
    record per channel and table, what those compacted changelogs hold once compacted), the
    fold-positions table gets each partition's next offset, and the group's offsets are
    committed at the log's end, as the worker would have left them. Not built: the summary
    and recap stages' tables (they would hold each channel's pending bodies, window slots,
    latest summary and recap status)."""
    from streams.ops.topics import create_topics
    from streams.registry import registered_projections
    from streams.replay import rebuild
    from streams.replay.tables import end_offsets
    from streams.topology import MESSAGES, changelog_name

    settings = phase.settings()
    positions = changelog_name(settings, "fold-positions")
    await create_topics(settings, [positions])
    count, produce_s = await _produce_cold_messages(phase, messages, channels)
    started = time.perf_counter()
    projections = registered_projections(settings.projections, settings)
    outcomes = await rebuild(settings, projections, workers=0)
    rebuild_s = time.perf_counter() - started
    log(f"  rebuilt {', '.join(o.changelog for o in outcomes)} in {rebuild_s:.0f}s")
    ends = (await end_offsets(settings, settings.topic(MESSAGES)))[settings.topic(MESSAGES)] or {}
    producer = AIOKafkaProducer(bootstrap_servers=phase.broker.bootstrap, acks="all")
    await producer.start()
    try:
        for partition, offset in ends.items():  # Faust's json codec, in the source partition
            await producer.send_and_wait(
                positions,
                key=orjson.dumps(str(partition)),
                value=orjson.dumps(offset),
                partition=partition,
            )
    finally:
        await producer.stop()
    await _commit_group_offsets(phase.broker.bootstrap, phase.app_id, ends, phase.topic("messages"))
    return {
        "messages": count,
        "channels": channels,
        "built_by": "rebuild",
        "produce_s": produce_s,
        "rebuild_s": rebuild_s,
        "rebuilt_tables": [o.changelog for o in outcomes],
        "rebuilt_records": sum(o.written for o in outcomes),
        "not_built": [
            "summary-pending",
            "summary-items",
            "summary-latest",
            "recap-status",
            "recap-window",
        ],
    }


async def measure_cold_at_scale(
    broker: Any,
    work: Path,
    points: list[int],
    channels: int,
    timeout: float,
    partitions: int,
    built_by: str = "rebuild",
) -> list[dict[str, Any]]:
    """For each N in `points`: a fresh phase with N messages' state, then a cold start of a
    real `chorus worker` with an empty data dir: launch → the probe's driver event, the
    restore time from Faust's log, and the changelog records and MB read. `built_by`:
    "rebuild" (`build_state_by_rebuild`: the fold tables only, fast) or "worker"
    (`build_state_by_worker`: every table, at the worker's speed)."""
    results = []
    for messages in points:
        phase = Phase(f"cold{messages}", broker, work, partitions=partitions)
        log(f"  cold restore of {messages:,} messages' state over {channels:,} channels")
        if built_by == "worker":
            built = await build_state_by_worker(phase, messages, channels, timeout)
        else:
            built = await build_state_by_rebuild(phase, messages, channels)
        totals = await changelog_totals(broker.bootstrap, phase.app_id)
        log_dirs = [broker.run_dir] if broker.run_dir else []
        by_table = changelog_bytes(log_dirs, phase.app_id)
        # An empty data dir, never the building worker's: that would be a warm restart.
        data_dir = Path(phase.env()["CHORUS_DATA_DIR"]).parent / "cold-restore-data"
        cold = await restart(phase, data_dir, "cold-restore", 3, timeout)
        restore = cold["restore_s"] or cold["resume_s"]
        result = {
            **built,
            "changelog_records": totals["records"],
            "changelog_offsets": totals["offsets"],
            "changelog_records_by_table": totals["by_table"],
            "changelog_mb": sum(by_table.values()) / 1e6,
            "cold": cold,
            "cold_keys_per_s": totals["records"] / restore if restore else None,
        }
        log(
            f"  {messages:,} messages: {totals['records']:,} changelog records "
            f"({result['changelog_mb']:,.1f} MB) restored in {restore:.1f}s; "
            f"resumed in {cold['resume_s']:.1f}s"
        )
        results.append(result)
    return results
