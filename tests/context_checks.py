"""What "the context never contradicts the fold" means, checked on any rendered text: the
unit property test and the broker tests share it."""

from __future__ import annotations

from collections.abc import Sequence

from projections.readable import CommitmentView

# Headings under which every commitment named must be open.
OPEN_HEADINGS = ("Open", "Yours")


def ended_outcomes(views: Sequence[CommitmentView]) -> dict[str, set[str]]:
    """What was asked -> how the commitments that asked it ended (a hand-off chain shares
    its ask: the parent was delegated, the child may have been fulfilled)."""
    found: dict[str, set[str]] = {}
    for view in views:
        if not view.is_open and view.asked and view.outcome:
            found.setdefault(view.asked, set()).add(view.outcome)
    return found


def contradictions(text: str, views: Sequence[CommitmentView]) -> list[str]:
    """Lines of `text` that name an ended commitment (by what was asked) without saying how
    it ended, and lines under an "Open" heading that name an ended one. A heading is any
    line that is not a bullet ("- ") or a message line ("[")."""
    wrong = []
    ended = ended_outcomes(views)
    still_open = {v.asked for v in views if v.is_open and v.asked}
    heading = ""
    for line in text.splitlines():
        if not line.startswith(("- ", "[")):
            heading = line
        for asked, outcomes in ended.items():
            if asked not in line or asked in still_open:
                continue
            if not any(outcome in line for outcome in outcomes) or heading.startswith(
                OPEN_HEADINGS
            ):
                wrong.append(line)
    return wrong
