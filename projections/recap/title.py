"""A channel's title and keyphrases, read when a recap or a title is asked for.

Nothing here runs per message: a stage keeps no keyphrase counts. What a channel is about
comes from two things already at hand when a recap is due or a view asks: its latest
summary (the whole channel, condensed: the digest's key terms and the sentences it keeps)
and its recent window (what it is about now). Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.model import Message
from projections.summarise.digest import DISCUSSED_HEADER, KEY_TERMS_HEADER, PARTICIPANTS_HEADER
from projections.text.keyphrases import KeyphraseCounts, count_keyphrases
from projections.text.lines import parse_message_line
from projections.text.titles import title

# Lines of a summary that are its structure, not what was said (see `summary_material`).
SUMMARY_STRUCTURE = (PARTICIPANTS_HEADER, DISCUSSED_HEADER)


def channel_keyphrases(window: Sequence[Message], summary: str | None = None) -> KeyphraseCounts:
    """The channel's keyphrase counts: what its latest summary says (`summary_material`)
    and its recent window's messages, counted as one text (bounded, `count_keyphrases`)."""
    said = [m.content for m in window if m.content]
    # A summary line that quotes a message of the window (the verbatim tier's do) is not
    # counted twice: a phrase repeats when the channel says it again, not when it is quoted.
    quoted = [line for line in summary_material(summary) if not _quotes(line, said)]
    return count_keyphrases({}, ". ".join([*quoted, *said]))


# How much of a summary line is looked for in the window's messages (cut to 300 characters).
QUOTE_CHARS = 120


def _quotes(line: str, said: Sequence[str]) -> bool:
    head = line[:QUOTE_CHARS]
    return any(head in content for content in said)


def channel_title(
    window: Sequence[Message],
    opening: str | None,
    summary: str | None = None,
    keyphrases: KeyphraseCounts | None = None,
) -> str | None:
    """What the channel is about: the top `channel_keyphrases` (`keyphrases`, when the
    caller counted them already); before any phrase repeats, its first message that says
    something (`opening`); None for a channel of nothing but backchannel."""
    if keyphrases is None:
        keyphrases = channel_keyphrases(window, summary)
    return title(keyphrases, fallback=opening)


def summary_material(summary: str | None) -> list[str]:
    """What a summary says, without its structure: no participants line, no headers, no
    `[sender]` tags; the digest's key terms stay (they are the whole channel's)."""
    out = []
    for raw in (summary or "").splitlines():
        line = raw.strip().removeprefix("- ")
        if not line or line.startswith(SUMMARY_STRUCTURE):
            continue
        line = line.removeprefix(KEY_TERMS_HEADER)
        parsed = parse_message_line(line)
        out.append(parsed[1] if parsed else line)
    return out
