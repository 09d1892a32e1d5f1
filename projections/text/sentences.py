"""A text cut into sentences: `sentences` cleans a message and splits it where a sentence
ends, leading discourse markers ("so", "well", "okay") out and each sentence capitalised;
`rough_sentences` gives the same pieces without the cleaner, for reading the words of every
message cheaply; `states_a_decision` says whether a sentence reports something agreed,
decided or done."""

from __future__ import annotations

import re

from projections.text.cleaning import MARKUP, clean, joined_contractions

__all__ = [
    "SENTENCE_END",
    "rough_sentences",
    "sentences",
    "split_sentences",
    "states_a_decision",
]

SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
# Discourse markers a sentence opens with and that say nothing of it: "so", "okay", "yeah",
# "and" before a word ("So far…", "Well done" and "So much…" are not markers); "right",
# "now", "then", "like", "anyway", "actually" only set off by punctuation ("Right now…",
# "Like the old remote…" say something). Contrast ("but", "though") always stays.
_LEADING_DISCOURSE = re.compile(
    r"^(?:(?:(?:so|well|okay|ok|yeah|yes|alright|and)\b"
    r"(?!\s+(?:far|much|many|long|done|enough)\b)"
    r"|(?:right|now|then|like|anyway|actually)\s*(?=[,.!?]|$))[\s,.!?]*)+",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(?:agreed|agree on|decided|decide on|decision|settled|let's go with|we'll go with|"
    r"we will|we're going to|conclusion|final|chose|choose|done|finished|completed|fixed)\b",
    re.IGNORECASE,
)
# Each of _DECISION's phrases holds one of these: a text without any (most) needs no scan
# of the pattern, which tries every word boundary in turn.
_DECISION_HINTS = (
    "agree",
    "decid",
    "decision",
    "settled",
    "go with",
    "we will",
    "going to",
    "conclusion",
    "final",
    "chose",
    "choose",
    "done",
    "finished",
    "completed",
    "fixed",
)


def rough_sentences(text: str) -> list[str]:
    """The pieces `sentences(text)` would come from, without the cleaner (fillers, hedges,
    stutters, spacing: 150 µs or more for a 1 KB transcript): markup out, cut where a
    sentence ends. For reading the words of every message (`term_words`); a piece is
    cleaned (`sentences`) only when it is to be shown."""
    if "{" in text or "<" in text:
        text = MARKUP.sub(" ", text)
    return SENTENCE_END.split(joined_contractions(text))  # as the cleaner joins them


def sentences(text: str) -> list[str]:
    """Cleaned sentences of a message, leading discourse markers removed, capitalised."""
    return split_sentences(clean(text))


def split_sentences(cleaned: str) -> list[str]:
    """`sentences` of a text already `clean`ed."""
    out = []
    for raw in SENTENCE_END.split(cleaned):
        sentence = _LEADING_DISCOURSE.sub("", raw).strip(" ,;:")
        if any(ch.isalpha() for ch in sentence):
            out.append(sentence[0].upper() + sentence[1:])
    return out


def states_a_decision(sentence: str) -> bool:
    """True for a sentence that says something was agreed, decided or done."""
    low = sentence.lower()
    if not any(map(low.__contains__, _DECISION_HINTS)):
        return False
    return _DECISION.search(sentence) is not None
