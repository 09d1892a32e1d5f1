"""What "the context never contradicts the fold" means, checked on any rendered text: the
unit property test and the broker tests share it."""

from __future__ import annotations

from collections.abc import Sequence

from projections.readable import CommitmentView
from projections.summarise.pending import told_request
from projections.text.lines import ELLIPSIS, parse_message_line

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


def told_as_history(line: str) -> str | None:
    """The words of the request a narrative line tells as history ("- [planner] asked
    worker-b: Port the lexer…" -> "Port the lexer"), None for any other line."""
    parsed = parse_message_line(line.removeprefix("- "))
    if parsed is None:
        return None
    framing, words = told_request(parsed[1])
    words = words.removesuffix(ELLIPSIS).strip()
    return words if framing and words else None


def contradictions(text: str, views: Sequence[CommitmentView]) -> list[str]:
    """Lines of `text` that name an ended commitment (by what was asked) without saying how
    it ended, and lines under an "Open" heading that name an ended one. A line that tells
    the request as history ("[planner] asked worker-b: …", true whatever came of it) says
    how it was asked, not that it is open. A heading is any line that is not a bullet ("- ")
    or a message line ("[")."""
    wrong = []
    ended = ended_outcomes(views)
    still_open = {v.asked for v in views if v.is_open and v.asked}
    heading = ""
    for line in text.splitlines():
        if not line.startswith(("- ", "[")):
            heading = line
        told = told_as_history(line)
        for asked, outcomes in ended.items():
            if asked in still_open:
                continue
            history = told is not None and asked.startswith(told)
            if asked not in line and not history:
                continue
            said = history or any(outcome in line for outcome in outcomes)
            if not said or heading.startswith(OPEN_HEADINGS):
                wrong.append(line)
    return wrong
