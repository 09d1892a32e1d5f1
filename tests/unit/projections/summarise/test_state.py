"""The state part of a summary record: rendered from the commitments state, bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from projections.commitments import CommitmentProjection, CommitmentsState
from projections.model import Message, MessageType
from projections.summarise.state import (
    ENDED_SHOWN,
    OPEN_SHOWN,
    narrative_of,
    state_part,
    with_state,
)

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)


def fold(*messages: Message) -> CommitmentsState:
    projection = CommitmentProjection()
    state = projection.identity()
    for message in messages:
        state = projection.apply(state, message)
    return state


def ask(n: int) -> Message:
    return Message(
        id=f"ask-{n}",
        channel="c",
        sender="planner",
        type=MessageType.COMMAND,
        content=f"task {n}",
        correlation_id=f"c{n}",
        target="role:worker",
        created_at=T0 + timedelta(minutes=n),
    )


def reply(n: int, kind: MessageType) -> Message:
    return Message(
        id=f"reply-{n}",
        channel="c",
        sender="worker",
        type=kind,
        content="because",
        correlation_id=f"c{n}",
        in_reply_to=f"ask-{n}",
        created_at=T0 + timedelta(minutes=100 + n),
    )


def test_nothing_asked_renders_nothing() -> None:
    assert state_part(None) == "" and state_part(fold()) == ""
    assert with_state("Narrative.", "") == "Narrative."


def test_open_and_ended_each_say_where_they_stand() -> None:
    part = state_part(fold(ask(1), ask(2), reply(1, MessageType.DECLINE)))
    lines = part.splitlines()
    assert lines[0] == "Open (1):"
    assert lines[1].startswith("- worker owes planner: “task 2” (open since")
    assert lines[2] == "Ended (the last 1, most recent first):"
    assert lines[3].startswith("- declined: “task 1” (owed by worker to planner")


def test_the_part_is_bounded_whatever_the_state_holds() -> None:
    many = [ask(n) for n in range(20)] + [reply(n, MessageType.DONE) for n in range(10)]
    part = state_part(fold(*many))
    bullets = [line for line in part.splitlines() if line.startswith("- ")]
    assert len(bullets) == OPEN_SHOWN + 1 + ENDED_SHOWN
    assert "- … and 2 more open" in part
    ended = part.split("Ended")[1]
    assert "“task 9”" in ended and "“task 0”" not in ended  # the most recent ended first


def test_the_narrative_and_the_state_part_come_apart_again() -> None:
    part = state_part(fold(ask(1)))
    text = with_state("What was said.", part)
    assert text == f"What was said.\n\n{part}"
    assert narrative_of(text, "What was said.") == "What was said."
    assert narrative_of("An old record's text.", None) == "An old record's text."
