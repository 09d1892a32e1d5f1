"""`chorus produce` from flags: what it sends and what it prints (sending is replaced by a
recorder here; sending to the real broker is in tests/integration)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from click.testing import CliRunner

from projections.model import Message, MessageType, utc_now
from streams.interfaces.cli.main import main
from streams.kafka import produce as produce_module
from streams.kafka.produce import SentMessage
from streams.settings import Settings

BASE = ["produce", "--channel", "team/plan", "--sender", "planner"]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    """What the command hands to the producer; each lands at partition 1, offsets 7, 8, ..."""
    recorded: list[Message] = []

    async def record(_: Settings, messages: Sequence[Message]) -> list[SentMessage]:
        recorded.extend(messages)
        return [SentMessage(m, 1, 7 + i) for i, m in enumerate(messages)]

    monkeypatch.setattr(produce_module, "send_messages", record)
    return recorded


def test_it_prints_the_id_and_the_generated_correlation_id(sent: list[Message]) -> None:
    result = CliRunner().invoke(main, [*BASE, "--type", "command", "--content", "plan it"])
    assert result.exit_code == 0, result.output
    (message,) = sent
    assert message.type is MessageType.COMMAND
    assert message.correlation_id
    assert result.output == (
        f"team/plan\t{message.id}\tcorrelation_id={message.correlation_id}\tpartition=1\toffset=7\n"
    )


def test_json_prints_one_object_per_message(sent: list[Message]) -> None:
    result = CliRunner().invoke(main, [*BASE, "--type", "Status", "--content", "on it", "--json"])
    assert result.exit_code == 0, result.output
    (message,) = sent
    assert orjson.loads(result.output) == {
        "channel": "team/plan",
        "id": message.id,
        "correlation_id": None,
        "partition": 1,
        "offset": 7,
    }


def test_type_and_actor_type_are_taken_in_any_case(sent: list[Message]) -> None:
    result = CliRunner().invoke(main, [*BASE, "--type", "sTaTuS", "--actor-type", "human"])
    assert result.exit_code == 0, result.output
    assert (sent[0].type.value, sent[0].actor_type.value) == ("STATUS", "HUMAN")


def test_a_deadline_as_a_delay_is_counted_from_now(sent: list[Message]) -> None:
    before = utc_now()
    result = CliRunner().invoke(main, [*BASE, "--type", "query", "--deadline", "5m"])
    assert result.exit_code == 0, result.output
    deadline = sent[0].deadline
    assert deadline is not None
    assert before + timedelta(minutes=5) <= deadline <= utc_now() + timedelta(minutes=5)


def test_a_deadline_as_an_iso_time_without_zone_is_utc(sent: list[Message]) -> None:
    result = CliRunner().invoke(main, [*BASE, "--type", "query", "--deadline", "2031-05-01T12:00"])
    assert result.exit_code == 0, result.output
    assert sent[0].deadline == datetime(2031, 5, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("deadline", "error"),
    [("0s", "more than 0 seconds"), ("next week", "neither an ISO time")],
)
def test_a_bad_deadline_is_refused_naming_the_option(
    sent: list[Message], deadline: str, error: str
) -> None:
    result = CliRunner().invoke(main, [*BASE, "--type", "query", "--deadline", deadline])
    assert result.exit_code == 2
    assert "--deadline" in result.output and error in result.output
    assert sent == []


def test_the_payload_is_a_json_object(sent: list[Message]) -> None:
    payload = '{"files": ["notes.md"], "lines": 40}'
    result = CliRunner().invoke(main, [*BASE, "--type", "event", "--payload", payload])
    assert result.exit_code == 0, result.output
    assert sent[0].payload == {"files": ["notes.md"], "lines": 40}


@pytest.mark.parametrize(("payload", "error"), [("[1, 2]", "JSON object"), ("{", "not valid")])
def test_a_payload_that_is_not_a_json_object_is_refused(
    sent: list[Message], payload: str, error: str
) -> None:
    result = CliRunner().invoke(main, [*BASE, "--type", "event", "--payload", payload])
    assert result.exit_code == 2
    assert "--payload" in result.output and error in result.output
    assert sent == []


def test_message_flags_beside_file_are_refused_not_ignored(sent: list[Message]) -> None:
    line = '{"channel": "team/plan", "sender": "a", "type": "STATUS"}\n'
    result = CliRunner().invoke(
        main, ["produce", "--file", "-", "--channel", "other/room", "--type", "query"], input=line
    )
    assert result.exit_code == 2
    assert "--channel, --type cannot be used with --file" in result.output
    assert sent == []


def test_an_invalid_message_from_flags_names_the_rule(sent: list[Message]) -> None:
    result = CliRunner().invoke(main, [*BASE, "--type", "handoff"])
    assert result.exit_code == 1
    assert "invalid message: message: in_reply_to is required for HANDOFF" in result.output
    assert sent == []
