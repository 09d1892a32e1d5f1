from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest

from projections.model import (
    DEFAULT_MAX_MESSAGE_BYTES,
    ActorType,
    LogPosition,
    Message,
    MessageError,
    MessageType,
    channel_name_refusal,
    decode_message,
    encode_message,
    message_from_record,
    nesting_depth,
    with_generated_correlation_id,
)


def record(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {"channel": "team/plan", "sender": "alice", "type": "STATUS"}
    return {**base, **overrides}


def reason_for(**overrides: object) -> str:
    with pytest.raises(MessageError) as caught:
        message_from_record(record(**overrides))
    return caught.value.reason


def test_defaults_are_filled() -> None:
    message = message_from_record(record())
    assert message.id and len(message.id) == 32
    assert message.actor_type is ActorType.AGENT
    assert message.topic == "general"
    assert message.artefact_refs == []
    assert message.created_at.tzinfo is not None
    assert abs(message.created_at - datetime.now(UTC)) < timedelta(seconds=5)


def test_ids_are_unique() -> None:
    assert message_from_record(record()).id != message_from_record(record()).id


def test_round_trip_through_bytes() -> None:
    message = message_from_record(
        record(type="QUERY", correlation_id="c1", content="hi", payload={"a": [1, 2]})
    )
    assert decode_message(encode_message(message)) == message


@pytest.mark.parametrize("sender", ["", "   ", "\t"])
def test_sender_must_not_be_blank(sender: str) -> None:
    assert reason_for(sender=sender) == "sender: sender must not be blank"


def test_channel_at_most_200_characters() -> None:
    channel = "/".join(["a" * 79] * 3)  # 239 characters, every segment valid
    assert "at most 200 characters" in reason_for(channel=channel)


def test_channel_segment_at_most_80_characters() -> None:
    assert "at most 80 characters" in reason_for(channel="ok/" + "a" * 81)


@pytest.mark.parametrize(
    "channel", ["Upper", "under_score", "double--hyphen", "-lead", "trail-", "a//b", "", "a b"]
)
def test_channel_segments_are_lowercase_kebab_case(channel: str) -> None:
    assert reason_for(channel=channel).startswith("channel:")


@pytest.mark.parametrize("channel", ["a", "team-1/plan-b", "x/y/z", "0-9"])
def test_valid_channels(channel: str) -> None:
    assert message_from_record(record(channel=channel)).channel == channel


def test_a_channel_name_s_refusal_is_one_line_with_the_name_and_the_rule() -> None:
    assert channel_name_refusal("team/plan") is None
    assert channel_name_refusal("Team/plan") == (
        "invalid channel name 'Team/plan': channel segment 'Team' must be lowercase "
        "kebab-case (a-z, 0-9, single hyphens), segments separated by '/'"
    )


def test_topic_is_stripped_and_limited() -> None:
    assert message_from_record(record(topic="  caching  ")).topic == "caching"
    assert "at most 200 characters" in reason_for(topic="t" * 201)


@pytest.mark.parametrize("target", ["instance:42", "capability:review", "role:lead"])
def test_valid_targets(target: str) -> None:
    assert message_from_record(record(target=target)).target == target


@pytest.mark.parametrize("target", ["bob", "role:", "team:x", "instance: "])
def test_invalid_targets(target: str) -> None:
    assert reason_for(target=target).startswith("target:")


@pytest.mark.parametrize("kind", ["QUERY", "COMMAND", "PROPOSE"])
def test_requests_need_correlation_id(kind: str) -> None:
    assert f"correlation_id is required for {kind}" in reason_for(type=kind, content="x")


@pytest.mark.parametrize("kind", ["RESPONSE", "DONE", "DECLINE", "FAILURE"])
def test_replies_need_in_reply_to_and_correlation_id(kind: str) -> None:
    assert f"in_reply_to is required for {kind}" in reason_for(
        type=kind, correlation_id="c", content="x"
    )
    assert f"correlation_id is required for {kind}" in reason_for(
        type=kind, in_reply_to="m1", content="x"
    )


def test_handoff_needs_target() -> None:
    reason = reason_for(type="HANDOFF", in_reply_to="m1", correlation_id="c")
    assert reason.endswith("target is required for HANDOFF")


@pytest.mark.parametrize("kind", ["DECLINE", "FAILURE", "PROPOSE"])
@pytest.mark.parametrize("content", [None, "", "  "])
def test_content_required(kind: str, content: str | None) -> None:
    reason = reason_for(type=kind, in_reply_to="m", correlation_id="c", content=content)
    assert f"content must be non-empty for {kind}" in reason


def test_event_carries_no_content() -> None:
    assert "content must be empty for EVENT" in reason_for(type="EVENT", content="typing")
    event = message_from_record(record(type="EVENT", payload={"kind": "typing"}))
    assert event.payload == {"kind": "typing"}


def test_unknown_type_and_extra_fields_are_rejected() -> None:
    assert reason_for(type="SHOUT").startswith("type:")
    assert reason_for(colour="red").startswith("colour:")


def test_missing_required_fields_are_named() -> None:
    with pytest.raises(MessageError) as caught:
        message_from_record({"sender": "a"})
    assert "channel: Field required" in caught.value.reason
    assert "type: Field required" in caught.value.reason


def test_naive_and_offset_datetimes_become_utc() -> None:
    naive = message_from_record(record(created_at="2026-01-01T10:00:00"))
    assert naive.created_at == datetime(2026, 1, 1, 10, tzinfo=UTC)
    shifted = message_from_record(
        record(deadline=datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2))))
    )
    assert shifted.deadline == datetime(2026, 1, 1, 10, tzinfo=UTC)


