"""Shared plumbing: the broker, per-phase settings, worker processes, topic probes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.meta import REPO
from streams.settings import Settings


def log(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Broker


@dataclass
class Broker:
    bootstrap: str
    run_dir: Path | None  # None: an existing cluster (CHORUS_BOOTSTRAP_SERVERS)
    lib: Path | None  # the Kafka jars (for ConsumerPerformance), when known

    def pid(self) -> int | None:
        """The local broker's JVM (None for an existing cluster): the broker's CPU is part of
        what a message costs, and it shares the machine's cores with the processors."""
        if self.run_dir is None:
            return None
        from streams.ops.broker import cluster_status

        info = cluster_status(self.run_dir)
        return info.nodes[0].pid if info is not None and info.nodes else None

    def topic_bytes(self) -> dict[str, int]:
        """Bytes in each topic's log segments on the local broker ({} for an existing
        cluster): all that was written, as long as the cleaner has not run (a bench run
        stays within the first segment)."""
        if self.run_dir is None:
            return {}
        sizes: dict[str, int] = {}
        for partition in self.run_dir.glob("node-*/data/*-[0-9]*"):
            topic = partition.name.rsplit("-", 1)[0]
            written = sum(log.stat().st_size for log in partition.glob("*.log"))
            sizes[topic] = sizes.get(topic, 0) + written
        return sizes

    def stop(self) -> None:
        if self.run_dir is not None:
            from streams.ops.broker import stop_cluster

            stop_cluster(self.run_dir)


def start_broker(work: Path) -> Broker:
    """CHORUS_BOOTSTRAP_SERVERS when set; else a local one-node broker on free ports."""
    from streams.ops.broker import ensure_kafka_jars, free_port, start_cluster

    settings = Settings()
    configured = os.environ.get("CHORUS_BOOTSTRAP_SERVERS")
    try:
        lib: Path | None = ensure_kafka_jars(settings.broker_home, settings.kafka_version)
    except Exception as error:  # no Java or Maven: ConsumerPerformance is skipped
        log(f"Kafka jars unavailable ({error}); ConsumerPerformance will be skipped")
        lib = None
    if configured:
        return Broker(configured, None, lib)
    from streams.ops.broker import BrokerError

    for attempt in range(3):
        run_dir = work / f"kafka-{attempt}"
        try:
            cluster = start_cluster(
                home=settings.broker_home,
                run_dir=run_dir,
                nodes=1,
                base_port=free_port(),
                kafka_version=settings.kafka_version,
                timeout=120.0,
            )
            # In a thread of its own: callers may already be inside an event loop.
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, _warm_up(cluster.bootstrap_servers)).result()
            return Broker(cluster.bootstrap_servers, run_dir, lib)
        except BrokerError as error:
            # A random cluster id that starts with "-" is read as an option by
            # kafka-storage format (1 in 64); a fresh run dir draws another id.
            if "--cluster-id" not in str(error) or attempt == 2:
                raise
            log("broker storage format rejected the cluster id; retrying with a new one")
    raise AssertionError("unreachable")


async def _warm_up(bootstrap: str, timeout: float = 60.0) -> None:
    """Wait until a group coordinator answers: a fresh broker creates __consumer_offsets on
    the first lookup, and a Faust worker that asks first crashes with
    GroupCoordinatorNotAvailableError instead of retrying."""
    deadline = time.monotonic() + timeout
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="bench-warm-up")
    await consumer.start()
    try:
        while True:
            try:
                await asyncio.wait_for(consumer._coordinator.ensure_coordinator_known(), 10)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await consumer.stop()


# --------------------------------------------------------------------------------------------
# Settings and environments per phase


