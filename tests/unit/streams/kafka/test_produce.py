"""streams.kafka.produce without a broker: preparing records, JSON lines, size limits."""

from __future__ import annotations

import pytest

from projections.model import ActorType, Message, MessageError, MessageType
from streams.kafka.produce import SentMessage, encoded, enum_member, parse_json_lines, prepare
from streams.settings import Settings


def test_enum_members_in_any_case() -> None:
    assert enum_member(MessageType, "type", "command") is MessageType.COMMAND
    with pytest.raises(MessageError, match="actor_type: must be one of HUMAN, AGENT"):
        enum_member(ActorType, "actor_type", "robot")


def test_a_request_gets_a_correlation_id() -> None:
    message = prepare({"channel": "team/a", "sender": "ann", "type": "QUERY", "content": "?"})
    assert message.correlation_id


def test_json_lines_give_messages_and_one_error_per_bad_line() -> None:
    lines = [
        '{"channel": "team/a", "sender": "ann", "type": "STATUS", "content": "hi"}\n',
        "\n",
        "{nope\n",
        '{"channel": "team/a", "sender": "", "type": "STATUS"}\n',
    ]
    messages, errors = parse_json_lines(lines)
    assert [m.content for m in messages] == ["hi"]
    assert [e.line_number for e in errors] == [3, 4]
    assert str(errors[0]).startswith("line 3: not valid JSON")
    assert "sender" in str(errors[1])


def test_one_message_over_the_limit_stops_them_all() -> None:
    settings = Settings(_env_file=None, max_message_bytes=1024, compacted_segment_bytes=2**20)  # type: ignore[call-arg]
    small = prepare({"channel": "team/a", "sender": "ann", "type": "STATUS", "content": "hi"})
    large = prepare({"channel": "team/a", "sender": "ann", "type": "STATUS", "content": "x" * 2000})
    assert [m for m, _ in encoded(settings, [small])] == [small]
    with pytest.raises(MessageError):
        encoded(settings, [small, large])


def test_a_sent_message_names_where_it_landed() -> None:
    message = Message(channel="team/a", sender="ann", type=MessageType.STATUS, content="hi")
    sent = SentMessage(message, partition=3, offset=9)
    assert (sent.id, sent.channel, sent.correlation_id) == (message.id, "team/a", None)
