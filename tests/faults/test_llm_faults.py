"""Fault 5: the LLM misbehaves (local fake endpoint): HTTP 500s, timeouts, malformed JSON,
empty output, very slow replies.

Summaries fall back to the heuristic tier with fallbackFrom/fallbackReason, recaps go to
ERROR and retry with backoff until the model recovers, retries stay bounded (counted at the
fake), and folding and driver events go on unaffected: their produce-to-event latency is
measured with a healthy model and with a 2 s-slow one in the same run.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition

from projections.model import ActorType, Message, MessageType, encode_message
from streams.kafka.clients import consumer, producer
from streams.settings import Settings
from streams.topology import DRIVER_EVENTS, MESSAGES, RECAPS, SUMMARIES
from tests.fakes.llm_server import FakeLlmServer
from tests.faults.conftest import FaultWorker
from tests.faults.support import (
    check_driver_events,
    check_live_states,
    eventually,
    prepare_topics,
    read_all,
    read_messages,
    report,
    scaled,
)

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

BATCH = 16  # above the medium threshold (15): the LLM tier summarises it
TIMEOUT = 3.0
RETRIES = 2
# mode -> a piece of the reason the summary annotation and the recap error must give
FAULTS = {
    "error500": "HTTP 500",
    "timeout": f"timed out after {TIMEOUT:g}s",
    "malformed": "malformed LLM response",
    "empty": "empty completion",
}
RETRIED = {"error500", "timeout"}  # the client retries these; the others fail at once


def talk(channel: str, count: int, start: int = 0) -> list[Message]:
    t0 = datetime(2026, 4, 1, 9, tzinfo=UTC)
    return [
        Message(
            channel=channel,
            sender=["ann", "bob"][i % 2],
            type=MessageType.STATUS,
            actor_type=ActorType.HUMAN,
            content=f"{channel} update {i}",
            created_at=t0 + timedelta(seconds=i),
        )
        for i in range(start, start + count)
    ]


async def send(settings: Settings, messages: list[Message]) -> None:
    kafka = producer(settings)
    await kafka.start()
    try:
        for message in messages:
            await kafka.send(
                settings.topic(MESSAGES),
                key=message.channel.encode(),
                value=encode_message(message),
            )
        await kafka.flush()
    finally:
        await kafka.stop()


async def latest(settings: Settings, topic: str) -> dict[str, list[dict[str, Any]]]:
    """Every record of a channel-keyed topic, per channel, in log order."""
    found: dict[str, list[dict[str, Any]]] = {}
    for _, _, _, value in sorted(await read_all(settings, topic)):
        record = orjson.loads(value or b"{}")
        found.setdefault(record["channel"], []).append(record)
    return found


def requests_for(llm: FakeLlmServer, channel: str, purpose: str) -> int:
    marker = "<transcript>" if purpose == "recap" else "<items>"
    return sum(1 for r in llm.requests if marker in r.user and f"{channel} update" in r.user)


async def driver_event_latencies(
    settings: Settings, channels: list[str], count: int, rate: float
) -> list[float]:
    """Produce `count` messages at `rate`/s and time each one until its first driver event."""
    kafka_in = consumer(settings, enable_auto_commit=False, group_id=None, fetch_max_wait_ms=50)
    await kafka_in.start()
    kafka_out = producer(settings, linger_ms=0)
    await kafka_out.start()
    try:
        topic = settings.topic(DRIVER_EVENTS)
        partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        kafka_in.assign(partitions)
        await kafka_in.seek_to_end(*partitions)
        for tp in partitions:
            await kafka_in.position(tp)
        sent: dict[str, float] = {}
        latencies: dict[str, float] = {}
        messages = [
            m
            for i in range(count)
            for m in talk(channels[i % len(channels)], 1, start=1000 + i + int(time.time()))
        ]

        async def receive() -> None:
            while len(latencies) < count:
                batches = await kafka_in.getmany(timeout_ms=200)
                now = time.monotonic()
                for records in batches.values():
                    for record in records:
                        event = orjson.loads(record.value)
                        if event["message_id"] in sent and event["message_id"] not in latencies:
                            latencies[event["message_id"]] = now - sent[event["message_id"]]

        receiver = asyncio.create_task(receive())
        for message in messages:
            sent[message.id] = time.monotonic()
            await kafka_out.send(
                settings.topic(MESSAGES),
                key=message.channel.encode(),
                value=encode_message(message),
            )
            await asyncio.sleep(1 / rate)
        await asyncio.wait_for(receiver, 120)
        return sorted(latencies.values())
    finally:
        await kafka_out.stop()
        await kafka_in.stop()


def percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))]


@pytest.mark.timeout(900)
async def test_llm_faults_fall_back_retry_boundedly_and_never_slow_folding(
    chorus_settings: Settings,
    fault_workers: Callable[..., FaultWorker],
) -> None:
    settings = chorus_settings
    await prepare_topics(settings)
    async with FakeLlmServer() as llm:
        worker = fault_workers(
            CHORUS_LLM_BASE_URL=llm.base_url,
            CHORUS_LLM_TIMEOUT_SECONDS=str(TIMEOUT),
            CHORUS_LLM_MAX_RETRIES=str(RETRIES),
            CHORUS_SUMMARY_AFTER_MESSAGES=str(BATCH),
            CHORUS_RECAP_DEBOUNCE_SECONDS="1.5",
            CHORUS_RECAP_CHECK_SECONDS="0.2",
        )
        await asyncio.to_thread(worker.start)
        samples = scaled(150, minimum=30)
        load = [f"latency/c{i}" for i in range(8)]

        # 1. Driver-event latency with a healthy model, then with a 2 s-slow one. The same
        #    traffic triggers summaries (every 16 messages per channel) and idle recaps.
        healthy = await driver_event_latencies(settings, load, samples, rate=15)
        llm.set_mode("slow", delay=2.0)
        calls_before = llm.request_count
        slow = await driver_event_latencies(settings, load, samples, rate=15)
        slow_calls = llm.request_count - calls_before
        assert slow_calls > 0, "the slow phase never called the model"
        llm.set_mode("ok", delay=0.0)

        # 2. One channel per fault: a batch big enough for the LLM tier, then silence, so
        #    its summary and its recap both meet the fault.
        fault_started = time.monotonic()
        for mode, reason in FAULTS.items():
            channel = f"llm/{mode}"
            llm.set_mode(mode)
            await send(settings, talk(channel, BATCH))

            async def summarised(channel: str = channel) -> dict[str, Any] | None:
                records = (await latest(settings, SUMMARIES)).get(channel)
                return records[-1] if records else None

            summary = await eventually(summarised, 60, 0.5, f"{channel} summary")
            annotations = summary["annotations"]
            assert annotations["fallbackFrom"] == "synthesised", annotations
            assert reason in annotations["fallbackReason"], annotations
            assert annotations["tier"] == "digest", annotations  # the fallback tier

            async def recap_failed(channel: str = channel, reason: str = reason) -> bool:
                records = (await latest(settings, RECAPS)).get(channel, [])
                return any(r["phase"] == "ERROR" and reason in (r["error"] or "") for r in records)

            await eventually(recap_failed, 60, 0.5, f"{channel} recap in ERROR")
            calls = requests_for(llm, channel, "summary")
            assert calls == (RETRIES + 1 if mode in RETRIED else 1), (mode, calls)
        fault_seconds = time.monotonic() - fault_started

        # 3. The model recovers: every recap completes, and the next summary is synthesised
        #    again with the fallback annotations gone.
        llm.set_mode("ok")
        recovered_at = time.monotonic()

        async def all_completed() -> bool:
            recaps = await latest(settings, RECAPS)
            return all(
                recaps.get(f"llm/{mode}", [{}])[-1].get("phase") == "COMPLETED" for mode in FAULTS
            )

        await eventually(all_completed, 180, 1.0, "every recap completed after recovery")
        recovery_seconds = time.monotonic() - recovered_at
        recaps = await latest(settings, RECAPS)
        attempts = {}
        for mode in FAULTS:
            channel = f"llm/{mode}"
            records = recaps[channel]
            errors = [r for r in records if r["phase"] == "ERROR"]
            assert records[-1]["tier"] == "synthesised"
            attempts[mode] = {
                "recap_errors": len(errors),
                "recap_requests": requests_for(llm, channel, "recap"),
            }
            # exponential backoff from 2 s: at most ~log2 of the fault window in attempts,
            # each at most RETRIES + 1 requests
            assert len(errors) <= 8, (mode, len(errors))
            assert attempts[mode]["recap_requests"] <= (len(errors) + 1) * (RETRIES + 1)

        await send(settings, talk("llm/error500", BATCH, start=BATCH))

        async def synthesised_again() -> bool:
            records = (await latest(settings, SUMMARIES)).get("llm/error500", [])
            last = records[-1] if records else {}
            return last.get("total_messages") == 2 * BATCH and last["annotations"]["tier"] == (
                "synthesised"
            )

        await eventually(synthesised_again, 60, 0.5, "a synthesised summary after recovery")
        last = (await latest(settings, SUMMARIES))["llm/error500"][-1]
        assert "fallbackFrom" not in last["annotations"], last["annotations"]

        # 4. Folding and driver events were unaffected throughout.
        log = await read_messages(settings)
        await check_live_states([worker.base_url], log, timeout=120)
        await check_driver_events(settings, log, timeout=60)
        assert worker.alive()
        requests_total = llm.request_count

    p = {
        "healthy_p50_ms": round(statistics.median(healthy) * 1000),
        "healthy_p99_ms": round(percentile(healthy, 0.99) * 1000),
        "slow_llm_p50_ms": round(statistics.median(slow) * 1000),
        "slow_llm_p99_ms": round(percentile(slow, 0.99) * 1000),
    }
    # Folding never waits for the model: a 2 s-slow LLM must not add its delay.
    assert p["slow_llm_p50_ms"] < p["healthy_p50_ms"] + 1000, p
    report(
        "LLM faults",
        faults=[*FAULTS, "slow (2 s)"],
        latency_samples_each=samples,
        llm_calls_during_slow_phase=slow_calls,
        **p,
        fault_window_s=round(fault_seconds, 1),
        recap_recovery_s=round(recovery_seconds, 1),
        per_fault=attempts,
        llm_requests_total=requests_total,
        lost=0,
    )