@dataclass
class Phase:
    """One phase's own topics, consumer group, data dir and web port."""

    name: str
    broker: Broker
    work: Path
    partitions: int = 4
    extra: dict[str, str] = field(default_factory=dict)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    @property
    def prefix(self) -> str:
        return f"bench-{self.name}-{self.tag}."

    @property
    def app_id(self) -> str:
        return f"bench-{self.name}-{self.tag}"

    def env(self, **overrides: str) -> dict[str, str]:
        from streams.ops.broker import free_port

        data_dir = self.work / f"{self.name}-{self.tag}" / "worker-data"
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        env = {
            "CHORUS_BOOTSTRAP_SERVERS": self.broker.bootstrap,
            "CHORUS_TOPIC_PREFIX": self.prefix,
            "CHORUS_APP_ID": self.app_id,
            "CHORUS_DATA_DIR": str(data_dir),
            "CHORUS_WEB_PORT": str(free_port()),
            "CHORUS_PARTITIONS": str(self.partitions),
            "CHORUS_STORE": "rocksdb://",
            "CHORUS_STANDBY_REPLICAS": "0",
            "CHORUS_SESSION_TIMEOUT_SECONDS": "10",
            # No LLM unless a phase asks for one: the heuristic tiers summarise.
            "CHORUS_LLM_BASE_URL": "",
            **self.extra,
        }
        env.update(overrides)
        return env

    def settings(self, **overrides: str) -> Settings:
        values = {k.removeprefix("CHORUS_").lower(): v for k, v in self.env(**overrides).items()}
        values = {k: v for k, v in values.items() if v != ""}
        return Settings(**values)  # type: ignore[arg-type]

    def topic(self, name: str) -> str:
        return f"{self.prefix}{name}"


def work_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="chorus-bench-"))


# --------------------------------------------------------------------------------------------
# Worker processes


_FAUST_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


class Worker:
    """`chorus worker` in its own process, as a user runs it."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        loglevel: str = "info",  # at "warning" Faust's spinner makes the root logger DEBUG
        module: Sequence[str] = ("streams.interfaces.cli", "worker"),
    ) -> None:
        self.module = list(module)
        self.env = {**os.environ, **env}
        # BENCH_WORKER_SRC: run the worker from another checkout (A/B of a proposed change).
        self.source = Path(os.environ.get("BENCH_WORKER_SRC") or REPO)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(self.source), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        if not env.get("CHORUS_LLM_BASE_URL"):
            self.env.pop("CHORUS_LLM_BASE_URL", None)
        self.log_path = log_path
        self.loglevel = loglevel
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = f"http://127.0.0.1:{env['CHORUS_WEB_PORT']}"
        self.started_at = 0.0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(
        self, wait: bool = True, timeout: float = 120.0, prefix: Sequence[str] = ()
    ) -> Worker:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = self.log_path.open("ab")
        self.precreate_changelogs()
        command = [*prefix, sys.executable, "-m", *self.module, "--loglevel", self.loglevel]
        self.started_at = time.time()
        self.process = subprocess.Popen(
            command,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=self.source,
            start_new_session=True,
        )
        if wait:
            self.wait_ready(timeout)
        return self

    def precreate_changelogs(self) -> None:
        """See bench/changelogs.py: Faust's first-start race, taken out of the numbers."""
        proc = subprocess.run(
            [sys.executable, "-m", "bench.changelogs", self.module[0]],
            env=self.env,
            cwd=self.source,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            log(f"  could not pre-create changelog topics: {proc.stderr.strip()[-300:]}")

    def wait_ready(self, timeout: float = 120.0) -> float:
        """Seconds from launch until a routed view answers (the worker owns its partitions)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                probe = f"{self.base_url}/ready"
                if httpx.get(probe, timeout=2).status_code == 200:
                    return time.time() - self.started_at
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"worker not ready in {timeout}s:\n{self.log_tail()}")

    def check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"worker exited early:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def log_times(self, needle: str) -> list[float]:
        """Epoch seconds of the worker's log lines containing `needle`."""
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if needle in line:
                match = _FAUST_TIME.match(line)
                if match:
                    stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
                    found.append(stamp.timestamp())
        return found

    def rss(self) -> int:
        """The worker's resident memory: `chorus worker` and its roles' processes."""
        import psutil

        process = psutil.Process(self.pid)
        total = process.memory_info().rss
        for child in process.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                continue
        return int(total)

    def stop(self, timeout: float = 60.0) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


# --------------------------------------------------------------------------------------------
# Topics


async def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        if name not in set(await admin.list_topics()):
            await admin.create_topics(
                [
                    NewTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=1,
                        topic_configs=config,
                    )
                ]
            )
    finally:
        await admin.close()


