"""projections.channel: the step the worker and replay share, its two rules (the size
limit, the joined open count), and a channel's standing from its stored folds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projections.channel import oversize, standing, step
from projections.commitments import CommitmentProjection
from projections.model import Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded
from projections.termination import Complete, Continue, parse_conditions
from tests.sample_projections import HoarderProjection

PROJECTIONS: list[Any] = [CommitmentProjection(), ChannelOverviewProjection()]
T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def _message(index: int, type_: MessageType, **fields: Any) -> Message:
    return Message(
        id=f"m{index}",
        channel="team/a",
        sender=fields.pop("sender", "ann"),
        type=type_,
        created_at=T0 + timedelta(seconds=index),
        **fields,
    )


def _fold(
    messages: list[Message], projections: list[Any] = PROJECTIONS, **limits: int
) -> dict[str, Folded]:
    stored: dict[str, Folded | None] = {}
    for offset, message in enumerate(messages):
        for done in step(projections, stored, message, offset, **limits):
            stored[done.projection.name] = done.folded
    return {name: folded for name, folded in stored.items() if folded is not None}


def test_the_overview_carries_the_commitments_open_count() -> None:
    asked = _message(0, MessageType.COMMAND, content="build it", correlation_id="c1")
    folds = _fold([asked])
    assert folds["overview"].state["open_commitments"] == 1
    done = _message(
        1, MessageType.DONE, content="built", correlation_id="c1", in_reply_to="m0", sender="bob"
    )
    assert _fold([asked, done])["overview"].state["open_commitments"] == 0


def test_oversize_names_the_size_and_the_setting() -> None:
    assert oversize({"a": 1}, 100) is None
    reason = oversize({"a": "x" * 200}, 100)
    assert reason is not None
    assert "over the 100-byte limit (CHORUS_MAX_STATE_BYTES)" in reason


def test_a_state_over_the_limit_keeps_the_previous_fold_and_says_why() -> None:
    hoarder = HoarderProjection()
    stored: dict[str, Folded | None] = {}
    first = step([hoarder], stored, _message(0, MessageType.STATUS, content="x" * 600), 0)
    stored["hoarder"] = first[0].folded
    second = step(
        [hoarder],
        stored,
        _message(1, MessageType.STATUS, content="y" * 600),
        1,
        max_state_bytes=1024,
    )
    assert not second[0].applied
    assert second[0].folded == first[0].folded
    assert second[0].error is not None and "CHORUS_MAX_STATE_BYTES" in second[0].error


def test_standing_of_a_channel_without_folds() -> None:
    nothing = standing(PROJECTIONS, {}, parse_conditions([]))
    assert (nothing.offset, nothing.at, nothing.message_count, nothing.states) == (
        None,
        None,
        0,
        {},
    )
    assert isinstance(nothing.decision, Continue)


def test_standing_after_the_last_fold() -> None:
    messages = [_message(i, MessageType.STATUS, content=f"note {i}") for i in range(3)]
    found = standing(PROJECTIONS, _fold(messages), parse_conditions(["max-messages:3"]))
    assert (found.offset, found.message_count, found.at) == (2, 3, T0 + timedelta(seconds=2))
    assert isinstance(found.decision, Complete)
    assert found.decision_json()["offset"] == 2


def test_states_already_loaded_fold_like_states_loaded_again() -> None:
    """`step` given the loaded states (`loaded`, what the worker keeps in memory) gives
    exactly what it gives loading each state from its stored form."""
    from streams.registry import registered_projections
    from tests.factories import conversation

    projections = registered_projections([])
    reloaded: dict[str, Folded | None] = {}
    kept: dict[str, Folded | None] = {}
    states: dict[str, Any] = {}
    for offset, message in enumerate(conversation(["a"], 300, seed=5)):
        plain = step(projections, reloaded, message, offset)
        fast = step(projections, kept, message, offset, states)
        for slow, quick in zip(plain, fast, strict=True):
            assert slow.folded == quick.folded and slow.state == quick.state
            reloaded[slow.projection.name] = slow.folded
            kept[quick.projection.name] = quick.folded
            states[quick.projection.name] = quick.state
            assert Folded.model_validate(quick.folded.as_record()) == quick.folded


def test_a_state_outgrowing_its_limit_is_a_typed_failure() -> None:
    from projections.channel import StepFailure

    message = Message(channel="a/b", sender="ann", type=MessageType.STATUS, content="x" * 2000)
    (done,) = step([HoarderProjection()], {}, message, 0, max_state_bytes=1024)
    assert done.failure is StepFailure.STATE_BYTES and not done.applied
    assert done.error is not None and "over the 1024-byte limit" in done.error
