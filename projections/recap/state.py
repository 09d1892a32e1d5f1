"""The state part of a recap: the goal, what is open and who owes it, and the next step it
implies, rendered from the commitments fold when the recap is read.

A recap record (`chorus.recaps`) is history only: what was said (`extractive_recap`, or a
model's recap of the transcript). Whoever owns the fold renders this part around it when a
view is read, from the fold as it is then, so a recap never says a commitment is open, or
names a next step, that the state has since ended (an expiry included), however long ago
it was written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from projections.readable import CommitmentView
from projections.recap.extractive import clip, sentence
from projections.text.ids import person

__all__ = ["with_recap_state"]

# Words of what was asked that a goal and an open line quote at most.
GOAL_WORDS = 18
ASKED_WORDS = 10
# Open commitments named at most ("(+N more)" counts the others).
OPEN_NAMED = 2
# How a commitment ended when the next step is to find someone else for the work.
SETBACKS = frozenset({"DECLINED", "FAILED", "EXPIRED"})


def with_recap_state(narrative: str | None, commitments: Sequence[CommitmentView]) -> str:
    """One line: the goal, the recap's `narrative` (None: none to show), where the
    commitments stand, from `commitments` (a fold's, in the state's order:
    `commitment_views`). Each request is quoted once: the open line calls the goal "the
    goal", names the one due soonest first as next, and says a question is owed an answer."""
    owed = [c for c in commitments if c.is_open]
    ended = [c for c in reversed(commitments) if not c.is_open]
    goal = next((c for c in owed if not c.is_question), None)
    parts = [_goal(goal, owed, ended), narrative, _open(owed, ended, goal), _after(owed, ended)]
    return " ".join(part.strip() for part in parts if part and part.strip())


def _asked(commitment: CommitmentView, words: int) -> str:
    return clip(commitment.what().strip("“”"), words).rstrip(".")


def _goal(
    goal: CommitmentView | None, owed: Sequence[CommitmentView], ended: Sequence[CommitmentView]
) -> str | None:
    """The open request for work asked first; with nothing open, the one that ended last,
    with how it ended. Open questions have no goal line: the open line asks them."""
    if goal is not None:
        return sentence(f"Goal: {_asked(goal, GOAL_WORDS)} (asked by {person(goal.requester)})")
    if not owed and ended:
        last = ended[0]
        asked = _asked(last, GOAL_WORDS)
        return sentence(f"Last asked ({person(last.requester)}): {asked} ({last.outcome})")
    return None


def _open(
    owed: Sequence[CommitmentView], ended: Sequence[CommitmentView], goal: CommitmentView | None
) -> str:
    if not owed:
        setbacks = Counter(c.outcome for c in ended if c.state != "FULFILLED" and c.outcome)
        if setbacks:
            counted = ", ".join(f"{count} {outcome}" for outcome, count in setbacks.items())
            return f"Nothing is open ({counted})."
        return "Nothing is open."
    # The one due soonest first (the next step), then the rest in the order they were asked.
    soonest = min(owed, key=lambda c: (c.expires_at is None, c.expires_at or c.since))
    ordered = [soonest, *(c for c in owed if c is not soonest)]
    marks_next = len(owed) > 1 and soonest.expires_at is not None
    shown = "; ".join(
        _owed_line(c, c is goal, c is soonest and marks_next) for c in ordered[:OPEN_NAMED]
    )
    more = f" (+{len(owed) - OPEN_NAMED} more)" if len(owed) > OPEN_NAMED else ""
    return sentence(f"Open: {shown}{more}")


def _owed_line(commitment: CommitmentView, is_goal: bool, is_next: bool) -> str:
    """ "coder owes alice “task 3” (due 12:09 UTC, next)", "… the goal"; a question:
    "planner asked rey “Is it frozen”, no answer yet"."""
    notes = [f"due {commitment.expires_at:%H:%M} UTC"] if commitment.expires_at else []
    if is_next:
        notes.append("next")
    after = f" ({', '.join(notes)})" if notes else ""
    if commitment.is_question:
        asked = f" {person(commitment.obligor)}" if commitment.obligor else ""
        what = clip(commitment.what(), ASKED_WORDS)
        return f"{person(commitment.requester)} asked{asked} {what}, no answer yet{after}"
    what = "the goal" if is_goal else clip(commitment.what(), ASKED_WORDS)
    return f"{commitment.owes()} {what}{after}"


def _after(owed: Sequence[CommitmentView], ended: Sequence[CommitmentView]) -> str | None:
    """After a setback with nothing open, find another way; else none (the open line names
    what is next, and the recap's own "Planned" step, if any, stands)."""
    if not owed and ended and ended[0].state in SETBACKS:
        return "Next: hand the work to someone else or change the plan."
    return None
