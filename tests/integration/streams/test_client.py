"""streams.client against the real broker: sending, replying, waiting for driver events, and
the views read from the compacted topics when no worker answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from projections.model import utc_now
from streams.client import (
    ActorType,
    Client,
    DriverEvent,
    Message,
    MessageType,
    SentMessage,
    SyncClient,
    WaitTimeout,
    decided,
)
from streams.interfaces import driver_events as driver_events_module
from streams.kafka.clients import producer
from streams.kafka.consume import read_topic
from streams.ops.topics import create_topics
from streams.records import key_partition
from streams.settings import Settings
from streams.topology import DRIVER_EVENTS, MESSAGES

CHANNEL = "team/plan"


async def messages_on_the_log(settings: Settings) -> list[dict[str, Any]]:
    return [r.value async for r in read_topic(settings, settings.topic(MESSAGES))]


@pytest.mark.kafka
async def test_send_returns_the_acknowledged_message_with_a_generated_correlation_id(
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    async with Client(chorus_settings) as chorus:
        ask = await chorus.send(
            CHANNEL,
            sender="planner",
            type="command",
            content="write the notes",
            target="role:writer",
            deadline=timedelta(minutes=5),
            payload={"priority": 1},
            actor_type="human",
        )
        answer = await chorus.reply(ask, sender="bob", type=MessageType.DONE, content="done")
    assert isinstance(ask, SentMessage)
    assert ask.correlation_id
    assert ask.partition == key_partition(CHANNEL.encode(), chorus_settings.partitions)
    assert answer.offset == ask.offset + 1
    assert (answer.message.in_reply_to, answer.correlation_id) == (ask.id, ask.correlation_id)
    logged = await messages_on_the_log(chorus_settings)
    assert [m["id"] for m in logged] == [ask.id, answer.id]
    first = logged[0]
    assert (first["type"], first["actor_type"], first["payload"]) == (
        "COMMAND",
        ActorType.HUMAN.value,
        {"priority": 1},
    )
    assert first["deadline"] > utc_now().isoformat()


@pytest.mark.kafka
async def test_reply_to_a_received_message_answers_it_in_its_channel(
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    async with Client(chorus_settings) as chorus:
        await chorus.send(CHANNEL, sender="planner", type="query", content="who reviews?")
        (received,) = [
            Message.model_validate(m) for m in await messages_on_the_log(chorus_settings)
        ]
        answer = await chorus.reply(received, sender="rey", type="response", content="me")
    assert (answer.channel, answer.message.in_reply_to) == (CHANNEL, received.id)
    assert answer.correlation_id == received.correlation_id


def driver_event(channel: str, offset: int, decision: str) -> DriverEvent:
    return DriverEvent(
        source=f"channel:{channel}",
        channel=channel,
        message_id=f"m{offset}",
        partition=0,
        offset=offset,
        projections={},
        decision={"decision": decision, "detail": None},
    )


async def publish_events(settings: Settings, events: list[DriverEvent]) -> None:
    kafka = producer(settings)
    await kafka.start()
    try:
        for event in events:
            await kafka.send_and_wait(
                settings.topic(DRIVER_EVENTS),
                key=event.channel.encode(),
                value=event.to_bytes(),
                partition=key_partition(event.channel.encode(), settings.partitions),
            )
    finally:
        await kafka.stop()


def neighbour_of(channel: str, partitions: int) -> str:
    """Another channel on the same partition as `channel`."""
    home = key_partition(channel.encode(), partitions)
    return next(
        name
        for name in (f"other/c{i}" for i in range(1000))
        if key_partition(name.encode(), partitions) == home
    )


@pytest.mark.kafka
async def test_wait_returns_at_once_when_the_latest_event_far_back_already_decided(
    chorus_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # small look-back windows: the decision sits behind several windows of another channel
    monkeypatch.setattr(driver_events_module, "LOOK_BACK_RECORDS", 2)
    await create_topics(chorus_settings)
    other = neighbour_of(CHANNEL, chorus_settings.partitions)
    await publish_events(
        chorus_settings,
        [driver_event(CHANNEL, 0, "CONTINUE"), driver_event(CHANNEL, 1, "COMPLETE")]
        + [driver_event(other, i, "CONTINUE") for i in range(20)],
    )
    async with Client(chorus_settings) as chorus:
        found = await chorus.wait(CHANNEL, timeout=20)
    assert (found.offset, found.decision and found.decision.decision) == (1, "COMPLETE")


@pytest.mark.kafka
async def test_wait_follows_from_where_it_looked_so_a_later_decision_is_not_missed(
    chorus_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The later events are published once the wait has looked back and found no decision.
    looked = asyncio.Event()
    look_back = driver_events_module._look_back

    async def looking_back(*args: Any) -> list[DriverEvent]:
        found = await look_back(*args)
        looked.set()
        return found

    monkeypatch.setattr(driver_events_module, "_look_back", looking_back)
    await create_topics(chorus_settings)
    await publish_events(chorus_settings, [driver_event(CHANNEL, 0, "CONTINUE")])
    async with Client(chorus_settings) as chorus:
        waiting = asyncio.ensure_future(chorus.wait(CHANNEL, timeout=30))
        await asyncio.wait_for(looked.wait(), 20)
        assert not waiting.done()
        later = [
            driver_event(CHANNEL, 1, "CONTINUE"),
            driver_event(CHANNEL, 1, "CONTINUE"),  # a redelivery
            driver_event(CHANNEL, 2, "ESCALATE"),
        ]
        await publish_events(chorus_settings, later)
        found = await waiting
    assert (found.offset, found.decision and found.decision.decision) == (2, "ESCALATE")


@pytest.mark.kafka
async def test_wait_after_a_message_never_returns_an_event_before_it(
    chorus_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A decision (offset 1), then a request (offset 2) and its outcome: a wait after the
    # request returns the first decision at or after it, from the look-back too, over
    # several small look-back windows of another channel's events.
    monkeypatch.setattr(driver_events_module, "LOOK_BACK_RECORDS", 2)
    await create_topics(chorus_settings)
    other = neighbour_of(CHANNEL, chorus_settings.partitions)
    decisions = ["CONTINUE", "COMPLETE", "CONTINUE", "FAILED", "CONTINUE"]
    await publish_events(
        chorus_settings,
        [driver_event(CHANNEL, offset, said) for offset, said in enumerate(decisions)]
        + [driver_event(other, i, "CONTINUE") for i in range(9)],
    )
    request = Message(
        id="m2",
        channel=CHANNEL,
        sender="planner",
        type=MessageType.COMMAND,
        content="go",
        correlation_id="go",
    )
    async with Client(chorus_settings) as chorus:
        by_sent = await chorus.wait(CHANNEL, after=SentMessage(request, 0, 2), timeout=20)
        by_received = await chorus.wait(CHANNEL, after=request, timeout=20)
        by_offset = await chorus.wait(CHANNEL, after=3, timeout=20)
        later = asyncio.ensure_future(chorus.wait(CHANNEL, after=5, timeout=30))
        await publish_events(
            chorus_settings,
            [driver_event(CHANNEL, 5, "CONTINUE"), driver_event(CHANNEL, 6, "ESCALATE")],
        )
        after_all = await later
    assert [by_sent.offset, by_received.offset, by_offset.offset, after_all.offset] == [3, 3, 3, 6]


@pytest.mark.kafka
async def test_wait_after_a_received_message_not_folded_yet_starts_at_its_event(
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    await publish_events(chorus_settings, [driver_event(CHANNEL, 0, "COMPLETE")])
    received = Message(id="m1", channel=CHANNEL, sender="planner", type=MessageType.STATUS)
    async with Client(chorus_settings) as chorus:
        waiting = asyncio.ensure_future(chorus.wait(CHANNEL, after=received, timeout=30))
        await publish_events(
            chorus_settings,
            [driver_event(CHANNEL, 1, "CONTINUE"), driver_event(CHANNEL, 2, "FAILED")],
        )
        found = await waiting
    assert (found.offset, found.message_id) == (2, "m2")


@pytest.mark.kafka
async def test_wait_raises_a_timeout_naming_the_channel(chorus_settings: Settings) -> None:
    await create_topics(chorus_settings)
    async with Client(chorus_settings) as chorus:
        with pytest.raises(WaitTimeout, match=r"channel 'team/plan'.*within 1 s"):
            await chorus.wait(CHANNEL, timeout=1)


@pytest.mark.kafka
async def test_events_yields_each_event_once_until_the_condition(
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    published = [
        driver_event(CHANNEL, 0, "CONTINUE"),
        driver_event(CHANNEL, 0, "CONTINUE"),
        driver_event(CHANNEL, 1, "FAILED"),
        driver_event(CHANNEL, 2, "CONTINUE"),
    ]
    await publish_events(chorus_settings, published)
    until: Callable[[DriverEvent], bool] = decided
    async with Client(chorus_settings) as chorus:
        offsets = [
            event.offset async for event in chorus.events(CHANNEL, until=until, from_beginning=True)
        ]
    assert offsets == [0, 1]


@pytest.mark.kafka
def test_the_sync_client_sends_and_iterates_events(chorus_settings: Settings) -> None:
    asyncio.run(create_topics(chorus_settings))
    asyncio.run(publish_events(chorus_settings, [driver_event(CHANNEL, 0, "COMPLETE")]))
    with SyncClient(chorus_settings) as chorus:
        sent = chorus.send(CHANNEL, sender="planner", type="query", content="ready?")
        events = list(chorus.events(CHANNEL, until=decided, from_beginning=True))
        assert chorus.wait(CHANNEL, timeout=20).offset == 0
    assert sent.correlation_id
    assert [event.offset for event in events] == [0]


@pytest.mark.kafka
async def test_summary_and_recap_come_from_the_compacted_topics_when_no_worker_answers(
    chorus_settings: Settings,
) -> None:
    from streams.interfaces.control import set_summary

    await create_topics(chorus_settings)
    await set_summary(chorus_settings, CHANNEL, "the plan so far", "user:test")
    # No worker on CHORUS_WEB_PORT; patience 0: no waiting for one that may be starting.
    async with Client(chorus_settings, patience=0) as chorus:
        summary = await chorus.summary(CHANNEL)
        recap = await chorus.recap(CHANNEL)
    assert (summary["channel"], summary["content"]) == (CHANNEL, "the plan so far")
    assert recap == {"channel": CHANNEL, "phase": "IDLE", "text": None, "recap": None}


@pytest.mark.kafka
async def test_configure_keeps_what_is_not_given_and_refuses_unknown_conditions(
    chorus_settings: Settings,
) -> None:
    from streams.interfaces.control import latest_value
    from streams.topology import CHANNEL_CONFIG

    await create_topics(chorus_settings)
    async with Client(chorus_settings) as chorus:
        await chorus.configure(CHANNEL, summary_after_messages=5)
        config = await chorus.configure(CHANNEL, termination=["all-commitments-resolved"])
        with pytest.raises(ValueError, match="no-such-condition"):
            await chorus.configure(CHANNEL, termination=["no-such-condition"])
    assert (config.termination, config.summary_after_messages) == (
        ["all-commitments-resolved"],
        5,
    )
    latest = await latest_value(chorus_settings, CHANNEL_CONFIG, CHANNEL)
    assert latest["termination"] == ["all-commitments-resolved"]
