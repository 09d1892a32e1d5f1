"""The state part of a published summary: what is open and what ended, rendered from the
commitments projection's state, never from a summariser's own reading of the messages.

A summary record's text is its narrative (what was said: the summariser's output) followed
by this part. The narrative can be minutes old; this part is rendered again whenever the
commitments change (the summaries stage refreshes the record), so a consumer of the
summaries topic never keeps an ended commitment listed as open once a channel is quiet.
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
    "state_part_of",
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


def state_part_of(text: str, narrative: str | None) -> str:
    """The state part of a record's text ("" for a record without a narrative field)."""
    if narrative is None or not text.startswith(narrative.strip()):
        return ""
    return text[len(narrative.strip()) :].strip()


def narrative_of(text: str, narrative: str | None) -> str:
    """The narrative of a record: its `narrative` field, or (a record written before the
    field existed) its whole text."""
    return text if narrative is None else narrative
