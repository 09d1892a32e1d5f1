"""A channel's title, what it is about: its top keyphrases joined ("Remote control, button,
battery") within `TITLE_MAX_CHARS`; before any phrase repeats, its first message with a
word naming a subject stands in, ids and fillers out and cut to fit; a channel of nothing but
backchannel has none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from projections.text.cleaning import clean
from projections.text.ids import scrub_ids
from projections.text.keyphrases import top_keyphrases
from projections.text.lines import cut
from projections.text.words import is_backchannel

__all__ = ["TITLE_MAX_CHARS", "title"]

TITLE_MAX_CHARS = 60


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def title(
    counts: Mapping[str, Sequence[int]],
    fallback: str | None = None,
    max_chars: int = TITLE_MAX_CHARS,
) -> str | None:
    """What the channel is about, from its keyphrases: "Remote control, button, battery".

    Before any phrase repeats, the first message with content words (`fallback`) stands in,
    cut to `max_chars`; a channel of nothing but backchannel has no title.
    """
    phrases = top_keyphrases(counts)
    shown: list[str] = []
    for phrase in phrases:
        if len(", ".join([*shown, phrase])) <= max_chars:
            shown.append(phrase)
    if shown:
        return _capitalised(", ".join(shown))
    if fallback is None or is_backchannel(fallback):
        return None
    return cut(clean(scrub_ids(fallback)), max_chars)
