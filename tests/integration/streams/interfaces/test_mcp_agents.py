"""streams.interfaces.mcp in this process, through the official MCP client against the real
broker: progress while a wait waits, a timeout as an answer, the writers rule, the cluster's
channels, and resource change notifications fed by the driver events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp.server.subscriptions import ResourceUpdated

from projections.model import Message, MessageType
from streams.interfaces import mcp as mcp_module
from streams.interfaces.mcp import build_server
from streams.interfaces.mcp_agents import AgentServices
from streams.ops.topics import create_topics
from streams.records import DecisionRecord, DriverEvent, key_partition
from streams.settings import Settings
from tests.conftest import WorkerProcess
from tests.integration.streams.test_client import publish_events

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

CHANNEL = "team/inproc"


@asynccontextmanager
async def agent(settings: Settings, name: str | None) -> AsyncIterator[McpClient]:
    """An agent's session with a server of its own, in this process."""
    services = AgentServices(settings)
    try:
        async with McpClient(build_server(settings, agent=name, services=services)) as client:
            yield client
    finally:
        await services.stop()


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    found: dict[str, Any] = result.structured_content
    return found


async def test_a_wait_reports_progress_and_answers_a_timeout_as_still_open(
    chorus_settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mcp_module, "PROGRESS_SECONDS", 0.3)
    await create_topics(chorus_settings)
    start_worker()
    progress: list[tuple[float, float | None, str | None]] = []

    async def noted(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with agent(chorus_settings, "planner") as planner:
        ask = structured(
            await planner.call_tool(
                "send_message",
                {"channel": CHANNEL, "type": "query", "content": "which notes?"},
            )
        )
        result = await planner.call_tool(
            "wait_for_reply",
            {"channel": CHANNEL, "request_id": ask["id"], "timeout_seconds": 2},
            progress_callback=noted,
        )
        answer = structured(result)
        unknown = await planner.call_tool(
            "wait_for_reply", {"channel": CHANNEL, "request_id": "no-such-id"}
        )
    assert answer["still_open"] is True and answer["ended_by"] is None
    assert answer["state"] in ("OPEN", None)  # None only when the fold had not folded it yet
    assert len(progress) >= 3 and all(total == 2 for _, total, _ in progress)
    assert "still open after 2 s" in result.content[0].text  # type: ignore[union-attr]
    assert unknown.is_error
    assert unknown.content[0].text.startswith("no request 'no-such-id' in channel")  # type: ignore[union-attr]


async def test_the_writers_rule_and_the_clusters_channels(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    start_worker()
    async with (
        agent(chorus_settings, "planner") as planner,
        agent(chorus_settings, "worker-b") as other,
        agent(chorus_settings, None) as nobody,
    ):
        config = structured(
            await planner.call_tool(
                "configure_channel", {"channel": CHANNEL, "writers": ["planner"]}
            )
        )
        assert config["writers"] == ["planner"]
        refusal = f"sender 'worker-b' may not write to channel {CHANNEL!r} (its writers: planner)"
        for _ in range(100):  # the other server's book reads the config as it comes
            attempt = await other.call_tool("configure_channel", {"channel": CHANNEL})
            if attempt.is_error:
                break
            await asyncio.sleep(0.1)
        assert attempt.content[0].text == refusal  # type: ignore[union-attr]
        sent = await other.call_tool(
            "send_message", {"channel": CHANNEL, "type": "status", "content": "me too"}
        )
        assert sent.is_error and sent.content[0].text == refusal  # type: ignore[union-attr]
        structured(
            await planner.call_tool(
                "send_message", {"channel": CHANNEL, "type": "status", "content": "plan"}
            )
        )
        for _ in range(100):
            listed = structured(await nobody.call_tool("list_channels", {}))
            if CHANNEL in listed["channels"]:
                break
            await asyncio.sleep(0.2)
    assert listed["channels"] == [CHANNEL]
    assert listed["decisions"][CHANNEL]["decision"] == "CONTINUE"


async def test_a_listening_client_is_told_when_a_channels_state_changes(
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    uri = f"chorus://channels/{CHANNEL}/state"
    async with agent(chorus_settings, None) as reader:
        assert reader.server_capabilities.resources is not None
        assert reader.server_capabilities.resources.subscribe is True
        async with reader.listen(resource_subscriptions=[uri]) as subscription:
            events = aiter(subscription)
            next_event = asyncio.ensure_future(anext(events))
            for offset in range(100):  # until the follower (from the end) has read one
                await publish_events(chorus_settings, [driver_event(offset)])
                done, _ = await asyncio.wait({next_event}, timeout=0.5)
                if done:
                    break
            assert next_event.result() == ResourceUpdated(uri=uri)


def driver_event(offset: int) -> DriverEvent:
    message = Message(channel=CHANNEL, sender="planner", type=MessageType.STATUS, content="x")
    return DriverEvent(
        source=f"channel:{CHANNEL}",
        channel=CHANNEL,
        message_id=message.id,
        partition=key_partition(CHANNEL.encode(), 4),
        offset=offset,
        projections={},
        decision=DecisionRecord(decision="CONTINUE", offset=offset),
    )
