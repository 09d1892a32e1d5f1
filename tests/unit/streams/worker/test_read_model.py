"""The worker's read model without a worker: what the state view answers, the budget and
channel-name rules, and the context from the fold's state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from projections.channel import ChannelStanding, standing, step
from projections.commitments import CommitmentProjection
from projections.model import Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded
from projections.termination import parse_conditions
from streams.worker.read_model import (
    MAX_CONTEXT_TOKENS,
    UnknownChannel,
    channel_state,
    checked_channel,
    context_budget,
)

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)
PROJECTIONS: list[Any] = [CommitmentProjection(), ChannelOverviewProjection()]


class FakeRuntime:
    """The part of `Runtime` the read model uses, over folds made by the shared step."""

    def __init__(self, messages: list[Message]) -> None:
        stored: dict[str, Folded | None] = {}
        for offset, message in enumerate(messages):
            stored = {
                s.projection.name: s.folded for s in step(PROJECTIONS, stored, message, offset)
            }
        self.stored = stored
        self.folds = {p.name: {} for p in PROJECTIONS}
        self.channel_config: dict[str, Any] = {}

    def folded(self, channel: str, name: str) -> Folded | None:
        return self.stored.get(name) if channel == "team/plan" else None

    def standing(self, channel: str) -> ChannelStanding | None:
        if channel != "team/plan":
            return None
        return standing(PROJECTIONS, self.stored, parse_conditions([]))


def conversation() -> list[Message]:
    ask = Message(
        id="m0",
        channel="team/plan",
        sender="planner",
        type=MessageType.COMMAND,
        content="Run the load test",
        correlation_id="c1",
        target="role:worker",
        created_at=T0,
    )
    failed = Message(
        id="m1",
        channel="team/plan",
        sender="worker",
        type=MessageType.FAILURE,
        content="The cluster is down",
        correlation_id="c1",
        in_reply_to="m0",
        created_at=T0 + timedelta(minutes=1),
    )
    return [ask, failed]


def test_the_state_view_carries_the_decision_and_every_fold() -> None:
    found = channel_state(FakeRuntime(conversation()), "team/plan")  # type: ignore[arg-type]
    assert found is not None
    assert found["decision"] == {
        "decision": "FAILED",
        "detail": "1 commitment failed (threshold: 0)",
        "offset": 1,
    }
    assert set(found["projections"]) == {"commitments", "overview"}
    assert found["projections"]["commitments"]["offset"] == 1
    assert channel_state(FakeRuntime([]), "nobody/here") is None  # type: ignore[arg-type]


def test_the_budget_rule() -> None:
    assert context_budget(None) == 1000 and context_budget("0") == 0
    assert context_budget(str(MAX_CONTEXT_TOKENS)) == MAX_CONTEXT_TOKENS
    for bad in ("-1", str(MAX_CONTEXT_TOKENS + 1), "many"):
        with pytest.raises(ValueError, match="max_tokens must be"):
            context_budget(bad)


def test_channel_names_are_checked_and_unknown_ones_say_so() -> None:
    assert checked_channel("team/plan") == "team/plan"
    with pytest.raises(ValueError, match="lowercase kebab-case"):
        checked_channel("Team Plan")
    assert str(UnknownChannel("a/b")) == "no messages folded for channel 'a/b'"
