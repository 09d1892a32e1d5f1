"""Latency: produce → driver event, and → the first summary covering it, at a fixed rate,
with and without a slow (2 s) LLM.

A running, ready worker; a paced producer (acks=all) sends `rate` messages a second for
`duration` seconds over `channels` channels, noting each message's send time; a consumer on
driver-events notes when each message's last driver event arrives. Two figures per message:
  e2e     = arrival at the bench's consumer − send (what a driver sees);
  worker  = the driver event's CreateTime (stamped by the worker's producer) − send.
Messages whose events have not arrived `drain` seconds after the last send are counted as
missing (a backlog: the worker is slower than the rate) and the percentiles say so.

The summary lag (bench/pipeline.py): a consumer on the summaries topic notes each record's
channel and `last_offset`; a message's lag is the time from its send to the first summary
record of its channel whose `last_offset` is at or past the message's offset. The worker
runs with CHORUS_SUMMARY_AFTER_SECONDS=2 so every channel's tail is summarised.
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
from bench.fold import pipeline_env
from bench.meta import REPO
from bench.pipeline import (
    SUMMARY_AFTER_SECONDS,
    Coverage,
    Sent,
    Summary,
    channel_ends,
    collect_summaries,
    first_covering,
    lags_ms,
    percentiles,
)
from streams.conversations import Conversation
from streams.ops.broker import free_port
from streams.ops.topics import create_topics

# The LLM run's tier thresholds: a batch of more than one message is summarised by the LLM.
LLM_EVERY_BATCH = {"CHORUS_SUMMARY_SMALL_THRESHOLD": "1", "CHORUS_SUMMARY_MEDIUM_THRESHOLD": "1"}


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
    bootstrap: str,
    topic: str,
    records: list[tuple[str, bytes, bytes]],
    rate: float,
    landed: dict[str, Sent] | None = None,
) -> dict[str, float]:
    """Send at `rate`; message id -> send time. `landed` gets each message's channel, offset
    and send time (for the summary lag)."""
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
        ids: list[tuple[str, str]] = []
        for i in range(0, len(records), per_tick):
            due = start + (i / rate)
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            for message_id, key, value in records[i : i + per_tick]:
                sent[message_id] = wall0 + (time.perf_counter() - start)
                futures.append(await producer.send(topic, value=value, key=key))
                ids.append((message_id, key.decode()))
        metadata = await asyncio.gather(*futures)
        if landed is not None:
            for (message_id, channel), meta in zip(ids, metadata, strict=True):
                landed[message_id] = Sent(channel, meta.offset, sent[message_id])
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
        # Summaries at least every 2 s per channel with messages (default 300 s): the
        # summary lag is measured for every message, the tail's included.
        **pipeline_env(),
    }
    llm = None
    if llm_delay is not None:
        llm = FakeLlm(llm_delay, phase.work / f"{phase.name}-llm.log").start()
        extra["CHORUS_LLM_BASE_URL"] = llm.base_url
        # Batches are cut every 2 s (pipeline_env), mostly below the medium threshold (15):
        # with it every batch of two or more messages still goes to the slow LLM.
        extra.update(LLM_EVERY_BATCH)
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
        summaries: list[Summary] = []
        summary_collector = asyncio.create_task(
            collect_summaries(phase.broker.bootstrap, phase.topic("summaries"), summaries, stop)
        )
        await asyncio.sleep(1.0)  # the consumers are assigned and polling
        landed: dict[str, Sent] = {}
        sent = await _paced_send(
            phase.broker.bootstrap, phase.topic("messages"), records, rate, landed
        )
        send_seconds = max(sent.values()) - min(sent.values())
        coverage = Coverage(channel_ends((s.channel, s.offset) for s in landed.values()))
        fed = 0
        deadline = time.monotonic() + drain
        while (len(arrivals) < len(sent) or not coverage.done) and time.monotonic() < deadline:
            for summary in summaries[fed:]:
                coverage.add(summary)
            fed = len(summaries)
            worker.check_alive()
            await asyncio.sleep(0.2)
        stop.set()
        await collector
        await summary_collector
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
    covered_at = first_covering(landed, summaries, by="arrived")
    created_at = first_covering(landed, summaries, by="created")
    lag = lags_ms(landed, covered_at)
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
        # Send → the first summary record that covers the message, read by the bench
        # (summary_lag_ms) or by its CreateTime (summary_lag_worker_ms); +inf (a backlog)
        # for a message no summary covered `drain` s after the last send.
        "summary_lag_ms": percentiles(lag),
        "summary_lag_worker_ms": percentiles(lags_ms(landed, created_at)),
        "summary_not_covered_after_drain": len(landed) - len(covered_at),
        "summary_records": len(summaries),
        "summary_after_seconds": SUMMARY_AFTER_SECONDS,
        "llm_delay_s": llm_delay,
        "summary_thresholds": {
            k.removeprefix("CHORUS_").lower(): v for k, v in extra.items() if "SUMMARY" in k
        },
        "llm_requests": (llm_stats or {}).get("request_count") if llm else None,
        "llm_max_in_flight": (llm_stats or {}).get("max_in_flight") if llm else None,
        # (seconds since the first send, e2e ms or None when not driven), downsampled.
        "series": [(round(t, 3), None if v is None else round(v, 1)) for t, v in series[::stride]],
    }
    log(
        f"  latency rate={rate:.0f} llm={llm_delay}: e2e p50={result['e2e_ms']['p50']:.0f} "
        f"p99={result['e2e_ms']['p99']:.0f} ms, driven {len(e2e)}/{len(sent)}"
        + f"; summary lag p50={result['summary_lag_ms']['p50']:.0f} "
        f"p99={result['summary_lag_ms']['p99']:.0f} ms, "
        f"{len(covered_at)}/{len(landed)} covered"
        + (f", LLM calls {result['llm_requests']}" if llm else "")
    )
    return result
