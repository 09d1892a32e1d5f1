"""The one transcript cleaner: `clean` takes the noise of spoken text out (markup such as
`{disfmarker}`, fillers and laughter, "you know" and "I mean" where they are fillers,
stutters, split contractions, spaces before punctuation) and leaves the words as they were
said. What carries meaning stays: hedges and modality ("I think", "kind of", "I guess"),
negations, contrast, a question's form, and "you know" or "I mean" used as verbs ("you know
what X is"). Each pass is skipped when its words are not there, as the cleaner runs on
every message summarised. The markup and contraction patterns are shared with the rough
readers of `sentences` and `words`."""

from __future__ import annotations

import operator
import re

from projections.text.memo import WORD_CHARS, short_texts

__all__ = ["LAUGHTER", "clean", "joined_contractions"]

MARKUP = re.compile(r"\{[a-z_]+\}|<[^<>]{1,40}>")
# Laughter written out: "haha", "ahah", "hehe", "lol", "lmao", "rofl". Never a word, so
# never a subject (`words.content_key`) and, where it stands in a sentence, a filler.
LAUGHTER = r"a?(?:h[ae]){2,}h?|ah(?:ah)+h?|h[ae]h|l+o+l+(?:o+l+)*|lmf?ao+|rofl"
# The lookaheads name each pattern's possible first letters and the possessive `\w++` skips
# backtracking that can never match: the same matches, found in about half the time (the
# cleaner runs on every message summarised). A filler starts a word of its own: never the
# "m" of "I'm" nor a part of a hyphenated word.
_FILLER = re.compile(
    r"(?<![\w'’-])(?=[uhmaoelr])(?:u+m+|u+h+|h+m+|m+-?h+m+|m+|uh-huh|um-hmm|ah+|oh+|er+|erm|eh|"
    r"huh|mm-hmm|" + LAUGHTER + r")\b[\s,]*",
    re.IGNORECASE,
)
# "you know" and "I mean" are fillers where they stand apart: followed by a comma ("You
# know, the parser…", "…, I mean, it is…"), or after a comma at the end of a sentence ("it
# is slow, you know."). Elsewhere they are verbs ("you know what X is", "what I mean is")
# and stay.
_PARENTHETICAL = re.compile(
    r"\b(?=[yi])(?:you know|i mean)\s*,[\s,]*|,\s*(?:you know|i mean)\s*(?=[.!;]|$)",
    re.IGNORECASE,
)
_PARENTHETICALS = ("you know", "i mean")
# A false start: a word begun and begun again ("th the", "w we", "s sort of"): one or two
# lower-case letters that are no word of their own, then a word they begin. Chat's "u" and
# "r" (you, are) are words there.
_WORDS_OF_TWO = frozenset(
    re.findall(
        r"\w+",
        "a i u r am an as at be by do go he hi if in is it me my no of ok on or so to up us we",
    )
)
_FALSE_START = re.compile(r"(?<![\w'’-])([a-z]{1,2})\s+(?=\1[a-z])")
_REPEATED_WORD = re.compile(r"\b(\w[\w'’]*+(?:\s++\w[\w'’]*+)?)(?:\s+\1\b)+", re.IGNORECASE)
# A word as _REPEATED_WORD reads it ("don't" one word, where `_TOKEN` reads two).
_WORD = re.compile(r"\w[\w'’]*")
# What `clean` looks for before a pass: the \w tokens (a filler or a repeat is made of them);
# a token that is a filler, or starts one ("uh" of "uh-huh").
_TOKEN = re.compile(r"\w+")
_FILLER_TOKEN = re.compile(
    r"u+m+|u+h+|h+m+|m+h+m+|m+|ah+|oh+|er+|erm|eh|huh|" + LAUGHTER, re.IGNORECASE
)
_filler_token = short_texts(maxsize=4096, max_chars=WORD_CHARS)(_FILLER_TOKEN.fullmatch)
# These two run once spaces are normalised (one space between words), so a literal space
# is every space they can meet, and the engine scans for it instead of trying `\s` anywhere.
_SPLIT_CONTRACTION = re.compile(r" ('(?:re|s|ll|ve|d|m)|n't)\b", re.IGNORECASE)
_SPACED_PUNCT = re.compile(r" ([,.?!;:])")
# The same as _SPLIT_CONTRACTION before spaces are normalised (`joined_contractions`).
_SPLIT_CONTRACTION_ANY = re.compile(r"\s+('(?:re|s|ll|ve|d|m)|n't)\b", re.IGNORECASE)
# Punctuation said twice (", ,", ". ,") is said once; a trailing-off "..." stays.
_REPEATED_PUNCT = re.compile(r"\.{3,}|([,.?!;:])(?:\s*[,.;:])+")
_TRAILING_OFF = "..."
# `sub` with a template such as r"\1" expands it in Python for every match; a C callable
# returning the group does the same without a Python frame.
FIRST_GROUP = operator.methodcaller("group", 1)


