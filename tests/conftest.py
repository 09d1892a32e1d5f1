"""Fixtures: one real Kafka broker per test session, and chorus workers as real processes."""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from projections.overview import ChannelOverviewProjection
from streams.kafka.clients import producer
from streams.kafka.consume import Record, read_topic
from streams.records import key_partition
from streams.settings import Settings
from streams.testing import REPO as REPO  # re-exported: the tests import them from here
from streams.testing import WorkerProcess as WorkerProcess
from streams.testing import free_web_port as free_web_port
from streams.testing import local_broker, worker_env
from streams.topology import CHANNEL_CONFIG, DEAD_LETTERS, changelog_name, fold_table_name

SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """CHORUS_BOOTSTRAP_SERVERS when set; else a local broker on free ports, stopped after."""
    configured = os.environ.get("CHORUS_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    with local_broker(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


@pytest.fixture
def chorus_env(kafka_bootstrap: str, tmp_path: Path) -> dict[str, str]:
    """Environment for one test: its own topics, consumer group, data dir and web ports; a
    short session timeout, so a killed worker's partitions move on within the test."""
    return {
        **worker_env(kafka_bootstrap, tmp_path / "worker-data"),
        "CHORUS_SESSION_TIMEOUT_SECONDS": "6",
    }


@pytest.fixture
def chorus_settings(chorus_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name, value in chorus_env.items():
        monkeypatch.setenv(name, value)
    return Settings()


@pytest.fixture
def start_worker(
    chorus_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    workers: list[WorkerProcess] = []

    def start(**overrides: str) -> WorkerProcess:
        env = {**chorus_env, **overrides}
        worker = WorkerProcess(env, tmp_path / f"worker-{len(workers)}.log").start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


async def read_until(
    settings: Settings,
    topic: str,
    done: Callable[[list[Record]], bool],
    timeout: float = 60.0,
) -> list[Record]:
    """Read `topic` from the beginning until `done(records)` holds; fail after `timeout`."""
    records: list[Record] = []

    async def collect() -> None:
        async for record in read_topic(settings, settings.topic(topic), follow=True):
            records.append(record)
            if done(records):
                return

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        pytest.fail(f"{topic}: condition not met in {timeout}s; got {len(records)} records")
    return records


async def config_folded(settings: Settings, channel: str, timeout: float = 60.0) -> None:
    """Wait until the worker's fold role holds `channel`'s config as last written.

    Config and messages are read by separate agents, so a message sent right after a config
    may fold under the one before. The config stage reads each partition of the config topic
    in order and dead-letters a record that is not a config: so an invalid record written
    after the config, to its partition under another key, is dead-lettered only after the
    config is in the table."""
    partition = key_partition(channel.encode(), settings.partitions)
    probe = next(
        key
        for key in (f"config-probe/{i}" for i in itertools.count())
        if key_partition(key.encode(), settings.partitions) == partition
    )
    marker = uuid.uuid4().hex
    kafka = producer(settings)
    await kafka.start()
    try:
        await kafka.send_and_wait(
            settings.topic(CHANNEL_CONFIG),
            key=probe.encode(),
            value=orjson.dumps({"probe": marker}),  # no channel: not a config
            partition=partition,
        )
    finally:
        await kafka.stop()

    def dead_lettered(records: list[Record]) -> bool:
        return any(r.key == probe and marker in str(r.value.get("original")) for r in records)

    await read_until(settings, DEAD_LETTERS, dead_lettered, timeout)


def owned_partitions(worker: WorkerProcess, settings: Settings) -> dict[str, list[int]]:
    """Host URL -> the partitions each worker actively owns, as `worker`'s router sees
    them (those of a fold table: every table is co-partitioned with the messages)."""
    table = changelog_name(settings, fold_table_name(ChannelOverviewProjection()))
    routes = httpx.get(f"{worker.base_url}/router/", headers=worker.auth, timeout=10).json()
    return {host: sorted(topics.get(table, [])) for host, topics in routes.items()}
