"""Latency: produce → driver event at a fixed rate, with and without a slow (2 s) LLM.

A running, ready worker; a paced producer (acks=all) sends `rate` messages a second for
`duration` seconds over `channels` channels, noting each message's send time; a consumer on
driver-events notes when each message's last driver event arrives. Two figures per message:
  e2e     = arrival at the bench's consumer − send (what a driver sees);
  worker  = the driver event's CreateTime (stamped by the worker's producer) − send.
Messages whose events have not arrived `drain` seconds after the last send are counted as
missing (a backlog: the worker is slower than the rate) and the percentiles say so.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.common import Phase, Worker, log, percentile
from bench.data import encoded_messages
from bench.meta import REPO
from streams.conversations import Conversation
from streams.ops.broker import free_port
from streams.ops.topics import create_topics


class FakeLlm:
    """tests/fakes/llm_server.py as a process: `--delay 2` before every completion."""

    def __init__(self, delay: float, log_path: Any) -> None:
        self.port = free_port()
        self.delay = delay
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeLlm:
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.fakes.llm_server",
                    "--port",
                    str(self.port),
                    "--delay",
                    str(self.delay),
                ],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise TimeoutError("fake LLM server did not start")

    def stats(self) -> dict[str, Any]:
        try:
            return dict(httpx.get(f"http://127.0.0.1:{self.port}/control", timeout=5).json())
        except httpx.HTTPError:
            return {}

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


async def _collect(
    bootstrap: str,
    topic: str,
    projections: int,
    arrivals: dict[str, tuple[float, int]],
    counts: dict[str, int],
    stop: asyncio.Event,
) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=50)
            now = time.time()
            for records in batches.values():
                for record in records:
                    event = orjson.loads(record.value)
                    message_id = event["message_id"]
                    seen = counts.get(message_id, 0) + 1
                    counts[message_id] = seen
                    if seen == projections:  # the message's last driver event
                        arrivals[message_id] = (now, record.timestamp)
    finally:
        await consumer.stop()


async def _paced_send(
    bootstrap: str, topic: str, records: list[tuple[str, bytes, bytes]], rate: float
) -> dict[str, float]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=0
    )
    await producer.start()
    sent: dict[str, float] = {}
    try:
        tick = 0.01
        per_tick = max(1, round(rate * tick))
        start = time.perf_counter()
        wall0 = time.time()
        futures = []
        for i in range(0, len(records), per_tick):
            due = start + (i / rate)
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            for message_id, key, value in records[i : i + per_tick]:
                sent[message_id] = wall0 + (time.perf_counter() - start)
                futures.append(await producer.send(topic, value=value, key=key))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent


async def measure(
    phase: Phase,
    conversations: list[Conversation],
    rate: float,
    duration: float,
    channels: int,
    drain: float,
    projections: int,
    llm_delay: float | None,
) -> dict[str, Any]:
    extra = {
        "CHORUS_SUMMARY_AFTER_MESSAGES": "20",
        "CHORUS_SUMMARY_MEDIUM_THRESHOLD": "15",
    }
    llm = None
    if llm_delay is not None:
        llm = FakeLlm(llm_delay, phase.work / f"{phase.name}-llm.log").start()
        extra["CHORUS_LLM_BASE_URL"] = llm.base_url
    settings = phase.settings(**extra)
    await create_topics(settings)
    worker = Worker(phase.env(**extra), phase.work / f"{phase.name}-worker.log", loglevel="info")
    try:
        worker.start(wait=True)
        count = int(rate * duration)
        records = [
            (orjson.loads(value)["id"], key, value)
            for key, value in encoded_messages(
                conversations, count, channels, seed=11, tag=phase.name
            )
        ]
        arrivals: dict[str, tuple[float, int]] = {}
        counts: dict[str, int] = {}
        stop = asyncio.Event()
        collector = asyncio.create_task(
            _collect(
                phase.broker.bootstrap,
                phase.topic("driver-events"),
                projections,
                arrivals,
                counts,
                stop,
            )
        )
        await asyncio.sleep(1.0)  # the consumer is assigned and polling
        sent = await _paced_send(phase.broker.bootstrap, phase.topic("messages"), records, rate)
        send_seconds = max(sent.values()) - min(sent.values())
        deadline = time.monotonic() + drain
        while len(arrivals) < len(sent) and time.monotonic() < deadline:
            worker.check_alive()
            await asyncio.sleep(0.2)
        stop.set()
        await collector
        llm_stats = llm.stats() if llm else None
    finally:
        worker.stop()
        if llm:
            llm.stop()
    e2e = [(arrivals[m][0] - t) * 1000 for m, t in sent.items() if m in arrivals]
    at_worker = [(arrivals[m][1] / 1000 - t) * 1000 for m, t in sent.items() if m in arrivals]
    missing = len(sent) - len(e2e)
    t0 = min(sent.values()) if sent else 0.0
    steady = [
        (arrivals[m][0] - t) * 1000 if m in arrivals else float("inf")
        for m, t in sent.items()
        if t - t0 >= 1.0
    ]
    series = sorted(
        ((t - t0, (arrivals[m][0] - t) * 1000 if m in arrivals else None) for m, t in sent.items()),
        key=lambda point: point[0],
    )
    stride = max(1, len(series) // 1500)
    # A missing message's latency is at least `drain` past the end: count it as +inf.
    padded = e2e + [float("inf")] * missing
    result: dict[str, Any] = {
        "rate": rate,
        "achieved_send_rate": len(sent) / send_seconds if send_seconds else None,
        "messages": len(sent),
        "driven": len(e2e),
        "missing_after_drain": missing,
        "drain_s": drain,
        "e2e_ms": {f"p{q}": percentile(padded, q) for q in (50, 95, 99)},
        "worker_ms": {
            f"p{q}": percentile(at_worker + [float("inf")] * missing, q) for q in (50, 95, 99)
        },
        "e2e_max_ms": max(padded) if padded else None,
        # Without the first second of sends (the worker's first fetches and producer
        # connections): the steady state.
        "e2e_ms_after_1s": {f"p{q}": percentile(steady, q) for q in (50, 95, 99)},
        "llm_delay_s": llm_delay,
        "llm_requests": (llm_stats or {}).get("request_count") if llm else None,
        "llm_max_in_flight": (llm_stats or {}).get("max_in_flight") if llm else None,
        # (seconds since the first send, e2e ms or None when not driven), downsampled.
        "series": [(round(t, 3), None if v is None else round(v, 1)) for t, v in series[::stride]],
    }
    log(
        f"  latency rate={rate:.0f} llm={llm_delay}: e2e p50={result['e2e_ms']['p50']:.0f} "
        f"p99={result['e2e_ms']['p99']:.0f} ms, driven {len(e2e)}/{len(sent)}"
        + (f", LLM calls {result['llm_requests']}" if llm else "")
    )
    return result
