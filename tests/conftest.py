"""Fixtures: one real Kafka broker per test session, and chorus workers as real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from streams.kafka.consume import Record, read_topic
from streams.settings import Settings

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


RoleFetch = Callable[[str, Mapping[str, str]], Awaitable[tuple[int, bytes]]]


def answering(handler: Callable[[str, Mapping[str, str]], tuple[int, Any]]) -> RoleFetch:
    """A role client's `fetch` (streams.worker.role_client) that answers from
    `handler(path, headers)`: (status, JSON body); what the handler raises, the fetch does."""

    async def fetch(path: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        status, body = handler(path, headers)
        return status, orjson.dumps(body)

    return fetch


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """CHORUS_BOOTSTRAP_SERVERS when set; else a local broker on free ports, stopped after."""
    configured = os.environ.get("CHORUS_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    from streams.ops.broker import free_port, start_cluster, stop_cluster

    run_dir = tmp_path_factory.mktemp("kafka")
    cluster = start_cluster(
        home=Settings().broker_home,
        run_dir=run_dir,
        nodes=1,
        base_port=free_port(),
        kafka_version=Settings().kafka_version,
        timeout=120.0,
    )
    try:
        yield cluster.bootstrap_servers
    finally:
        stop_cluster(run_dir)


def free_web_port(taken: int | None = None) -> int:
    """A port for CHORUS_WEB_PORT whose next port, the context role's, is free too (and
    neither is one of the two of another worker's CHORUS_WEB_PORT `taken`)."""
    import socket

    from streams.ops.broker import free_port

    while True:
        port = free_port()
        if taken is not None and abs(port - taken) <= 1:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


@pytest.fixture
def chorus_env(kafka_bootstrap: str, tmp_path: Path) -> dict[str, str]:
    """Environment for one test: its own topics, consumer group, data dir and web ports."""
    tag = uuid.uuid4().hex[:8]
    return {
        "CHORUS_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "CHORUS_TOPIC_PREFIX": f"t{tag}.",
        "CHORUS_APP_ID": f"chorus-test-{tag}",
        "CHORUS_DATA_DIR": str(tmp_path / "worker-data"),
        "CHORUS_WEB_PORT": str(free_web_port()),
        "CHORUS_PARTITIONS": "4",
        "CHORUS_STORE": "rocksdb://",
        "CHORUS_STANDBY_REPLICAS": "0",
        "CHORUS_SESSION_TIMEOUT_SECONDS": "6",
    }


@pytest.fixture
def chorus_settings(chorus_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name, value in chorus_env.items():
        monkeypatch.setenv(name, value)
    return Settings()


class WorkerProcess:
    """`chorus worker` in its own process, as a user runs it: a supervisor and its two roles'
    processes (fold on CHORUS_WEB_PORT, context on the next port), one process group."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = f"http://127.0.0.1:{env['CHORUS_WEB_PORT']}"
        self.context_url = f"http://127.0.0.1:{int(env['CHORUS_WEB_PORT']) + 1}"
        token = env.get("CHORUS_API_TOKEN")
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}
        # What the readiness probe got before the worker was ready: (status, Retry-After).
        self.not_ready_answers: list[tuple[int, str | None]] = []

    def start(self, timeout: float = 90.0) -> WorkerProcess:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streams.interfaces.cli", "worker", "--loglevel", "warning"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log_tail()}")
            try:
                # a routed view answers only once the worker has its partitions
                probe = f"{self.base_url}/ready"
                answer = httpx.get(probe, headers=self.auth, timeout=2)
                if answer.status_code == 200:
                    if self.context_ready():
                        return
                else:
                    self.not_ready_answers.append(
                        (answer.status_code, answer.headers.get("Retry-After"))
                    )
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"worker not ready in {timeout}s:\n{self.log_tail()}")

    def context_ready(self) -> bool:
        """The context role has its partitions (its web server: readiness only)."""
        try:
            answer = httpx.get(f"{self.context_url}/ready", headers=self.auth, timeout=2)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    def role_pids(self) -> dict[str, int]:
        """The pids of the supervisor's children by role (from /proc, Linux)."""
        assert self.process is not None
        found: dict[str, int] = {}
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        for pid in children.read_text().split():
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--role" in command:
                found[command[command.index(b"--role") + 1].decode()] = int(pid)
        return found

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.base_url}{path}", headers=self.auth, timeout=10)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


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
