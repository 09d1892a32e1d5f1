"""Fixtures: one real Kafka broker per test session, and chorus workers as real processes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streams.kafka.consume import Record, read_topic
from streams.settings import Settings
from streams.testing import REPO as REPO  # re-exported: the tests import them from here
from streams.testing import WorkerProcess as WorkerProcess
from streams.testing import free_web_port as free_web_port
from streams.testing import local_broker, worker_env

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
