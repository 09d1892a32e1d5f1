"""Running chorus as a user does, for tests and benchmarks: a local broker on free ports,
an isolated worker environment, and `chorus worker` as a real process.

    with local_broker(run_dir) as bootstrap:
        env = worker_env(bootstrap, data_dir)
        worker = WorkerProcess(env, log_path).start()  # ready: both roles own partitions
        ...
        worker.stop()

Every worker environment gets its own topic prefix, consumer group, data directory and web
ports, so several workers (or several tests) share one broker without seeing each other.
`WorkerProcess` also runs any other stream processor given its `command` (the benchmark's
fold stage alone, its Quix Streams peer): `spawn` starts it, `kill`/`stop` end it.

Without a broker: `OfflineProducer` stands in for the aiokafka producer a checkpoint writes
changelogs with (`Checkpoint(producer=...)`): every record batch is acknowledged at once,
with offsets that grow per topic and partition, and what was sent is kept.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from streams.ops.broker import free_port, start_cluster, stop_cluster
from streams.ops.broker.ports import port_free
from streams.settings import Settings, bearer_header

REPO = Path(__file__).resolve().parent.parent
WORKER_COMMAND = ("-m", "streams.interfaces.cli", "worker")
WEB_PORTS = range(20_000, 32_000)


@contextmanager
def local_broker(run_dir: Path, timeout: float = 120.0) -> Iterator[str]:
    """A one-node local Kafka broker on free ports, its data in `run_dir`; yields its
    bootstrap address and stops it on the way out."""
    settings = Settings()
    cluster = start_cluster(
        home=settings.broker_home,
        run_dir=run_dir,
        nodes=1,
        base_port=free_port(),
        kafka_version=settings.kafka_version,
        timeout=timeout,
    )
    try:
        yield cluster.bootstrap_servers
    finally:
        stop_cluster(run_dir)


def free_web_port(taken: int | None = None) -> int:
    """A port for CHORUS_WEB_PORT whose next port, the context role's, is free too (and
    neither is one of the two of another worker's CHORUS_WEB_PORT `taken`). Drawn below
    Linux's ephemeral range (32768 and up), so no outgoing connection takes either port
    between the choice and the worker's bind."""
    while True:
        port = random.randrange(WEB_PORTS.start, WEB_PORTS.stop - 1)
        if taken is not None and abs(port - taken) <= 1:
            continue
        if port_free(port) and port_free(port + 1):
            return port


def worker_env(bootstrap: str, data_dir: Path, tag: str | None = None) -> dict[str, str]:
    """CHORUS_* settings for one isolated worker on `bootstrap`: topics prefixed
    `<tag>.`, app id (consumer groups, changelog topics) `chorus-<tag>`, its own data
    directory and web ports, RocksDB tables, no standby replicas (one worker)."""
    tag = tag or f"t{uuid.uuid4().hex[:8]}"
    return {
        "CHORUS_BOOTSTRAP_SERVERS": bootstrap,
        "CHORUS_TOPIC_PREFIX": f"{tag}.",
        "CHORUS_APP_ID": f"chorus-{tag}",
        "CHORUS_DATA_DIR": str(data_dir),
        "CHORUS_WEB_PORT": str(free_web_port()),
        "CHORUS_PARTITIONS": "4",
        "CHORUS_STORE": "rocksdb://",
        "CHORUS_STANDBY_REPLICAS": "0",
    }


class WorkerProcess:
    """`chorus worker` in its own process, as a user runs it: a supervisor and its two roles'
    processes (fold on CHORUS_WEB_PORT, context on the next port), one process group.
    With `command` (arguments after the Python interpreter, or a whole command line starting
    with an executable path), another process run the same way."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        command: Sequence[str] | None = None,
        loglevel: str = "warning",
    ) -> None:
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.command = command
        self.loglevel = loglevel
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = f"http://127.0.0.1:{env.get('CHORUS_WEB_PORT')}"
        self.context_url = f"http://127.0.0.1:{int(env.get('CHORUS_WEB_PORT', 0)) + 1}"
        self.auth = bearer_header(env.get("CHORUS_API_TOKEN"))
        # What the readiness probe got before the worker was ready: (status, Retry-After).
        self.not_ready_answers: list[tuple[int, str | None]] = []

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def spawn(self) -> WorkerProcess:
        """Start the process without waiting for it to be ready."""
        if self.command is None:
            argv = [sys.executable, *WORKER_COMMAND, "--loglevel", self.loglevel]
        elif self.command[0].startswith("-"):
            argv = [sys.executable, *self.command]
        else:
            argv = list(self.command)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
            )
        return self

    def start(self, timeout: float = 90.0) -> WorkerProcess:
        self.spawn()
        self.wait_ready(timeout)
        return self

    def check_alive(self) -> None:
        assert self.process is not None, "not started"
        if self.process.poll() is not None:
            raise RuntimeError(f"worker exited early:\n{self.log_tail()}")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
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
        found: dict[str, int] = {}
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
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


@dataclass(frozen=True)
class Acknowledged:
    """The broker's answer to a record batch: its first record's offset."""

    offset: int


class OfflineBatch:
    """A record batch as aiokafka's `create_batch` makes it (records appended, then closed)."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []

    def append(self, *, key: bytes | None, value: bytes | None, timestamp: int | None) -> object:
        self.records.append((key, value))
        return object()

    def close(self) -> None:
        pass


class OfflineProducer:
    """aiokafka's batch interface, no broker: every batch acknowledged at once (see the
    module); `sent` holds (topic, partition, records) of each."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, list[tuple[bytes | None, bytes | None]]]] = []
        self.ends: dict[tuple[str, int], int] = {}

    def create_batch(self) -> OfflineBatch:
        return OfflineBatch()

    async def send_batch(
        self, batch: OfflineBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        self.sent.append((topic, partition, batch.records))
        offset = self.ends.get((topic, partition), 0)
        self.ends[(topic, partition)] = offset + len(batch.records)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(Acknowledged(offset))
        return future


def mcp_over_http(
    env: dict[str, str], log_path: Path, timeout: float = 60.0
) -> tuple[subprocess.Popen[bytes], int]:
    """`chorus mcp --transport http` in its own process on a free port, once it listens:
    (the process, its port). Stop it with `terminate()`."""
    port = free_port()
    argv = [sys.executable, "-m", "streams.interfaces.cli", "mcp", "--transport", "http"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [*argv, "--port", str(port)],
            env={**os.environ, **env},
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"chorus mcp exited:\n{log_path.read_text(errors='replace')}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            return server, port
        except httpx.HTTPError:
            time.sleep(0.1)
    server.terminate()
    raise TimeoutError(f"chorus mcp --transport http did not listen in {timeout:g} s")
