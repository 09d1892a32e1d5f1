"""streams.client: the agent developer's client without Kafka: validation, and the HTTP views
(the worker answered by an httpx transport). Sending, replying and waiting on the real broker
are in tests/integration."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from streams import client as client_module
from streams.client import (
    ChannelNotFound,
    ChannelRefused,
    Client,
    Message,
    MessageError,
    MessageType,
    SentMessage,
    SyncClient,
)
from streams.settings import Settings
from tests.conftest import REPO

CHANNEL = "team/plan"


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


def test_reply_to_a_message_without_a_correlation_id_names_the_rule() -> None:
    status = Message(channel=CHANNEL, sender="ben", type=MessageType.STATUS, content="on it")
    with (
        SyncClient(no_kafka_settings()) as chorus,
        pytest.raises(MessageError, match="correlation_id is required for DONE"),
    ):
        chorus.reply(status, sender="planner", type="done")


async def test_wait_refuses_a_message_of_another_channel_and_wait_for_a_non_request() -> None:
    elsewhere = Message(channel="team/other", sender="planner", type=MessageType.STATUS)
    status = SentMessage(Message(channel=CHANNEL, sender="a", type=MessageType.STATUS), 0, 3)
    async with Client(no_kafka_settings()) as chorus:
        with pytest.raises(ValueError, match="is in channel 'team/other', not 'team/plan'"):
            await chorus.wait(CHANNEL, after=elsewhere)
        with pytest.raises(ValueError, match="is a STATUS, not a request"):
            await chorus.wait_for(status)


async def test_a_worker_that_does_not_listen_yet_is_waited_for_like_one_that_answers_503() -> None:
    """A script that starts `chorus worker` and asks at once: the connection is refused
    until the web server listens."""
    refusals = iter([True, True, False])
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if next(refusals):
            raise httpx.ConnectError("Connection refused", request=request)
        return httpx.Response(200, json={"channel": CHANNEL, "projections": {}})

    async with Client(no_kafka_settings(), transport=httpx.MockTransport(answer)) as chorus:
        assert await chorus.state(CHANNEL) == {"channel": CHANNEL, "projections": {}}
    assert len(seen) == 3


async def test_a_worker_that_never_listens_is_unreachable_once_the_patience_is_spent() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    transport = httpx.MockTransport(refuse)
    async with Client(no_kafka_settings(), patience=1.2, transport=transport) as chorus:
        with pytest.raises(client_module.WorkerUnreachable) as raised:
            await chorus.state(CHANNEL)
    assert str(raised.value) == (
        "cannot reach the worker at http://127.0.0.1:1 for 1.2 s (ConnectError); "
        "is `chorus worker` running?"
    )


async def test_messages_asks_the_log_view_with_the_cursor_and_the_agent() -> None:
    seen: list[str] = []
    page = {"channel": CHANNEL, "messages": [], "next": 41, "more": False}
    path = "/channels/team/plan/messages?limit=5&after=40&for=worker-a"
    transport = worker_answering({path: (200, page)}, seen)
    async with Client(no_kafka_settings(), transport=transport) as chorus:
        found = await chorus.messages(CHANNEL, after=40, for_agent="worker-a", limit=5)
    assert found == page and seen == [path]


async def test_a_wait_that_saw_no_driver_event_names_the_likely_cause() -> None:
    async with Client(no_kafka_settings()) as chorus:
        with pytest.raises(client_module.WaitTimeout) as raised:
            await chorus._waited(asyncio.sleep(5), CHANNEL, 0.01, lambda: 0, "it did not end")
        assert str(raised.value) == (
            "channel 'team/plan': no driver event came within 0.01 s: is a worker folding "
            "chorus.messages? (check CHORUS_BOOTSTRAP_SERVERS and CHORUS_TOPIC_PREFIX="
            "'chorus.', as the worker has them)"
        )
        with pytest.raises(client_module.WaitTimeout) as raised:
            await chorus._waited(asyncio.sleep(5), CHANNEL, 0.01, lambda: 3, "it did not end")
        assert str(raised.value) == "channel 'team/plan': it did not end within 0.01 s"