def joined_contractions(text: str) -> str:
    """`text` with its split contractions joined ("that 's" -> "that's"), spaces as they
    were elsewhere: what the rough readers of `sentences` and `words` see of them.

    Each contraction the pattern joins has its ' after a space, or after an "n" after one;
    most apostrophes are inside a word ("don't"), and looking at the character before each
    is cheaper than the pattern's scan of every space."""
    at = text.find("'", 1)
    while at != -1:
        before = text[at - 1]
        if before.isspace() or (before in "nN" and at > 1 and text[at - 2].isspace()):
            return _SPLIT_CONTRACTION_ANY.sub(FIRST_GROUP, text)
        at = text.find("'", at + 1)
    return text


def _false_start(found: re.Match[str]) -> str:
    return found.group(0) if found.group(1) in _WORDS_OF_TWO else ""


def _punctuation_once(found: re.Match[str]) -> str:
    return found.group(1) or _TRAILING_OFF


def _may_repeat(words: list[str]) -> bool:
    """Whether some word equals the next one or the one after (a repeat may be there)."""
    return any(map(operator.eq, words, words[1:])) or any(map(operator.eq, words, words[2:]))


def clean(text: str) -> str:
    """Transcript noise out: markup, fillers, laughter, "you know"/"I mean" where they are
    fillers, stutters, spaces before punctuation.

    A pass that cannot match is skipped (each is looked for in the words first): the same
    text, at about half the cost on a sentence (the digest cleans the ones it may show).
    """
    if "{" in text or "<" in text:
        text = MARKUP.sub(" ", text)
    low = text.lower()
    tokens = _TOKEN.findall(low)
    if any(map(_filler_token, tokens)):
        text = _FILLER.sub(" ", text)
    if any(phrase in low for phrase in _PARENTHETICALS):
        text = _PARENTHETICAL.sub(" ", text)
    if any(len(token) <= 2 and token not in _WORDS_OF_TWO for token in tokens):
        text = _FALSE_START.sub(_false_start, text)
    if len(text) != len(low):  # a filler or a false start went: what is left may repeat
        tokens = _TOKEN.findall(text.lower())
    text = " ".join(text.split())
    if "'" in text:
        text = _SPLIT_CONTRACTION.sub(FIRST_GROUP, text)
    # A repeat is a word, or two, again at once: some token equals the next or the one after,
    # counting words as the tokens read them or, with an apostrophe, as the pass reads them
    # ("I don't I don't" is three tokens apart, two words).
    if _may_repeat(tokens) or (
        ("'" in text or "’" in text) and _may_repeat(_WORD.findall(text.lower()))
    ):
        text = _REPEATED_WORD.sub(FIRST_GROUP, text)
    text = _SPACED_PUNCT.sub(FIRST_GROUP, text)
    text = _REPEATED_PUNCT.sub(_punctuation_once, text)
    return text.strip(" ,;:")
