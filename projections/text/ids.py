"""Ids out of what a person reads: `scrub_ids` takes UUIDs and hex ids (message ids,
commit-like hashes, digests) out of a text, with the brackets and joiners that framed them
and nothing else; `has_ids` says cheaply when a text certainly holds none. A sender or
target reads as a name the same way: `address_name` drops its address kind
(`role:reviewer` -> `reviewer`), `person` its ids too."""

from __future__ import annotations

import re

__all__ = ["address_name", "has_ids", "person", "scrub_ids"]

_UUID = re.compile(
    r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b", re.IGNORECASE
)
# A run of 8+ hex characters with both a digit and a letter: message ids (uuid4 hex), short
# commit-like hashes, expiry-event digests. Plain numbers and ordinary words stay.
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.IGNORECASE)
# Each id is marked first, then taken out with what framed it and nothing else: brackets
# around it alone, the joiners right before it ("reviewer-", "#", "id: ", "/") and those
# right after it when a space or punctuation follows. The mark is a noncharacter.
_ID_MARK = "\ufffe"
_ID_SITE = re.compile(
    r"[(\[{<]\s*[-_:/#]*\ufffe[-_:/#]*\s*[)\]}>]"
    r"|(?:[-_:/#]+\s*)?\ufffe(?:[-_:/#]+(?=\s|$|[,.;:!?)\]}>]))?"
)
# Any space an id left before punctuation or a closing bracket (not `clean`'s
# `_SPACED_PUNCT`, which meets one space only and leaves brackets be).
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)])")
# Both id patterns need eight hex characters in a row; most messages have none, and this
# one scan is cheaper than either pattern (scrub_ids runs on every message, for titles).
# Both cases spelled out rather than IGNORECASE, which scans at half the speed. `words`
# reads it too (`term_words` scrubs a sentence only when it has such a run).
HEX_RUN = re.compile(r"[0-9a-fA-F]{8}")
_DIGITS = "0123456789"


def has_ids(text: str) -> bool:
    """False when `text` certainly holds no id `scrub_ids` would take out: both patterns
    need eight hex characters in a row and, but for an all-letter UUID, a digit; a text
    without a digit (most) needs no scan of the pattern."""
    if not any(digit in text for digit in _DIGITS):
        return False
    return HEX_RUN.search(text) is not None


def scrub_ids(text: str) -> str:
    """`text` without UUIDs or hex ids, on one line. What an id named is lost on purpose:
    a person cannot act on it, and the surrounding words usually say what it was."""
    if HEX_RUN.search(text) is not None:
        marked = _HEX_ID.sub(_ID_MARK, _UUID.sub(_ID_MARK, text))
        if marked != text:
            text = _SPACE_BEFORE_PUNCT.sub(r"\1", _ID_SITE.sub("", marked))
    return " ".join(text.split())


_ADDRESS = re.compile(r"^(?:instance|capability|role):")


def address_name(address: str) -> str:
    """A sender or target without its address kind: `role:reviewer` -> `reviewer`."""
    return _ADDRESS.sub("", address.strip())


def person(name: str | None) -> str:
    """A sender or target as a person reads it: `role:reviewer` -> `reviewer`."""
    if not name:
        return "anyone"
    return scrub_ids(address_name(name)).strip("-_ ") or "an agent"
