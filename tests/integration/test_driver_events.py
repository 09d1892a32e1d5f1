"""The Python client of driver events (`streams.client.driver_events`) on v3 events."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from projections.commitments import CommitmentState
from projections.model import Message, MessageType
from streams.client import Client
from streams.interfaces.control import configure_channel
from streams.interfaces.driver_events import decided, driver_events
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.records import DRIVER_EVENT_VERSION, DriverEvent
from streams.settings import Settings
from tests.conftest import WorkerProcess, config_folded

pytestmark = pytest.mark.kafka


@pytest.mark.timeout(240)
async def test_the_client_yields_each_v3_event_once_until_a_decision(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    channel = "client/decides"
    await configure_channel(chorus_settings, channel, termination=["max-messages:3"])
    start_worker()
    await config_folded(chorus_settings, channel)  # the messages fold under it
    request = Message(
        channel=channel,
        sender="planner",
        type=MessageType.COMMAND,
        content="write the notes",
        correlation_id="notes",
    )
    messages = [
        request,
        Message(
            channel=channel,
            sender="writer",
            type=MessageType.STATUS,
            content="on it",
            correlation_id="notes",
        ),
        Message(
            channel=channel,
            sender="writer",
            type=MessageType.DONE,
            content="done",
            correlation_id="notes",
            in_reply_to=request.id,
        ),
    ]
    await send_messages(chorus_settings, messages)

    async def collect() -> list[DriverEvent]:
        return [
            event
            async for event in driver_events(
                chorus_settings, channel=channel, until=decided, from_beginning=True
            )
        ]

    events = await asyncio.wait_for(collect(), 120)
    assert [e.message_id for e in events] == [m.id for m in messages]
    assert {e.event_version for e in events} == {DRIVER_EVENT_VERSION}
    assert [e.decision and e.decision.decision for e in events] == [
        "CONTINUE",
        "CONTINUE",
        "COMPLETE",
    ]
    opened, acknowledged, fulfilled = (
        e.projections["commitments"].changes["commitments"] for e in events
    )
    assert [(c["id"], c["state"]) for c in opened + acknowledged + fulfilled] == [
        (request.id, "OPEN"),
        (request.id, "ACKNOWLEDGED"),
        (request.id, "FULFILLED"),
    ]
    assert events[-1].projections["commitments"].live["active"] == []
    assert events[-1].projections["overview"].live["message_count"] == 3


@pytest.mark.timeout(240)
async def test_a_wait_after_a_request_sent_right_after_a_decision_waits_for_its_outcome(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    channel = "client/asks-again"
    start_worker()
    async with Client(chorus_settings) as chorus:
        await chorus.configure(channel, termination=["all-commitments-resolved"])
        first = await chorus.send(
            channel, sender="planner", type="command", content="tag the release", target="role:a"
        )
        await chorus.reply(first, sender="a", type="done", content="tagged v2.0")
        decision = await chorus.wait(channel, after=first, timeout=120)
        assert decision.decision is not None and decision.decision.decision == "COMPLETE"

        # Sent right after the decision: the channel's latest event is still that decision.
        second = await chorus.send(
            channel, sender="planner", type="query", content="which notes?", target="role:b"
        )
        waiting = asyncio.ensure_future(chorus.wait(channel, after=second, timeout=60))
        outcome = asyncio.ensure_future(chorus.wait_for(second, timeout=60))
        answer = await chorus.reply(second, sender="b", type="response", content="the API notes")
        found = await waiting
        ended = await outcome

        third = await chorus.send(
            channel, sender="planner", type="command", content="port the lexer", target="role:b"
        )
        await chorus.reply(third, sender="b", type="handoff", content="yours", target="role:a")
        await chorus.reply(third, sender="a", type="decline", content="no Rust here")
        declined = await chorus.wait_for(third, timeout=60)

    assert second.offset > decision.offset
    assert (found.offset, found.message_id) == (answer.offset, answer.id)
    assert found.decision is not None and found.decision.decision == "COMPLETE"
    assert ended.state is CommitmentState.FULFILLED and ended.event.offset == answer.offset
    assert ended.commitment["excerpt"] == "which notes?"
    # The answer itself, read from the log: its content whole.
    assert ended.message is not None
    assert (ended.message.id, ended.message.content) == (answer.id, "the API notes")
    # A hand-off is followed to the commitment it opened, which a decline ended.
    assert declined.state is CommitmentState.DECLINED
    assert (declined.commitment["obligor"], declined.commitment["parent"]) == ("role:a", third.id)
    assert declined.message is not None and declined.message.content == "no Rust here"
