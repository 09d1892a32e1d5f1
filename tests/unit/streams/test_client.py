"""streams.client: the agent developer's client. Validation and the HTTP views run without
Kafka (the worker answered by an httpx transport); sending, replying and waiting use the
real broker."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest

from projections.model import utc_now
from streams import client as client_module
from streams.client import (
    ActorType,
    ChannelNotFound,
    ChannelRefused,
    Client,
    DriverEvent,
    Message,
    MessageError,
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
from tests.conftest import REPO

CHANNEL = "team/plan"

# --- without Kafka ----------------------------------------------------------------------------


def no_kafka_settings() -> Settings:
    # nothing listens here: any attempt to reach Kafka would fail, not hang
    return Settings(bootstrap_servers="127.0.0.1:1", web_port=1)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"type": "done"}, "in_reply_to is required for DONE"),
        ({"type": "handoff", "in_reply_to": "m1", "correlation_id": "c1"}, "target is required"),
        (
            {"type": "decline", "in_reply_to": "m1", "correlation_id": "c1"},
            "content must be non-empty",
        ),
        ({"type": "status", "target": "bob"}, "target must be instance:<id>"),
        ({"type": "shout"}, "type: must be one of QUERY, COMMAND"),
        ({"type": "status", "actor_type": "robot"}, "actor_type: must be one of HUMAN"),
    ],
)
async def test_an_invalid_message_raises_one_line_naming_the_rule_before_any_send(
    fields: dict[str, Any], reason: str
) -> None:
    async with Client(no_kafka_settings()) as chorus:
        with pytest.raises(MessageError) as raised:
            await chorus.send(CHANNEL, sender="planner", **fields)
    assert reason in str(raised.value)
    assert "\n" not in str(raised.value)


async def test_a_message_over_the_size_limit_is_refused_before_kafka_is_reached() -> None:
    settings = no_kafka_settings().model_copy(update={"max_message_bytes": 1000})
    async with Client(settings) as chorus:
        with pytest.raises(MessageError, match="bytes encoded; the maximum is 1000"):
            await chorus.send(CHANNEL, sender="planner", type="status", content="x" * 2000)


async def test_a_bad_channel_name_is_refused_with_the_rule() -> None:
    async with Client(no_kafka_settings()) as chorus:
        with pytest.raises(MessageError, match="lowercase kebab-case"):
            await chorus.send("Team Plan", sender="planner", type="status")


def worker_answering(routes: dict[str, tuple[int, Any]], seen: list[str]) -> httpx.MockTransport:
    """A worker that answers `path?query` (or `path`) with (status, JSON)."""

    def answer(request: httpx.Request) -> httpx.Response:
        full = request.url.raw_path.decode()
        seen.append(full)
        status, body = routes.get(full) or routes.get(request.url.path) or (404, {"error": "?"})
        headers = {"Retry-After": "0.1"} if status == 503 else {}
        return httpx.Response(status, json=body, headers=headers)

    return httpx.MockTransport(answer)


CONTEXT_ANSWER = {
    "channel": CHANNEL,
    "text": "bob owes planner: notes",
    "tokens": 6,
    "decision": {"decision": "CONTINUE", "detail": None, "offset": 7},
    "parts": {"summary": None, "owed": ["notes"]},
    "for": "bob",
}


async def test_context_asks_for_the_agent_and_keeps_every_part_and_unknown_key() -> None:
    seen: list[str] = []
    path = "/channels/team/plan/context?max_tokens=200&for=bob"
    transport = worker_answering({path: (200, CONTEXT_ANSWER)}, seen)
    async with Client(no_kafka_settings(), transport=transport) as chorus:
        found = await chorus.context(CHANNEL, max_tokens=200, for_agent="bob")
    assert seen == [path]
    assert found.text == "bob owes planner: notes"
    assert found.decision is not None
    assert (found.decision.decision, found.decision.offset) == ("CONTINUE", 7)
    assert found.parts["owed"] == ["notes"]
    assert found.tokens == 6
    assert found.raw["for"] == "bob"


async def test_context_without_a_decision_from_the_worker_has_none() -> None:
    answer = {"text": "", "tokens": 0, "parts": {}}
    transport = worker_answering({"/channels/team/plan/context": (200, answer)}, [])
    async with Client(no_kafka_settings(), transport=transport) as chorus:
        found = await chorus.context(CHANNEL)
    assert found.decision is None
    assert found.text == ""


@pytest.mark.parametrize("view", ["state", "context", "summary", "recap"])
async def test_an_unknown_channel_raises_channel_not_found(view: str) -> None:
    transport = worker_answering({}, [])
    async with Client(no_kafka_settings(), transport=transport) as chorus:
        with pytest.raises(ChannelNotFound, match="no messages folded for channel 'team/plan'"):
            await getattr(chorus, view)(CHANNEL)


async def test_a_request_the_worker_refuses_raises_channel_refused_with_its_reason() -> None:
    reason = "max_tokens must be between 0 and 100000, got -5"
    transport = worker_answering({"/channels/team/plan/context": (400, {"error": reason})}, [])
    async with Client(no_kafka_settings(), transport=transport) as chorus:
        with pytest.raises(ChannelRefused, match=reason):
            await chorus.context(CHANNEL, max_tokens=-5)


def test_every_exception_the_client_exports_is_listed_in_the_agents_guide_and_back() -> None:
    exported = {
        name
        for name in client_module.__all__
        if isinstance(getattr(client_module, name), type)
        and issubclass(getattr(client_module, name), BaseException)
        and name != "ChorusError"
    }
    guide = (REPO / "docs" / "agents.md").read_text()
    errors = guide[guide.index("Every exception the client raises") :]
    table = errors[: errors.index("\n\n", errors.index("| exception |"))]
    listed = set(re.findall(r"^\| `(\w+)`", table, re.MULTILINE)) - {"ValueError"}
    assert exported == listed
    # What the client raises, exported: the views', the waits', the broker's, the send's.
    assert {
        "ChannelNotFound",
        "ChannelRefused",
        "WorkerUnavailable",
        "WorkerUnreachable",
    } <= exported
    assert {"WaitTimeout", "NoBrokerError", "BrokerUnreachable", "MissingTopicError"} <= exported
    assert {"MessageError", "KafkaError"} <= exported


async def test_state_waits_for_a_worker_that_answers_503_then_returns_its_answer() -> None:
    answers = iter([(503, {"error": "not ready"}), (200, {"channel": CHANNEL, "projections": {}})])
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        status, body = next(answers)
        return httpx.Response(status, json=body, headers={"Retry-After": "0.1"})

    async with Client(no_kafka_settings(), transport=httpx.MockTransport(answer)) as chorus:
        found = await chorus.state(CHANNEL)
    assert found == {"channel": CHANNEL, "projections": {}}
    assert len(seen) == 2


async def test_a_worker_that_stays_unready_past_the_patience_raises_worker_unavailable() -> None:
    transport = worker_answering({"/channels/team/plan/state": (503, {"error": "wait"})}, [])
    client = Client(no_kafka_settings(), patience=0.3, transport=transport)
    async with client as chorus:
        with pytest.raises(client_module.WorkerUnavailable, match="still not ready"):
            await chorus.state(CHANNEL)


@pytest.mark.parametrize("view", ["state", "context", "summary", "recap"])
async def test_a_view_that_failed_raises_at_once_with_its_reason_and_no_fallback(
    view: str,
) -> None:
    """A 500 is the view's bug: asking again or reading the compacted topic instead (Kafka
    is unreachable here) would hide it."""
    seen: list[str] = []
    reason = f"the {view} view of channel 'team/plan' failed: KeyError('overview')"
    transport = worker_answering({f"/channels/team/plan/{view}": (500, {"error": reason})}, seen)
    async with Client(no_kafka_settings(), transport=transport) as chorus:
        with pytest.raises(client_module.WorkerUnavailable, match=re.escape(reason)):
            await getattr(chorus, view)(CHANNEL)
    assert len(seen) == 1


def test_the_sync_client_runs_the_same_methods_on_its_own_loop() -> None:
    seen: list[str] = []
    transport = worker_answering(
        {"/channels/team/plan/state": (200, {"channel": CHANNEL, "projections": {}})}, seen
    )
    with SyncClient(no_kafka_settings(), transport=transport) as chorus:
        assert chorus.state(CHANNEL) == {"channel": CHANNEL, "projections": {}}
        with pytest.raises(MessageError, match="in_reply_to is required"):
            chorus.send(CHANNEL, sender="planner", type=MessageType.DONE)
    assert seen == ["/channels/team/plan/state"]


# --- with the real broker ---------------------------------------------------------------------


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


def test_reply_to_a_message_without_a_correlation_id_names_the_rule() -> None:
    status = Message(channel=CHANNEL, sender="ben", type=MessageType.STATUS, content="on it")
    with (
        SyncClient(no_kafka_settings()) as chorus,
        pytest.raises(MessageError, match="correlation_id is required for DONE"),
    ):
        chorus.reply(status, sender="planner", type="done")


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
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    await publish_events(chorus_settings, [driver_event(CHANNEL, 0, "CONTINUE")])
    async with Client(chorus_settings) as chorus:
        waiting = asyncio.ensure_future(chorus.wait(CHANNEL, timeout=30))
        await asyncio.sleep(2)
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


async def test_wait_refuses_a_message_of_another_channel_and_wait_for_a_non_request() -> None:
    elsewhere = Message(channel="team/other", sender="planner", type=MessageType.STATUS)
    status = SentMessage(Message(channel=CHANNEL, sender="a", type=MessageType.STATUS), 0, 3)
    async with Client(no_kafka_settings()) as chorus:
        with pytest.raises(ValueError, match="is in channel 'team/other', not 'team/plan'"):
            await chorus.wait(CHANNEL, after=elsewhere)
        with pytest.raises(ValueError, match="is a STATUS, not a request"):
            await chorus.wait_for(status)


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
    async with Client(chorus_settings) as chorus:  # no worker on CHORUS_WEB_PORT
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
