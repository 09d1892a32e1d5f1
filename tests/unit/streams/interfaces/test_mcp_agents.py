"""streams.interfaces.mcp_agents without a broker: a tracked request's events and messages,
the hub's bound, the bus that counts its listeners, and the token check over HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mcp.server.subscriptions import ResourceUpdated

from projections.model import Message, MessageType
from streams.agents.identity import AgentTokens
from streams.interfaces import mcp_agents
from streams.interfaces.driver_events import RequestWatch
from streams.interfaces.mcp_agents import (
    AgentTokenVerifier,
    EventHub,
    HubLost,
    ListenedBus,
    Tracked,
)
from streams.records import DecisionRecord, DriverEvent, ProjectionChange
from streams.settings import Settings

ASK = Message(channel="team/a", sender="planner", type=MessageType.QUERY, correlation_id="c1")
DONE = Message(
    channel="team/a",
    sender="worker-a",
    type=MessageType.DONE,
    correlation_id="c1",
    in_reply_to=ASK.id,
    content="the notes",
)


def event(message: Message, offset: int, state: str | None) -> DriverEvent:
    """The driver event of `message`: the commitment c1 in `state` (None: not changed)."""
    changed = [{"correlation_id": "c1", "state": state}] if state else []
    return DriverEvent(
        source="channel:team/a",
        channel="team/a",
        message_id=message.id,
        partition=1,
        offset=offset,
        projections={"commitments": ProjectionChange(version=3, changes={"commitments": changed})},
        decision=DecisionRecord(decision="CONTINUE", offset=offset),
    )


async def tracked() -> Tracked:
    future: asyncio.Future[DriverEvent] = asyncio.get_running_loop().create_future()
    return Tracked("team/a", ASK.id, RequestWatch("c1"), future)


async def test_a_tracked_request_starts_at_its_own_event_and_ends_at_the_one_that_ends_it() -> None:
    request = await tracked()
    earlier = Message(
        channel="team/a", sender="x", type=MessageType.DONE, correlation_id="c1", in_reply_to="old"
    )
    request.feed(event(earlier, 3, "FULFILLED"))  # an older commitment of the same id
    assert not request.ended.done()
    request.feed(event(ASK, 4, "OPEN"))
    request.feed(event(DONE, 6, "FULFILLED"))
    assert request.ended.result().offset == 6
    assert request.watch.state is not None and request.watch.state.value == "FULFILLED"


async def test_once_ended_only_the_message_that_ended_it_is_kept() -> None:
    request = await tracked()
    request.keep(1, 5, DONE)
    request.feed(event(ASK, 4, "OPEN"))
    request.feed(event(DONE, 6, "FULFILLED"))
    assert list(request.replies) == []  # offset 5 was not the one
    request.keep(1, 7, DONE)
    request.keep(1, 6, DONE)
    assert list(request.replies) == [(1, 6)]
    await asyncio.wait_for(request.replied((1, 6)), 1)


async def test_the_hub_lets_the_oldest_request_go_at_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mcp_agents, "TRACKED_REQUESTS", 2)
    hub = EventHub(Settings(_env_file=None), ListenedBus(lambda: None))  # type: ignore[call-arg]
    first = hub.track(ASK)
    for n in range(2):
        hub.track(ASK.model_copy(update={"id": f"m{n}", "correlation_id": f"c{n}"}))
    assert list(hub.tracked) == ["m0", "m1"]
    with pytest.raises(HubLost, match="tracks at most 2 requests"):
        first.ended.result()


async def test_the_bus_counts_its_listeners_and_says_when_one_comes() -> None:
    came: list[int] = []
    bus = ListenedBus(lambda: came.append(1))
    heard: list[Any] = []
    gone = bus.subscribe(heard.append)
    assert (bus.listeners, came) == (1, [1])
    await bus.publish(ResourceUpdated(uri="chorus://channels/team/a/state"))
    gone()
    gone()  # once only
    assert bus.listeners == 0 and len(heard) == 1


async def test_a_token_names_its_agent_and_is_kept_nowhere(tmp_path: Any) -> None:
    path = tmp_path / "tokens"
    path.write_text("planner planner-token-0123456789\n")
    verifier = AgentTokenVerifier(AgentTokens.read(path))
    found = await verifier.verify_token("planner-token-0123456789")
    assert found is not None and found.client_id == "planner"
    assert "planner-token-0123456789" not in found.model_dump_json()
    assert await verifier.verify_token("nobody-token-0123456789") is None
