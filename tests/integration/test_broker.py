"""The embedded Kafka cluster (streams.ops.broker) against real JVMs; jars in broker_home."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.ops.broker import (
    BrokerError,
    ClusterInfo,
    cluster_status,
    ensure_kafka_jars,
    free_port,
    start_cluster,
    stop_cluster,
)
from streams.settings import Settings
from tests.broker_faults import kill_node, restart_node

pytestmark = pytest.mark.kafka

SETTINGS = Settings()


@pytest.fixture(scope="module", autouse=True)
def _jars() -> None:
    ensure_kafka_jars(SETTINGS.broker_home, SETTINGS.kafka_version)  # Maven once per machine


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "kafka"
    yield path
    stop_cluster(path, timeout=10)  # whatever the test did, leave no broker behind


def _start(run_dir: Path, **kwargs: int) -> ClusterInfo:
    """A cluster on free ports unless the test names them: `make run`'s broker may hold
    the default port (9092) beside the tests."""
    return start_cluster(
        home=SETTINGS.broker_home,
        run_dir=run_dir,
        kafka_version=SETTINGS.kafka_version,
        timeout=90.0,
        **{"base_port": 0, **kwargs},
    )


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


async def _create_topic(bootstrap: str, name: str, replication: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 3, replication)])
    finally:
        await admin.close()


async def _topics_and_brokers(bootstrap: str) -> tuple[set[str], int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        cluster = await admin.describe_cluster()
        return set(await admin.list_topics()), len(cluster["brokers"])
    finally:
        await admin.close()


async def _round_trip(bootstrap: str, topic: str, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=20000)
    await producer.start()
    try:
        await asyncio.wait_for(producer.send_and_wait(topic, value, partition=0), 30)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            if any(r.value == value for records in batches.values() for r in records):
                return
        raise AssertionError(f"{value!r} not consumed from {topic}")
    finally:
        await consumer.stop()


def test_single_node_lifecycle(run_dir: Path) -> None:
    port = free_port()
    started = time.monotonic()
    info = _start(run_dir, base_port=port)
    print(f"single node ready in {time.monotonic() - started:.1f}s")
    assert info.bootstrap_servers == f"127.0.0.1:{port}"
    [node] = info.nodes
    assert node.port == port and node.pid is not None
    assert "Kafka Server started" in node.log_file.read_text()

    asyncio.run(_create_topic(info.bootstrap_servers, "chorus.test", 1))
    asyncio.run(_round_trip(info.bootstrap_servers, "chorus.test", b"hello"))
    assert cluster_status(run_dir) == info
    assert (run_dir / "cluster.json").is_file()

    assert _start(run_dir, base_port=port) == info  # idempotent: same process

    with pytest.raises(BrokerError, match=f"port {port} is already in use"):
        _start(run_dir.parent / "other", base_port=port)

    assert stop_cluster(run_dir) is True
    assert node.pid is not None and _gone(node.pid)
    assert cluster_status(run_dir) is None
    assert stop_cluster(run_dir) is False

    # A restart keeps the data (storage is not formatted again).
    again = _start(run_dir, base_port=port)
    assert again.nodes[0].pid != node.pid
    topics, brokers = asyncio.run(_topics_and_brokers(again.bootstrap_servers))
    assert "chorus.test" in topics and brokers == 1
    assert stop_cluster(run_dir) is True


def test_three_nodes_survive_one_kill(run_dir: Path) -> None:
    started = time.monotonic()
    info = _start(run_dir, nodes=3, base_port=0)
    print(f"3 nodes ready in {time.monotonic() - started:.1f}s")
    assert len(info.nodes) == 3 and all(n.pid for n in info.nodes)
    assert len(info.bootstrap_servers.split(",")) == 3
    ports = {p for n in info.nodes for p in (n.port, n.controller_port)}
    assert len(ports) == 6
    asyncio.run(_create_topic(info.bootstrap_servers, "chorus.replicated", 3))

    victim = info.nodes[1]
    assert kill_node(run_dir, victim.node_id, signal.SIGKILL) is True
    assert victim.pid is not None and _gone(victim.pid)
    status = cluster_status(run_dir)
    assert status is not None
    assert [n.pid is None for n in status.nodes] == [False, True, False]
    assert kill_node(run_dir, victim.node_id) is False

    # acks=all with min.insync.replicas=2 still works once the dead node is fenced.
    asyncio.run(_round_trip(info.bootstrap_servers, "chorus.replicated", b"after-kill"))
    topics, brokers = asyncio.run(_topics_and_brokers(info.bootstrap_servers))
    assert "chorus.replicated" in topics and brokers == 2

    restarted = restart_node(run_dir, victim.node_id, timeout=60)
    assert all(n.pid for n in restarted.nodes)
    assert restarted.nodes[1].pid != victim.pid
    _, brokers = asyncio.run(_topics_and_brokers(info.bootstrap_servers))
    assert brokers == 3

    assert stop_cluster(run_dir) is True
    assert all(n.pid is not None and _gone(n.pid) for n in restarted.nodes)
    print(f"3-node test total {time.monotonic() - started:.1f}s")


def test_a_cluster_id_starting_with_a_dash_formats(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import streams.ops.broker.lifecycle as lifecycle

    # base64url ids start with "-" one time in 64; "-t <id>" would take it for an option
    monkeypatch.setattr(lifecycle, "new_cluster_id", lambda: "-" + "A" * 21)
    info = _start(run_dir)
    assert asyncio.run(_topics_and_brokers(info.bootstrap_servers))[1] == 1
    assert stop_cluster(run_dir)
