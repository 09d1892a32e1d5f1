"""streams.kafka.consume without a broker: every record value is printable."""

from __future__ import annotations

import base64

from streams.kafka.consume import Record, decode_value


def test_values_decode_as_json_then_text_then_base64() -> None:
    assert decode_value(None) is None
    assert decode_value(b'{"a": 1}') == {"a": 1}
    assert decode_value(b"plain words") == "plain words"
    assert decode_value(b"\xff\x00") == {"base64": base64.b64encode(b"\xff\x00").decode()}


def test_a_record_as_json_has_its_position() -> None:
    record = Record("chorus.messages", 1, 5, "team/a", {"a": 1}, 1_700_000_000_000)
    assert record.as_json() == {
        "topic": "chorus.messages",
        "partition": 1,
        "offset": 5,
        "key": "team/a",
        "timestamp_ms": 1_700_000_000_000,
        "value": {"a": 1},
    }
