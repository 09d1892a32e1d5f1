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
# A first message stands in cut to `max_chars`, so only its head is read: this many times
# `max_chars` of it, to a space. Cleaning changes text only near what it matches (a repeat
# of two words at most, a markup tag of 40 characters, a filler or an id with what framed
# it), so what it does at the head's end cannot reach what shows while the head cleans to
# more than `_HEAD_CLEANED` times `max_chars`; a head that cleans to less (fillers, repeats)
# or says nothing is read whole. The context role titles every channel's first message.
_HEAD_READ = 6
_HEAD_CLEANED = 4


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
    phrases = top_keyphrases(counts) if counts else []
    shown: list[str] = []
    for phrase in phrases:
        if len(", ".join([*shown, phrase])) <= max_chars:
            shown.append(phrase)
    if shown:
        return _capitalised(", ".join(shown))
    if fallback is None:
        return None
    head = _head(fallback, _HEAD_READ * max_chars)
    if head is not None and not is_backchannel(head):
        cleaned = clean(scrub_ids(head))
        if len(cleaned) > _HEAD_CLEANED * max_chars:
            return cut(cleaned, max_chars)
    if is_backchannel(fallback):
        return None
    return cut(clean(scrub_ids(fallback)), max_chars)


def _head(text: str, chars: int) -> str | None:
    """The first `chars` characters of `text` back to a space (no word cut in two); None
    when `text` is no longer, or has no space there."""
    if len(text) <= chars:
        return None
    head, space, _ = text[: chars + 1].rpartition(" ")
    return head if space else None
