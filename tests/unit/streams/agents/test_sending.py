"""streams.agents.sending without a broker: the message an agent asks for."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from projections.model import MessageError, MessageType, utc_now
from streams.agents.sending import WritersBook, _config, agent_message
from streams.records import ChannelConfig, key_partition
from streams.settings import Settings


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


def _record(channel: str, value: bytes | None, offset: int = 0) -> Any:
    return SimpleNamespace(key=channel.encode(), value=value, offset=offset, partition=0)


def _config_of(channel: str, *writers: str) -> bytes:
    return ChannelConfig(channel=channel, writers=list(writers)).to_bytes()


async def test_the_book_keeps_only_channels_with_writers_and_says_where_it_dropped_one() -> None:
    book = WritersBook(Settings(_env_file=None))  # type: ignore[call-arg]
    book.partitions, book.restoring = 4, {}
    book._take(_record("team/a", _config_of("team/a", "planner")))
    book._take(_record("team/b", _config_of("team/b")))  # no writers: nothing kept
    assert book.kept.keys() == ["team/a"]
    running: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    assert await book.writers("team/a", running) == ["planner"]
    assert await book.writers("team/b", running) == []
    book._take(_record("team/a", None))  # a tombstone
    assert await book.writers("team/a", running) == []
    book._take(_record("team/c", _config_of("team/c", "role:x")))
    bad = ChannelConfig(channel="team/c", termination=["nope"]).to_bytes()
    book._take(_record("team/c", bad))  # refused by the config stage: the last one stands
    assert await book.writers("team/c", running) == ["role:x"]
    book.kept.budget = 10
    book._take(_record("team/d", _config_of("team/d", "someone-long")))
    assert book.kept.keys() == [] and book.dropped == {
        key_partition(b"team/c", 4),
        key_partition(b"team/d", 4),
    }
