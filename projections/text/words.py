"""Words that can name a subject: one stopword list (`STOPWORDS`), one word normaliser
(`content_key`: lower case, a light plural fold), the content words of a text
(`content_words`), of a rough sentence as the cleaner would leave them (`term_words`,
fillers and stutters out) and of all a text's sentences in one scan (`sentence_words`);
`is_backchannel` is a text with none ("yeah", "I think so, yeah.")."""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Sequence

from projections.text.cleaning import LAUGHTER, clean, joined_contractions
from projections.text.ids import HEX_RUN, scrub_ids
from projections.text.memo import WORD_CHARS, short_texts

__all__ = [
    "STOPWORDS",
    "WORD",
    "content_key",
    "content_words",
    "is_backchannel",
    "may_stutter",
    "sentence_words",
    "term_key",
    "term_words",
]

# Function words, contractions and what people say while thinking: none of it names a
# subject. The one list: the digest's term model and the keyphrases both read it (a union of
# their two former lists; on QMSum it raised the digest's ROUGE-1/2 on train and val alike).
# Reporting verbs ("asked", "said") name no subject either: a narrated request's "asked
# worker-a:" is how it was said, not what about.
_STOPWORD_TEXT = """
    a able about above across actually after again against ago agree ah all already alright
    also am an and another any anybody anyone anything anyway anyways are aren aren't around
    as at available away back bad basically be because been before being below best better
    between big bit both but by bye call called came can can't cannot certainly check
    checked come comes coming cool could could've couldn't couple course day days definitely
    did didn't different do does doesn't doing don don't done down during each eh eight
    either else enough er erm even every everybody everyone everything exactly fact far feel
    felt few fewer find fine first five for found four from further gave get gets getting
    give gives go goes going gone gonna good got gotta great guess guy guys had hadn't has
    hasn't have haven't having he he'd he'll he's hello her here here's hers herself hey hi
    high him himself his hm hmm hour hours how how's however huh i i'd i'll i'm i've idea
    ideas if important in interesting into is isn isn't it it's its itself just keep kept
    kind kinda knew know known last less let let's lets like little long look looked looking
    looks lose lot lots low made make makes making many may maybe me mean means meant
    meeting meetings mhm might mine minute minutes mm mmm more most move moved moving much
    must mustn't my myself need needed needs new next nice nine no nope nor not nothing now
    number numbers of off oh ok okay old on once one only or other ought our ours ourselves
    out over own part people perhaps person please point possible pretty probably put puts
    question quite ran read reading real really right run running said same saw say saying
    says second see seem seemed seems seen set seven shall shan't she she'd she'll she's
    short should should've shouldn't since six small so some somebody someone something
    sorry sort sorta sound sounds start started still stop stuff such sure take takes talk
    talked talking talks tell tells ten than thank thanks that that'll that's the their
    theirs them themselves then there there'll there's these they they'd they'll they're
    they've thing things think thinking third this those though thought three through time
    times to today told tomorrow too took totally tried tries try trying two uh uhhuh um umm
    under unless until up upon us use used uses using very wait waiting wanna want wanted
    wants was wasn't way ways we we'd we'll we're we've week weeks well went were weren't
    what what's whatever whatsoever when when's where where's whether which while who who's
    whole whom whose why why's will with within without wo won't work worked working works
    would would've wouldn't wow yeah year years yep yes yesterday yet you you'd you'll
    you're you've your yours yourself yourselves yup zero
    answered ask asked asking asks dunno mentioned replied
"""
# Chat writes contractions without their apostrophe ("thats", "doesnt", "Ill"): the same
# words, but for those that are words of their own ("shell", "hell", "shed", "wed").
_CONTRACTION_WORDS = frozenset({"hell", "shell", "shed", "wed"})
_STOPWORD_LIST = _STOPWORD_TEXT.split()
STOPWORDS = frozenset(_STOPWORD_LIST) | (
    frozenset(word.replace("'", "") for word in _STOPWORD_LIST if "'" in word) - _CONTRACTION_WORDS
)
# Laughter ("haha", "lol"), and a word drawn out ("coooool", "sooo"): never a subject.
_LAUGHTER = re.compile(LAUGHTER, re.IGNORECASE)
_DRAWN_OUT = re.compile(r"(\w)\1{2,}")
# A letter, or letters with inner apostrophes and hyphens; written as one branch, not two,
# so a one-letter word is not matched twice (the same matches, about a third faster).
WORD = re.compile(r"[A-Za-z](?:[A-Za-z'’-]*[A-Za-z])?")


