"""streams.interfaces.driver_events without a broker: the bounded dedupe and `decided`."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from projections.termination import DecisionName
from streams.interfaces.driver_events import LastOffsets, decided
from streams.records import DriverEvent


def test_an_offset_at_or_below_the_last_seen_is_a_redelivery() -> None:
    seen = LastOffsets()
    assert seen.is_new("team/a", 5)
    assert not seen.is_new("team/a", 5)
    assert not seen.is_new("team/a", 4)
    assert seen.is_new("team/a", 6)
    assert seen.is_new("team/b", 1)


def test_the_least_recently_active_channel_is_forgotten_first() -> None:
    seen = LastOffsets(limit=2)
    seen.is_new("a", 1)
    seen.is_new("b", 1)
    seen.is_new("a", 2)  # a is now the most recent
    seen.is_new("c", 1)  # over the limit: b goes
    assert not seen.is_new("a", 2)
    assert seen.is_new("b", 1)  # forgotten, so yielded again


def _event(decision: str) -> DriverEvent:
    return DriverEvent(
        source="channel:team/a",
        channel="team/a",
        message_id="m1",
        partition=0,
        offset=3,
        projections={},
        decision={"decision": decision},
    )


def test_decided_is_any_decision_but_continue() -> None:
    assert not decided(_event("CONTINUE"))
    assert decided(_event("COMPLETE"))
    assert decided(_event("ESCALATE"))


def test_the_decision_is_typed_and_reads_back_from_its_json() -> None:
    event = _event("FAILED")
    assert event.decision is not None and event.decision.decision is DecisionName.FAILED
    again = DriverEvent.model_validate_json(event.to_bytes())
    assert again.decision == event.decision
    assert orjson.loads(event.to_bytes())["decision"] == {
        "decision": "FAILED",
        "detail": None,
        "offset": None,
    }
    shadow = event.model_copy(update={"decision": None})
    assert not decided(shadow)  # a shadow-divergence event decides nothing
    with pytest.raises(ValidationError):
        _event("DONE")
