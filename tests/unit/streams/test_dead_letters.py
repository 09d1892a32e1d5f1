"""streams.dead_letters: a dead letter keeps the reason and the original, and always fits."""

from __future__ import annotations

import base64

from streams.dead_letters import (
    DEAD_LETTER_COPY_LIMIT,
    DEAD_LETTER_MAX_BYTES,
    DEAD_LETTER_REASON_LIMIT,
    dead_letter_for,
)
from streams.records import DeadLetter


def _letter(value: bytes | None, reason: str = "bad", key: bytes | None = b"team/a") -> DeadLetter:
    return dead_letter_for(
        reason, "fold", topic="chorus.messages", partition=2, offset=7, key=key, value=value
    )


def test_text_is_kept_as_text_with_its_position() -> None:
    letter = _letter(b'{"id": 1')
    assert letter.original == '{"id": 1'
    assert letter.original_base64 is None
    assert not letter.original_truncated
    assert (letter.stage, letter.source_topic, letter.partition, letter.offset) == (
        "fold",
        "chorus.messages",
        2,
        7,
    )
    assert letter.key == "team/a"


def test_bytes_that_are_not_text_are_kept_as_base64() -> None:
    letter = _letter(b"\xff\xfe\x00")
    assert letter.original is None
    assert letter.original_base64 is not None
    assert base64.b64decode(letter.original_base64) == b"\xff\xfe\x00"


def test_a_null_value_and_key_stay_null() -> None:
    letter = _letter(None, key=None)
    assert letter.original is None and letter.original_base64 is None and letter.key is None


def test_a_long_reason_is_cut() -> None:
    letter = _letter(b"x", reason="r" * (DEAD_LETTER_REASON_LIMIT + 50))
    assert len(letter.reason) == DEAD_LETTER_REASON_LIMIT
    assert letter.reason.endswith("…")


def test_a_large_original_is_truncated_to_fit() -> None:
    letter = _letter(b"a" * (DEAD_LETTER_COPY_LIMIT * 3))
    assert letter.original_truncated
    assert letter.original == "a" * DEAD_LETTER_COPY_LIMIT
    assert len(letter.to_bytes()) <= DEAD_LETTER_MAX_BYTES


def test_text_that_grows_when_escaped_still_fits() -> None:
    # A control character takes six bytes as a JSON escape (\u0001).
    letter = _letter(b"\x01" * DEAD_LETTER_COPY_LIMIT)
    assert letter.original_truncated
    assert len(letter.to_bytes()) <= DEAD_LETTER_MAX_BYTES
