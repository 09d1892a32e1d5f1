"""Stopping without a broker: a worker whose broker is gone still stops on SIGTERM within
10 s (starting without one: tests/unit/streams/interfaces/cli/test_unreachable_broker.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.kafka.produce import send_messages
from streams.ops.broker import ClusterInfo, start_cluster, stop_cluster
from streams.settings import Settings
from tests.broker_faults import kill_node
from tests.conftest import free_web_port
from tests.faults.conftest import FaultWorker
from tests.faults.support import channel_names, prepare_topics, report, traffic

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

# How long a worker may take to exit after SIGTERM, whatever its broker does.
EXIT_WITHIN_SECONDS = 10.0


@pytest.fixture
def doomed_broker(tmp_path: Path) -> Iterator[tuple[ClusterInfo, Path]]:
    """A broker of this test's own on free ports, to be killed under the worker."""
    run_dir = tmp_path / "kafka"
    settings = Settings()
    try:
        yield (
            start_cluster(
                home=settings.broker_home,
                run_dir=run_dir,
                nodes=1,
                base_port=0,
                kafka_version=settings.kafka_version,
                timeout=180.0,
            ),
            run_dir,
        )
    finally:
        stop_cluster(run_dir)


@pytest.mark.timeout(400)
async def test_a_worker_whose_broker_is_gone_exits_on_sigterm_within_10_s(
    doomed_broker: tuple[ClusterInfo, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, run_dir = doomed_broker
    tag = uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        "CHORUS_BOOTSTRAP_SERVERS": cluster.bootstrap_servers,
        "CHORUS_TOPIC_PREFIX": f"g{tag}.",
        "CHORUS_APP_ID": f"chorus-gone-{tag}",
        "CHORUS_DATA_DIR": str(tmp_path / "worker-data"),
        "CHORUS_WEB_PORT": str(free_web_port()),
        "CHORUS_PARTITIONS": "2",
        "CHORUS_STANDBY_REPLICAS": "0",
    }
    for name in ("CHORUS_BOOTSTRAP_SERVERS", "CHORUS_TOPIC_PREFIX", "CHORUS_APP_ID"):
        monkeypatch.setenv(name, env[name])
    settings = Settings()
    await prepare_topics(settings)
    worker = FaultWorker(env, tmp_path / "worker.log", loglevel="info")
    try:
        await asyncio.to_thread(worker.start, 180.0)
        await send_messages(settings, traffic(channel_names(4, "gone"), 40))
        await asyncio.sleep(3)  # folding, summarising: clients busy with the broker
        for node in cluster.nodes:
            kill_node(run_dir, node.node_id)
        await asyncio.sleep(3)  # the worker notices: its requests fail, it reconnects
        assert worker.alive()
        started = time.monotonic()
        os.killpg(worker.pid, signal.SIGTERM)
        assert worker.process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=60)
        took = time.monotonic() - started
        report("broker gone, SIGTERM", exit_seconds=round(took, 1))
        assert not worker.alive(), f"still running 60 s after SIGTERM:\n{worker.log_tail()}"
        assert took <= EXIT_WITHIN_SECONDS, f"exited after {took:.1f} s:\n{worker.log_tail()}"
    finally:
        worker.stop()
