"""A recap's state part, rendered from the commitments fold when the recap is read: the goal,
what is open and who owes it, the next step; never an ended commitment as open."""

from __future__ import annotations

from datetime import timedelta

from projections.readable import CommitmentView
from projections.recap import with_recap_state
from tests.context_checks import contradictions
from tests.unit.projections.recap.support import T0


def commitment(
    asked: str,
    state: str = "OPEN",
    obligor: str | None = "role:coder",
    requester: str = "alice",
    expires_in: float | None = None,
    kind: str = "COMMAND",
) -> CommitmentView:
    return CommitmentView(
        correlation_id=asked,
        kind=kind,
        state=state,
        requester=requester,
        obligor=obligor,
        asked=asked,
        since=T0,
        expires_at=T0 + timedelta(seconds=expires_in) if expires_in is not None else None,
    )


def test_an_open_request_is_the_goal_and_said_once() -> None:
    text = with_recap_state(
        "Done: coder schema migrated.",
        [commitment("write tests for the login flow", expires_in=600)],
    )
    assert text == (
        "Goal: write tests for the login flow (asked by alice). Done: coder schema migrated. "
        "Open: coder owes alice the goal (due 12:10 UTC)."
    )


def test_an_open_question_is_owed_an_answer_not_a_delivery() -> None:
    asked = "was this a paid photoshoot?"
    text = with_recap_state(
        "person-1: I finished editing a bunch of engagement pictures.",
        [commitment(asked, obligor=None, requester="person-2", kind="QUERY")],
    )
    assert text == (
        "person-1: I finished editing a bunch of engagement pictures. "
        "Open: person-2 asked “was this a paid photoshoot?”, no answer yet."
    )
    named = commitment("Is it frozen", obligor="instance:rey", requester="planner", kind="QUERY")
    expected = "Open: planner asked rey “Is it frozen”, no answer yet."
    assert with_recap_state(None, [named]) == expected


def test_the_recap_of_an_expired_request_says_it_expired_not_that_it_is_owed() -> None:
    """The bug of issue 31: a recap written while the request was open, read after it
    expired, said "Open: reviewer owes planner …. Next: reviewer to deliver …"."""
    asked = "Who can review the release notes?"
    narrative = "The channel is about release notes. Done: writer drafted the notes."
    before = [commitment(asked, obligor="role:reviewer", requester="planner", expires_in=60)]
    after = [commitment(asked, "EXPIRED", obligor="role:reviewer", requester="planner")]
    assert "Open: reviewer owes planner" in with_recap_state(narrative, before)
    text = with_recap_state(narrative, after)
    assert "owes" not in text and "deliver" not in text
    assert "Last asked (planner): Who can review the release notes? (expired)." in text
    assert "Nothing is open (1 expired)." in text
    assert "Next: hand the work to someone else or change the plan." in text
    views = after  # what the fold says now: no line contradicts it
    assert contradictions(text, views) == []


def test_many_open_requests_are_counted_and_the_soonest_due_is_named_first_as_next() -> None:
    owed = [commitment(f"task {n}", expires_in=600 - n) for n in range(4)]
    text = with_recap_state(None, owed)
    assert text == (
        "Goal: task 0 (asked by alice). Open: coder owes alice “task 3” (due 12:09 UTC, next); "
        "coder owes alice the goal (due 12:10 UTC) (+2 more)."
    )


def test_all_fulfilled_says_nothing_is_open_and_leaves_the_next_step_to_the_recap() -> None:
    done = [commitment("ship it", "FULFILLED")]
    text = with_recap_state("Planned (alice): we should tag the release.", done)
    assert text == (
        "Last asked (alice): ship it (fulfilled). Planned (alice): we should tag the release. "
        "Nothing is open."
    )


def test_without_any_commitment_only_the_narrative_and_nothing_open() -> None:
    assert with_recap_state("The channel is about lunch.", []) == (
        "The channel is about lunch. Nothing is open."
    )
    assert with_recap_state(None, []) == "Nothing is open."
