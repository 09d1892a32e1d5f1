"""streams.interfaces.driver_events without a broker: the bounded dedupe, `decided`, where a
wait starts and how a request ended."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from projections.commitments import CommitmentState
from projections.model import utc_now
from projections.termination import DecisionName
from streams.interfaces.driver_events import (
    CLOCK_SKEW,
    After,
    LastOffsets,
    _Start,
    decided,
    outcome_of,
    request_ended,
)
from streams.records import DriverEvent, ProjectionChange


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


def test_a_wait_starts_after_an_offset_or_a_message_id_never_both_nor_neither() -> None:
    assert After(offset=0).offset == 0
    for wrong in ({}, {"offset": 1, "message_id": "m1"}):
        with pytest.raises(ValueError, match="one of them"):
            After(**wrong)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="0 or more, got -1"):
        After(offset=-1)


def _at(offset: int, message_id: str | None = None, **fields: Any) -> DriverEvent:
    return _event("CONTINUE").model_copy(
        update={"offset": offset, "message_id": message_id or f"m{offset}", **fields}
    )


def test_a_start_at_an_offset_covers_that_message_and_later_ones() -> None:
    start = _Start(After(offset=5))
    assert [start.covers(_at(n)) for n in (4, 5, 6)] == [False, True, True]
    assert not start.reached([_at(6), _at(7)])  # the look-back must read further back
    assert start.reached([_at(5), _at(6)])


def test_a_start_at_a_message_id_is_the_offset_of_that_message_s_event() -> None:
    start = _Start(After(message_id="mine", created_at=utc_now()))
    assert not start.covers(_at(3))  # before the message's event is read
    assert not start.reached([_at(8), _at(9)])
    assert start.reached([_at(6), _at(7, "mine"), _at(8)])
    assert [start.covers(_at(n)) for n in (6, 7, 8)] == [False, True, True]


def test_a_look_back_for_a_message_not_folded_yet_stops_at_events_folded_before_it() -> None:
    created = utc_now()
    start = _Start(After(message_id="mine", created_at=created))
    recent = _at(3, timestamp=created - CLOCK_SKEW + timedelta(seconds=1))
    assert not start.reached([recent])
    assert start.reached([_at(2, timestamp=created - CLOCK_SKEW - timedelta(seconds=1))])
    assert start.offset is None  # still waiting for the message's own event
    assert start.covers(_at(9, "mine")) and start.covers(_at(10))


def _changing(offset: int, *commitments: tuple[str, str]) -> DriverEvent:
    changed = [
        {"id": f"c{n}", "correlation_id": cid, "state": state}
        for n, (cid, state) in enumerate(commitments)
    ]
    return _at(
        offset,
        projections={"commitments": ProjectionChange(version=2, changes={"commitments": changed})},
    )


def test_a_request_ends_when_every_commitment_its_message_changed_ended() -> None:
    ended = request_ended("ask")
    assert not ended(_changing(1, ("ask", "OPEN")))
    assert not ended(_changing(2, ("ask", "ACKNOWLEDGED")))
    assert not ended(_changing(3, ("ask", "DELEGATED"), ("ask", "OPEN")))  # a hand-off
    assert not ended(_changing(4, ("other", "FULFILLED")))
    assert not ended(_at(5))  # a redelivery or an event without commitments
    done = _changing(6, ("ask", "FULFILLED"))
    assert ended(done)
    outcome = outcome_of(done, "ask")
    assert outcome.state is CommitmentState.FULFILLED and outcome.event is done
    assert outcome.commitment["correlation_id"] == "ask"
    assert outcome_of(_changing(7, ("ask", "EXPIRED")), "ask").state is CommitmentState.EXPIRED