def test_producer_generates_missing_correlation_id_for_requests_only() -> None:
    query = with_generated_correlation_id(record(type="QUERY"))
    assert query["correlation_id"]
    assert with_generated_correlation_id(record(type="QUERY", correlation_id="k")) == record(
        type="QUERY", correlation_id="k"
    )
    assert "correlation_id" not in with_generated_correlation_id(record(type="STATUS"))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "record value is null"),
        (b"not json", "not valid UTF-8 JSON"),
        (b"\xff\xfe{}", "not valid UTF-8 JSON"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (
            b'{"id": "x", "created_at": "2026-01-01T00:00:00Z", "channel": 5, "sender": "a", '
            b'"type": "STATUS"}',
            "channel: Input should be",
        ),
        (b'{"channel": "a", "sender": "a", "type": "STATUS"}', "id, created_at: required"),
    ],
)
def test_decode_failures_have_reasons(raw: bytes | None, expected: str) -> None:
    with pytest.raises(MessageError) as caught:
        decode_message(raw)
    assert expected in caught.value.reason


def test_size_limit_on_decode_and_encode() -> None:
    big = Message(channel="a", sender="b", type=MessageType.STATUS, content="x" * 2000)
    with pytest.raises(MessageError, match="maximum is 1000"):
        encode_message(big, max_bytes=1000)
    raw = orjson.dumps(big.model_dump(mode="json"))
    with pytest.raises(MessageError, match="maximum is 1000"):
        decode_message(raw, max_bytes=1000)
    assert decode_message(raw, DEFAULT_MAX_MESSAGE_BYTES) == big


def test_messages_are_immutable() -> None:
    message = message_from_record(record())
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen
        message.sender = "mallory"  # type: ignore[misc]


def test_a_record_without_id_or_time_takes_them_from_its_log_position() -> None:
    raw = b'{"channel": "a", "sender": "s", "type": "STATUS"}'
    position = LogPosition(partition=2, offset=41, timestamp_ms=1_767_225_600_000)
    first = decode_message(raw, position=position)
    assert first == decode_message(raw, position=position)  # every read, the same message
    assert first.id == "p2-o41"
    assert first.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    given = decode_message(
        b'{"id": "m1", "created_at": "2025-05-05T00:00:00Z", "channel": "a", "sender": "s",'
        b' "type": "STATUS"}',
        position=position,
    )
    assert given.id == "m1" and given.created_at.year == 2025


def test_deep_payloads_are_refused() -> None:
    deep: object = "leaf"
    for _ in range(65):
        deep = {"k": deep}
    raw = orjson.dumps(
        {
            "id": "x",
            "created_at": "2026-01-01T00:00:00Z",
            "channel": "a",
            "sender": "s",
            "type": "EVENT",
            "payload": deep,
        }
    )
    with pytest.raises(MessageError, match="nested deeper than 64 levels"):
        decode_message(raw)
    assert nesting_depth({"a": [1, {"b": []}]}, 64) == 4  # dict, list, dict, list


def test_channel_rules_hold_with_the_cache_of_checked_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import projections.model as model

    monkeypatch.setattr(model, "_VALID_CHANNELS", set())
    monkeypatch.setattr(model, "_VALID_CHANNELS_KEPT", 2)
    base = {"sender": "ann", "type": "STATUS", "id": "m1", "created_at": "2026-01-01T00:00:00Z"}
    for _ in range(2):  # a refused name is refused every time, never remembered
        with pytest.raises(MessageError, match="kebab-case"):
            decode_message(orjson.dumps({**base, "channel": "Team/Alpha"}))
    assert not model._VALID_CHANNELS
    for name in ["team/a", "team/a", "team/b", "team/c"]:
        assert decode_message(orjson.dumps({**base, "channel": name})).channel == name
    assert sorted(model._VALID_CHANNELS) == ["team/c"]  # full at 2 names: emptied, then refilled
    with pytest.raises(MessageError, match="at most 200"):
        decode_message(orjson.dumps({**base, "channel": "a" * 201}))
