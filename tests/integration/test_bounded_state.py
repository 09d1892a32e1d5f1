"""Bounded state on a real broker: a long channel folds completely, nothing stops a partition."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from projections.model import Message, MessageType
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_until

pytestmark = pytest.mark.kafka

T0 = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)


def answered_requests(channel: str, pairs: int) -> list[Message]:
    messages = []
    for n in range(pairs):
        at = T0 + timedelta(seconds=2 * n)
        messages.append(
            Message(
                id=f"{channel}-q{n}",
                channel=channel,
                sender="planner",
                type=MessageType.QUERY,
                correlation_id=f"c{n}",
                content=f"What is the status of task {n}?",
                created_at=at,
            )
        )
        messages.append(
            Message(
                id=f"{channel}-r{n}",
                channel=channel,
                sender=f"worker-{n % 7}",
                type=MessageType.RESPONSE,
                correlation_id=f"c{n}",
                in_reply_to=f"{channel}-q{n}",
                content=f"Task {n} is done.",
                created_at=at + timedelta(seconds=1),
            )
        )
    return messages


def wait_for_count(
    worker: WorkerProcess, channel: str, count: int, timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        assert worker.process is not None and worker.process.poll() is None, worker.log_tail()
        response = worker.get(f"/channels/{channel}/state")
        if response.status_code == 200:
            state = response.json()["projections"]
            if state["overview"]["state"]["message_count"] >= count:
                return state
        time.sleep(1)
    raise AssertionError(f"{channel} folded {state and state['overview']} of {count} in time")


@pytest.mark.timeout(900)
async def test_a_channel_of_twenty_thousand_messages_folds_with_bounded_state(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker()
    # Routed views answered "not ready" with 503 and Retry-After until they could route.
    assert worker.not_ready_answers, "the readiness probe never saw the worker not ready"
    assert all(status == 503 and retry for status, retry in worker.not_ready_answers)
    channel = "ops/long-running"
    await send_messages(chorus_settings, answered_requests(channel, 10_000))
    state = wait_for_count(worker, channel, 20_000, 600)
    commitments = state["commitments"]["state"]
    assert commitments["opened"] == 10_000 and commitments["ended"] == {"FULFILLED": 10_000}
    assert len(commitments["commitments"]) == 100 and commitments["evicted"] == 9_900
    assert state["overview"]["state"]["open_commitments"] == 0
    for projection in state.values():
        assert len(orjson.dumps(projection["state"])) < chorus_settings.max_state_bytes
    assert worker.process is not None and worker.process.poll() is None  # still up
    assert "MessageSizeTooLarge" not in worker.log_tail(2_000)
    metrics = worker.get("/metrics").text
    assert 'chorus_state_bound_hits_total{bound="evicted",projection="commitments"} 9900.0' in (
        metrics
    )


@pytest.mark.timeout(300)
async def test_a_state_over_the_limit_is_refused_and_the_channel_folds_on(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker(
        CHORUS_PROJECTIONS='["tests.sample_projections:HoarderProjection"]',
        CHORUS_MAX_STATE_BYTES="4096",
    )
    channel = "team/hoarding"
    messages = [
        Message(channel=channel, sender="ann", type=MessageType.STATUS, content="z" * 400)
        for _ in range(30)
    ]
    await send_messages(chorus_settings, messages)
    state = wait_for_count(worker, channel, 30, 120)
    hoarded = state["hoarder"]["state"]
    assert 0 < len(orjson.dumps(hoarded)) <= 4096 and len(hoarded) < 30
    events = await read_until(chorus_settings, "driver-events", lambda rs: len(rs) >= 30, 60)
    refused = [e.value for e in events if e.value["source"] == f"projection-error:{channel}"]
    assert len(refused) == 30 - len(hoarded)
    assert "over the 4096-byte limit" in refused[0]["errors"]["hoarder"]
    assert refused[-1]["projections"]["overview"]["live"]["message_count"] == 30
    letters = await read_until(
        chorus_settings, "dead-letters", lambda rs: len(rs) >= len(refused), 60
    )
    assert all(letter.value["stage"] == "project" for letter in letters)
    assert "hoarder: state would be" in letters[0].value["reason"]
    metrics = worker.get("/metrics").text
    metric = 'chorus_state_bound_hits_total{bound="state-bytes",projection="hoarder"}'
    assert f"{metric} {len(refused)}.0" in metrics


async def set_topic_config(settings: Settings, topic: str, configs: dict[str, str]) -> None:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from streams.kafka.clients import admin

    client = admin(settings)
    await client.start()
    try:
        await client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)])
    finally:
        await client.close()


def status(channel: str, sender: str, content: str) -> Message:
    return Message(
        channel=channel, sender=sender, type=MessageType.STATUS, content=content, topic=sender
    )


@pytest.mark.timeout(300)
async def test_a_driver_event_the_broker_refuses_does_not_stop_the_messages_after_it(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    """An operator set the driver-events topic's max.message.bytes below what a crowded
    channel's event needs: that event is dead-lettered with its position and counted, the
    worker stays up, and the messages after it fold and wake their drivers."""
    await create_topics(chorus_settings)
    worker = start_worker()
    events = chorus_settings.topic("driver-events")
    await send_messages(chorus_settings, [status("refuse/small-0", "ann", "first")])
    first = await read_until(chorus_settings, "driver-events", lambda rs: len(rs) >= 1, 60)
    small = len(orjson.dumps(first[0].value))
    # Room for a small channel's event, not for one that counts what 40 obligors owe.
    await set_topic_config(chorus_settings, events, {"max.message.bytes": str(small + 1500)})

    crowd = [
        Message(
            channel="refuse/crowd",
            sender=f"sender-{i:02d}-of-the-crowd",
            type=MessageType.COMMAND,
            content=f"request {i}",
            correlation_id=f"request-{i}",
            target=f"role:obligor-{i:02d}-with-a-name-long-enough-to-count",
        )
        for i in range(40)
    ]
    await send_messages(chorus_settings, crowd)
    await send_messages(chorus_settings, [status("refuse/small-1", "bob", "after the crowd")])

    letters = await read_until(
        chorus_settings, "dead-letters", lambda rs: any(r.key == "refuse/crowd" for r in rs), 90
    )
    letter = next(r.value for r in letters if r.key == "refuse/crowd")
    assert letter["stage"] == "driver-event" and "MessageSizeTooLargeError" in letter["reason"]
    assert letter["source_topic"] == chorus_settings.topic("messages") and letter["offset"] >= 0
    woken = await read_until(
        chorus_settings, "driver-events", lambda rs: any(r.key == "refuse/small-1" for r in rs), 90
    )
    crowd_woken = [r for r in woken if r.key == "refuse/crowd"]
    assert 0 < len(crowd_woken) < len(crowd)  # the early, small ones; the rest refused
    assert worker.process is not None and worker.process.poll() is None
    state = wait_for_count(worker, "refuse/crowd", len(crowd), 60)
    assert state["overview"]["state"]["message_count"] == len(crowd)  # every one folded
    metrics = worker.get("/metrics").text
    refused = [
        line
        for line in metrics.splitlines()
        if line.startswith("chorus_refused_records_total") and "driver-events" in line
    ]
    assert refused and float(refused[0].split()[-1]) == len(crowd) - len(crowd_woken)
