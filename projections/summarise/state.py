"""The state part of a published summary: what is open and what ended, rendered from the
commitments projection's state, never from a summariser's own reading of the messages.

A summary record on the topic is its narrative only (what was said: the summariser's
output). Whoever owns the fold renders this part beside it when a summary is read (the
worker's summary view), from the fold as it is then, so no summary shown keeps an ended
commitment listed as open, however old its narrative.
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.readable import CommitmentView, commitment_views

__all__ = [
    "ENDED_SHOWN",
    "OPEN_SHOWN",
    "STATE_HEADERS",
    "narrative_of",
    "state_part",
    "with_state",
]

# Lines the part shows at most: it is bounded whatever the channel's state holds.
OPEN_SHOWN = 8
ENDED_SHOWN = 4
OPEN_HEADER = "Open ("
ENDED_HEADER = "Ended ("
# The headers the part starts its sections with (a reader of an old text skips them).
STATE_HEADERS = (OPEN_HEADER, ENDED_HEADER)
_SEPARATOR = "\n\n"


def state_part(commitments: object) -> str:
    """The open commitments (oldest first) and the last ended ones (most recent first),
    each line saying where it stands now; "" before anything was asked."""
    views = commitment_views(commitments)
    opened = [v for v in views if v.is_open]
    ended = [v for v in reversed(views) if not v.is_open]
    lines: list[str] = []
    if opened:
        lines.append(f"{OPEN_HEADER}{len(opened)}):")
        lines.extend(_bullets(opened, OPEN_SHOWN, "open"))
    if ended:
        lines.append(f"{ENDED_HEADER}the last {min(len(ended), ENDED_SHOWN)}, most recent first):")
        lines.extend(_bullets(ended, ENDED_SHOWN, None))
    return "\n".join(lines)


def _bullets(views: Sequence[CommitmentView], shown: int, more: str | None) -> list[str]:
    bullets = [f"- {view.line()}" for view in views[:shown]]
    if more is not None and len(views) > shown:
        bullets.append(f"- … and {len(views) - shown} more {more}")
    return bullets


def with_state(narrative: str, part: str) -> str:
    """The record's text: the narrative, then the state part."""
    return _SEPARATOR.join(piece for piece in (narrative.strip(), part) if piece)


def narrative_of(text: str, narrative: str | None) -> str:
    """The narrative of a record: its `narrative` field, or (a record written before the
    field existed) its whole text."""
    return text if narrative is None else narrative