async def produce(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]
) -> tuple[int, float]:
    """Send all records (acks=all, idempotent, as chorus's producer); (count, seconds)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        max_batch_size=256 * 1024,
        max_request_size=2 * 1024 * 1024,
    )
    await producer.start()
    started = time.perf_counter()
    count = 0
    try:
        pending = []
        for key, value in records:
            pending.append(await producer.send(topic, value=value, key=key))
            count += 1
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return count, time.perf_counter() - started


def _consumer(bootstrap: str, **options: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **options
    )


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = _consumer(bootstrap)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        ends = await consumer.end_offsets(tps) if tps else {}
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def wait_for_count(
    bootstrap: str,
    topic: str,
    count: int,
    timeout: float,
    poll: float = 0.5,
    alive: Callable[[], None] | None = None,
    progress_every: float = 15.0,
    on_poll: Callable[[int], None] | None = None,
    stall: float | None = 120.0,
) -> float:
    """Wait until `topic` holds `count` records (sum of end offsets); returns the wall time."""
    consumer = _consumer(bootstrap)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout
        tps: list[TopicPartition] = []
        last_report = time.monotonic()
        last_total, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            if not tps:
                await consumer._client.force_metadata_update()
                tps = [
                    TopicPartition(topic, p)
                    for p in sorted(consumer.partitions_for_topic(topic) or ())
                ]
            total = sum((await consumer.end_offsets(tps)).values()) if tps else 0
            if on_poll is not None:
                on_poll(total)
            if total >= count:
                return time.time()
            if total != last_total:
                last_total, last_change = total, time.monotonic()
            elif stall is not None and time.monotonic() - last_change > stall:
                raise TimeoutError(f"{topic}: no progress for {stall:.0f}s at {total:,}/{count:,}")
            if alive is not None:
                alive()
            if time.monotonic() - last_report > progress_every:
                log(f"  {topic}: {total:,}/{count:,}")
                last_report = time.monotonic()
            await asyncio.sleep(poll)
        raise TimeoutError(f"{topic}: fewer than {count} records after {timeout}s")
    finally:
        await consumer.stop()


@dataclass
class Span:
    count: int
    first_ms: int
    last_ms: int

    @property
    def seconds(self) -> float:
        return max(self.last_ms - self.first_ms, 1) / 1000.0


async def topic_span(bootstrap: str, topic: str) -> Span:
    """Record count and the first and last record timestamps (CreateTime) over all partitions.

    Reads only one record at each end of each partition.
    """
    consumer = _consumer(bootstrap, max_poll_records=1)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        begins = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        firsts: list[int] = []
        lasts: list[int] = []
        for tp in tps:
            if ends[tp] <= begins[tp]:
                continue
            for position, into in ((begins[tp], firsts), (ends[tp] - 1, lasts)):
                consumer.seek(tp, position)
                while True:
                    batch = await consumer.getmany(tp, timeout_ms=5000, max_records=1)
                    records = batch.get(tp, [])
                    if records:
                        into.append(records[0].timestamp)
                        break
        count = sum(ends[tp] - begins[tp] for tp in tps)
        return Span(count, min(firsts), max(lasts))
    finally:
        await consumer.stop()


async def timeline(
    bootstrap: str, topic: str, start_ms: int, end_ms: int, step_ms: int
) -> list[tuple[float, int]]:
    """Cumulative record count by timestamp, via offsets_for_times (no records are read)."""
    consumer = _consumer(bootstrap)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        begins = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        points = []
        for t in range(start_ms, end_ms + step_ms, step_ms):
            found = await consumer.offsets_for_times({tp: t for tp in tps})
            total = 0
            for tp in tps:
                hit = found.get(tp)
                total += (hit.offset if hit is not None else ends[tp]) - begins[tp]
            points.append(((t - start_ms) / 1000.0, total))
        return points
    finally:
        await consumer.stop()


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


@dataclass(frozen=True)
class StoredRecord:
    offset: int
    timestamp_ms: int
    size: int  # key + value bytes
    value: bytes | None


async def read_records(
    bootstrap: str, topic: str, partition: int, start: int, end: int, keep_values: bool = False
) -> list[StoredRecord]:
    """The records of one partition at offsets [start, end) (fewer when the log ends
    sooner); values are kept only when asked, so large windows stay cheap to hold."""
    consumer = _consumer(bootstrap, max_partition_fetch_bytes=8 * 1024 * 1024)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        last = min(end, (await consumer.end_offsets([tp]))[tp])
        consumer.seek(tp, start)
        found: list[StoredRecord] = []
        while (found[-1].offset + 1 if found else start) < last:
            batch = await consumer.getmany(tp, timeout_ms=5000)
            for record in batch.get(tp, []):
                if record.offset >= last:
                    break
                size = len(record.key or b"") + len(record.value or b"")
                value = record.value if keep_values else None
                found.append(StoredRecord(record.offset, record.timestamp, size, value))
            if not batch:
                break
        return found
    finally:
        await consumer.stop()
