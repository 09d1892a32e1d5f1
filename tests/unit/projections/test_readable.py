"""Commitments as a person reads them: one reading of the model and of its dump."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from projections.commitments import CommitmentProjection, CommitmentsState
from projections.model import Message, MessageType
from projections.projection import dump_state
from projections.readable import (
    OUTCOME_WORDS,
    commitment_views,
    ended_commitments,
    is_agent,
    open_commitments,
)
from tests.factories import numbered

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)


def message(n: int, kind: MessageType, cid: str, **fields: object) -> Message:
    fields.setdefault("content", f"message {n}")
    return numbered(n, kind, start=T0, every=timedelta(minutes=1), correlation_id=cid, **fields)


def state() -> CommitmentsState:
    projection = CommitmentProjection()
    folded = projection.identity()
    for one in [
        message(0, MessageType.COMMAND, "a", target="role:worker-a", content="Write the docs"),
        message(1, MessageType.COMMAND, "b", target="role:worker-b", content="Port the lexer"),
        message(2, MessageType.QUERY, "c", target="instance:rey", content="Is it frozen"),
        message(3, MessageType.DECLINE, "b", sender="worker-b", in_reply_to="m1"),
        message(
            4, MessageType.HANDOFF, "a", sender="worker-a", in_reply_to="m0", target="role:worker-c"
        ),
    ]:
        folded = projection.apply(folded, one)
    return folded


def test_the_model_and_its_dump_read_the_same() -> None:
    assert commitment_views(state()) == commitment_views(dump_state(state()))
    assert commitment_views(None) == [] and commitment_views({}) == []


def test_open_oldest_first_and_ended_most_recent_first() -> None:
    assert [v.correlation_id for v in open_commitments(state())] == ["c", "a"]
    ended = ended_commitments(state())
    assert [(v.correlation_id, v.state) for v in ended] == [("a", "DELEGATED"), ("b", "DECLINED")]
    assert ended_commitments(state(), limit=1)[0].state == "DELEGATED"


def test_every_line_says_where_its_commitment_stands() -> None:
    views = {v.id: v for v in commitment_views(state())}
    # A question is owed an answer; a command, what it asked.
    assert (
        views["m2"]
        .line()
        .startswith("rey owes planner an answer: “Is it frozen” (open since 2026-03-02")
    )
    assert re.search(r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)$", views["m2"].line())
    assert views["m1"].line().startswith("declined: “Port the lexer” (owed by worker-b to planner")
    assert views["m0"].line().startswith("delegated to worker-c: “Write the docs”")
    assert views["m4"].asked == "Write the docs"  # what is owed is still what was first asked
    assert {v.outcome for v in views.values() if not v.is_open} <= set(OUTCOME_WORDS.values())


def test_an_agent_is_named_by_any_of_its_addresses() -> None:
    assert is_agent("role:worker-a", "worker-a") and is_agent("worker-a", "instance:worker-a")
    assert not is_agent("role:worker-a", "worker-b") and not is_agent(None, "worker-a")
    delegated = next(v for v in commitment_views(state()) if v.state == "DELEGATED")
    assert delegated.involves("worker-c") and delegated.involves("planner")
    assert not delegated.involves("rey")


def test_what_was_asked_closes_what_the_excerpt_cut_inside() -> None:
    view = commitment_views(state())[0]
    cut_short = replace(view, asked="Port the lexer (and the parser…")
    assert cut_short.what() == "“Port the lexer (and the parser…)”"
    assert replace(view, asked="Port it (now)").what(9) == "“Port it…”"
