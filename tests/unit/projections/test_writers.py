"""projections.writers: who may write to a channel, one rule for the fold, the API and replay."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from projections.commitments import expiry_event
from projections.model import Message, MessageType
from projections.writers import (
    MAX_WRITERS,
    may_write,
    writer_refusal,
    writers_refusal,
)


def _status(sender: str) -> Message:
    return Message(channel="team/plan", sender=sender, type=MessageType.STATUS, content="hi")


@pytest.mark.parametrize("writers", [None, []])
def test_no_writers_is_open(writers: list[str] | None) -> None:
    assert may_write(writers, "anyone")
    assert writer_refusal(writers, _status("anyone")) is None


@pytest.mark.parametrize("sender", ["planner", "worker-a", "role:worker-a", "instance:planner"])
def test_names_and_roles_match_as_the_fold_matches_them(sender: str) -> None:
    assert writer_refusal(["planner", "role:worker-a"], _status(sender)) is None


def test_any_other_sender_is_refused_in_one_line_naming_it_and_the_channel() -> None:
    reason = writer_refusal(["role:worker-a", "planner"], _status("mallory"))
    assert reason == (
        "sender 'mallory' may not write to channel 'team/plan' "
        "(its writers: planner, role:worker-a)"
    )


def test_the_folds_own_expiry_events_are_not_refused() -> None:
    event = expiry_event("team/plan", "c1", datetime(2026, 1, 1, tzinfo=UTC))
    assert writer_refusal(["planner"], event) is None
    # An agent's EVENT under the same name is not one.
    forged = Message(channel="team/plan", sender="chorus", type=MessageType.EVENT)
    assert writer_refusal(["planner"], forged) is not None


def test_a_writers_list_is_bounded() -> None:
    assert writers_refusal(["planner", "role:x"]) is None
    assert writers_refusal([f"a{n}" for n in range(MAX_WRITERS + 1)]) == (
        f"writers: at most {MAX_WRITERS} entries, got {MAX_WRITERS + 1}"
    )
    assert writers_refusal([" "]) is not None
    assert writers_refusal(["x" * 201]) is not None