@short_texts(maxsize=16384, max_chars=WORD_CHARS)
def content_key(word: str) -> str | None:
    """`word` as the subject it names (lower case, a light plural fold), or None when it
    names none: a stopword, a word under three letters, a contraction, "mm-hmm", laughter,
    a stopword drawn out ("coooool")."""
    low = word.lower()
    if len(low) < 3 or low in STOPWORDS or "'" in low or "’" in low:
        return None
    if _LAUGHTER.fullmatch(low):
        return None
    if _DRAWN_OUT.search(low) is not None:
        once, twice = _DRAWN_OUT.sub(r"\1", low), _DRAWN_OUT.sub(r"\1\1", low)
        if once in STOPWORDS or twice in STOPWORDS:
            return None
    if "-" in low and all(part in STOPWORDS or len(part) < 3 for part in low.split("-")):
        return None  # "mm-hmm", "uh-huh", "so-so"
    # A light plural fold so "buttons" and "button" count together; -ss/-us/-is stay.
    if len(low) > 4 and low.endswith("s") and not low.endswith(("ss", "us", "is")):
        low = low[:-1]
    return low


def content_words(text: str) -> list[str]:
    """The words of `text` that can name a subject (normalised), in order."""
    # The cache's lookup itself: a third of the cost of calling the cache (`memo`).
    return list(filter(None, map(_content_token.__getitem__, _tokens(text))))


def _tokens(text: str) -> list[str]:
    """What `content_words` reads a word from, in order."""
    if HEX_RUN.search(text) is not None:
        text = scrub_ids(text)  # else it would only respace the text, which no word spans
    return _as_ascii(text).translate(_NOT_A_WORD).split()


# The fillers `clean` takes out that would otherwise read as words ("uhh", "hmmm", "ahh"):
# `term_words` leaves them out.
_FILLER_WORD = re.compile(
    r"u+m+|u+h+|h+m+|m+-?h+m+|m+|uh-huh|um-hmm|ah+|oh+|er+|erm|eh|huh|mm-hmm", re.IGNORECASE
)


@short_texts(maxsize=16384, max_chars=WORD_CHARS)
def term_key(word: str) -> str | None:
    """`content_key`, and None for a filler."""
    return None if _FILLER_WORD.fullmatch(word) else content_key(word)


def term_words(sentence: str, *, ids: bool = True) -> list[str]:
    """The content words of a `rough_sentences` sentence as `content_words` reads it once
    cleaned: fillers, ids and split contractions' stems ("Adam 's") out, a stutter
    ("button button", "the remote the remote") counted once. `ids=False`: the caller knows
    the sentence holds no id (`has_ids` of its whole text)."""
    if ids and HEX_RUN.search(sentence):
        sentence = scrub_ids(sentence)
    sentence = joined_contractions(sentence)
    words: list[str] = list(filter(None, map(term_key, WORD.findall(sentence))))
    if may_stutter(words):  # seldom: the cleaner says what the stutter was
        return list(filter(None, map(term_key, WORD.findall(clean(sentence)))))
    return words


