"""streams.agents.sending without a broker: the message an agent asks for."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from projections.model import MessageError, MessageType, utc_now
from streams.agents.sending import _config, agent_message
from streams.records import ChannelConfig


def test_the_agent_is_the_sender_and_a_request_gets_a_correlation_id() -> None:
    message = agent_message(
        "planner",
        "team/plan",
        {"type": "query", "content": "which release?", "target": "role:writer"},
    )
    assert message.sender == "planner" and message.type is MessageType.QUERY
    assert message.correlation_id and message.target == "role:writer"
    assert message.topic == "general" and message.deadline is None


def test_a_deadline_is_a_delay_from_now_and_a_topic_is_kept() -> None:
    message = agent_message(
        "planner", "team/plan", {"type": "COMMAND", "deadline_seconds": 60, "topic": "docs"}
    )
    assert message.deadline is not None and message.topic == "docs"
    assert timedelta(seconds=58) < message.deadline - utc_now() <= timedelta(seconds=60)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"type": "status", "sender": "mallory"}, "sender: not given by an agent"),
        ({"type": "status", "colour": "red"}, "unknown fields colour; a message takes type"),
        ({"content": "x"}, "type: required, one of QUERY"),
        ({"type": "shout"}, "type: must be one of QUERY"),
        ({"type": "done"}, "message: in_reply_to is required for DONE"),
        ({"type": "status", "deadline_seconds": 0}, "deadline_seconds: a number of seconds"),
        ({"type": "status", "target": "ann"}, "target: target must be instance:<id>"),
    ],
)
def test_a_message_that_breaks_a_rule_is_refused_with_the_folds_reason(
    fields: dict[str, object], reason: str
) -> None:
    with pytest.raises(MessageError) as raised:
        agent_message("planner", "team/plan", fields)
    assert raised.value.reason.startswith(reason), raised.value.reason


def test_a_config_the_config_stage_refuses_is_passed_over() -> None:
    good = ChannelConfig(channel="team/plan", writers=["planner"]).to_bytes()
    assert _config(good).writers == ["planner"]
    bad = ChannelConfig(channel="team/plan", termination=["no-such-condition"]).to_bytes()
    with pytest.raises(ValidationError, match="termination"):
        _config(bad)
