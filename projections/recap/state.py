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

# Words of what was asked that a goal, an open line and a next step quote at most.
GOAL_WORDS = 18
ASKED_WORDS = 10
# Open commitments named at most ("(+N more)" counts the others).
OPEN_NAMED = 2
# How a commitment ended when the next step is to find someone else for the work.
SETBACKS = frozenset({"DECLINED", "FAILED", "EXPIRED"})


def with_recap_state(narrative: str | None, commitments: Sequence[CommitmentView]) -> str:
    """One line: the goal, the recap's `narrative` (None: none to show), where the
    commitments stand and the next step, from `commitments` (a fold's, in the state's
    order: `commitment_views`)."""
    owed = [c for c in commitments if c.is_open]
    ended = [c for c in reversed(commitments) if not c.is_open]
    parts = [_goal(owed, ended), narrative, _open(owed, ended), _next_step(owed, ended)]
    return " ".join(part.strip() for part in parts if part and part.strip())


def _asked(commitment: CommitmentView, words: int) -> str:
    return clip(commitment.what().strip("“”"), words).rstrip(".")


def _goal(owed: Sequence[CommitmentView], ended: Sequence[CommitmentView]) -> str | None:
    """The open request asked first; else the one that ended last, with how it ended."""
    if owed:
        first = owed[0]
        return sentence(f"Goal: {_asked(first, GOAL_WORDS)} (asked by {person(first.requester)})")
    if ended:
        last = ended[0]
        asked = _asked(last, GOAL_WORDS)
        return sentence(f"Last asked ({person(last.requester)}): {asked} ({last.outcome})")
    return None


def _open(owed: Sequence[CommitmentView], ended: Sequence[CommitmentView]) -> str:
    if not owed:
        setbacks = Counter(c.outcome for c in ended if c.state != "FULFILLED" and c.outcome)
        if setbacks:
            counted = ", ".join(f"{count} {outcome}" for outcome, count in setbacks.items())
            return f"Nothing is open ({counted})."
        return "Nothing is open."
    shown = "; ".join(f"{c.owes()} {clip(c.what(), ASKED_WORDS)}" for c in owed[:OPEN_NAMED])
    more = f" (+{len(owed) - OPEN_NAMED} more)" if len(owed) > OPEN_NAMED else ""
    return sentence(f"Open: {shown}{more}")


def _next_step(owed: Sequence[CommitmentView], ended: Sequence[CommitmentView]) -> str | None:
    """Deliver the open request due soonest; after a setback, find another way; else none
    (the recap's own "Planned" step, if any, stands)."""
    if owed:
        soonest = min(owed, key=lambda c: (c.expires_at is None, c.expires_at or c.since))
        owner = person(soonest.obligor) if soonest.obligor else "someone"
        due = f" before {soonest.expires_at:%H:%M} UTC" if soonest.expires_at else ""
        return sentence(f"Next: {owner} to deliver {clip(soonest.what(), ASKED_WORDS)}{due}")
    if ended and ended[0].state in SETBACKS:
        return "Next: hand the work to someone else or change the plan."
    return None