def sentence_words(pieces: Sequence[str], *, ids: bool = True) -> list[list[str]]:
    """`[term_words(piece, ids=ids) for piece in pieces]` for the pieces of one text's
    `rough_sentences`, in one scan of the words when it holds no id.

    Each piece is followed by a break, the three breaks in turn: a break is never equal to
    a word, nor to the breaks next to it or two further, so no stutter is seen across
    pieces and the whole text is looked at once (`may_stutter`)."""
    joined = "".join(map(operator.add, pieces, itertools.cycle(_SPACED_BREAKS)))
    if ids or sum(map(joined.count, _BREAKS)) != len(pieces):  # an id, or a break of its own
        return [term_words(piece, ids=ids) for piece in pieces]
    tokens = _as_ascii(joined).translate(_NOT_IN_WORDS).split()
    words = list(filter(None, map(_token_or_break.__getitem__, tokens)))  # (`content_words`)
    if may_stutter(words):  # some piece has one: each is looked at
        ends = [*itertools.compress(range(len(words)), map(_is_break, words))]
        starts = [0, *(end + 1 for end in ends[:-1])]
        return [
            term_words(piece, ids=False) if may_stutter(said) else said
            for piece, said in zip(
                pieces, (words[a:b] for a, b in zip(starts, ends, strict=True)), strict=True
            )
        ]
    ends = [*itertools.compress(range(len(words)), map(_is_break, words))]
    return [words[a:b] for a, b in zip([0, *(end + 1 for end in ends[:-1])], ends, strict=True)]


_BREAKS = ("\x00", "\x01", "\x02")
_SPACED_BREAKS = tuple(f" {b} " for b in _BREAKS)
_is_break = frozenset(_BREAKS).__contains__


def _as_ascii(text: str) -> str:
    """`text` as WORD reads it, in ASCII: ’ as ', any other non-ASCII character as "?".
    WORD takes no letter but A-Z and a-z, and ’ where it takes ': a word with either is no
    key (`content_key`), so the words keyed are the same."""
    if text.isascii():
        return text
    return text.replace("’", "'").encode("ascii", "replace").decode("ascii")


# What WORD never takes (all but ASCII letters, ' and -; `_as_ascii` first) becomes a
# space: the text's whitespace-separated tokens are then WORD's words, each with its leading
# and trailing ' and - still on (`_content_token` strips them), in C. `_NOT_IN_WORDS` keeps a
# break a token of its own (`_token_or_break`).
_NOT_A_WORD = str.maketrans(
    {code: " " for code in range(128) if not (chr(code).isalpha() or chr(code) in "'-")}
)
_NOT_IN_WORDS = str.maketrans(
    {
        code: " "
        for code in range(128)
        if not (chr(code).isalpha() or chr(code) in "'-" or chr(code) in _BREAKS)
    }
)


@short_texts(maxsize=16384, max_chars=WORD_CHARS)
def _token_or_break(token: str) -> str | None:
    if _is_break(token):
        return token
    word = token.strip("'-")
    return term_key(word) if word else None


@short_texts(maxsize=16384, max_chars=WORD_CHARS)
def _content_token(token: str) -> str | None:
    word = token.strip("'-")
    return content_key(word) if word else None


def may_stutter(words: Sequence[str]) -> bool:
    """False when `words` (content words, in order) certainly hold no stutter `clean` would
    take out. It removes a word said twice at once, or a pair: among the content words that
    leaves a word next to itself, or a pair next to itself ("remote control remote control")."""
    if any(map(operator.eq, words, words[1:])):
        return True
    # A pair next to itself has its first word two places on: most text has none, and then
    # no pairs need building.
    return any(map(operator.eq, words, words[2:])) and any(
        map(operator.eq, itertools.pairwise(words), itertools.pairwise(words[2:]))
    )


def is_backchannel(text: str | None) -> bool:
    """True for "yeah", "Hmm hmm hmm .", "I think so, yeah." and anything else that has
    no word naming a subject."""
    # `content_words` up to the first: most texts name a subject in their first few words.
    return not any(map(_content_token.__getitem__, _tokens(text or "")))
