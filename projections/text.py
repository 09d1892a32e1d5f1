"""The one text engine: how chorus reads what people wrote.

Every text view (the digest's term model, titles and keyphrases, recaps, the context)
reads words through here: one transcript cleaner (`clean`), one stopword list, one word
normaliser (`content_key`: lower case, a light plural fold), one keyphrase model (bounded
space-saving counts), one way to cut a text (`cut`) and one way to write and read the
`[sender] text` line of a message. Pure and deterministic; the keyphrase counts are bounded
so a channel of any length keeps a record of fixed size.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
from collections.abc import Mapping, Sequence

__all__ = [
    "ELLIPSIS",
    "KEYPHRASE_CAPACITY",
    "STOPWORDS",
    "TITLE_MAX_CHARS",
    "KeyphraseCounts",
    "address_name",
    "clean",
    "content_key",
    "content_words",
    "count_keyphrases",
    "cut",
    "has_ids",
    "is_backchannel",
    "keyphrase_candidates",
    "may_stutter",
    "message_line",
    "parse_message_line",
    "person",
    "rough_sentences",
    "salience",
    "scrub_ids",
    "sentence_words",
    "sentences",
    "split_sentences",
    "states_a_decision",
    "term_words",
    "title",
    "top_keyphrases",
]

ELLIPSIS = "…"


def cut(text: str, max_chars: int, *, at_word: bool = False) -> str:
    """`text` at most `max_chars` long: cut at the limit (`at_word`: back to the last whole
    word before it), trailing space dropped, with "…" when it was longer."""
    if len(text) <= max_chars:
        return text
    head = text[: max(max_chars - 1, 0)]
    if at_word and " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip() + ELLIPSIS


# --------------------------------------------------------------------------- lines


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, the plural when count is not 1: "1 commitment", "2 commitments"."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def message_line(sender: str, text: str) -> str:
    """How a message reads inside a summary, a prompt or a compacted span: `[sender] text`."""
    return f"[{sender}] {text}"


def parse_message_line(line: str) -> tuple[str, str] | None:
    """`(sender, text)` of a `message_line`, or None when `line` is not one."""
    sender, separator, said = line.partition("] ")
    if not line.startswith("[") or not separator or not said:
        return None
    return sender[1:], said


# --------------------------------------------------------------------------- ids

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
# Any space an id left before punctuation or a closing bracket (not `clean`'s _SPACED_PUNCT,
# which meets one space only and leaves brackets be).
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)])")
# Both id patterns need eight hex characters in a row; most messages have none, and this
# one scan is cheaper than either pattern (scrub_ids runs on every message, for titles).
# Both cases spelled out rather than IGNORECASE, which scans at half the speed.
_HEX_RUN = re.compile(r"[0-9a-fA-F]{8}")


def has_ids(text: str) -> bool:
    """False when `text` certainly holds no id `scrub_ids` would take out: both patterns
    need eight hex characters in a row and, but for an all-letter UUID, a digit; a text
    without a digit (most) needs no scan of the pattern."""
    if not any(digit in text for digit in _DIGITS):
        return False
    return _HEX_RUN.search(text) is not None


_DIGITS = "0123456789"


def scrub_ids(text: str) -> str:
    """`text` without UUIDs or hex ids, on one line. What an id named is lost on purpose:
    a person cannot act on it, and the surrounding words usually say what it was."""
    if _HEX_RUN.search(text) is not None:
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


# --------------------------------------------------------------------------- words

# Function words, contractions and what people say while thinking: none of it names a
# subject. The one list: the digest's term model and the keyphrases both read it (a union of
# their two former lists; on QMSum it raised the digest's ROUGE-1/2 on train and val alike).
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
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# A letter, or letters with inner apostrophes and hyphens; written as one branch, not two,
# so a one-letter word is not matched twice (the same matches, about a third faster).
_WORD = re.compile(r"[A-Za-z](?:[A-Za-z'’-]*[A-Za-z])?")
_PHRASE_BREAK = re.compile(r"[.,;:!?()\[\]{}\"“”<>|/\\]+|\s[-–—]+\s")


@functools.lru_cache(maxsize=8192)
def content_key(word: str) -> str | None:
    low = word.lower()
    if len(low) < 3 or low in STOPWORDS or "'" in low or "’" in low:
        return None
    if "-" in low and all(part in STOPWORDS or len(part) < 3 for part in low.split("-")):
        return None  # "mm-hmm", "uh-huh", "so-so"
    # A light plural fold so "buttons" and "button" count together; -ss/-us/-is stay.
    if len(low) > 4 and low.endswith("s") and not low.endswith(("ss", "us", "is")):
        low = low[:-1]
    return low


def content_words(text: str) -> list[str]:
    """The words of `text` that can name a subject (normalised), in order."""
    keys = (content_key(word) for word in _WORD.findall(scrub_ids(text)))
    return [key for key in keys if key is not None]


# The fillers `clean` takes out that would otherwise read as words ("uhh", "hmmm", "ahh"),
# and "dunno" (of the hedge "I dunno"): `term_words` leaves them out.
_FILLER_WORD = re.compile(
    r"u+m+|u+h+|h+m+|m+-?h+m+|m+|uh-huh|um-hmm|ah+|oh+|er+|erm|eh|huh|mm-hmm|dunno", re.IGNORECASE
)


@functools.lru_cache(maxsize=8192)
def term_key(word: str) -> str | None:
    """`content_key`, and None for a filler."""
    return None if _FILLER_WORD.fullmatch(word) else content_key(word)


def term_words(sentence: str, *, ids: bool = True) -> list[str]:
    """The content words of a `rough_sentences` sentence as `content_words` reads it once
    cleaned: fillers, ids and split contractions' stems ("Adam 's") out, a stutter
    ("button button", "the remote the remote") counted once. `ids=False`: the caller knows
    the sentence holds no id (`has_ids` of its whole text)."""
    if ids and _HEX_RUN.search(sentence):
        sentence = scrub_ids(sentence)
    if "'" in sentence:
        sentence = _SPLIT_CONTRACTION_ANY.sub(_FIRST_GROUP, sentence)
    words: list[str] = list(filter(None, map(term_key, _WORD.findall(sentence))))
    if may_stutter(words):  # seldom: the cleaner says what the stutter was
        return list(filter(None, map(term_key, _WORD.findall(clean(sentence)))))
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
    if joined.isascii():  # most text: split on what is not a letter, ' or -, in C
        tokens = joined.translate(_NOT_IN_WORDS).split()
        words = list(filter(None, map(_token_or_break, tokens)))
    else:
        words = list(filter(None, map(_term_or_break, _WORD_OR_BREAK.findall(joined))))
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
_WORD_OR_BREAK = re.compile(r"[A-Za-z](?:[A-Za-z'’-]*[A-Za-z])?|[\x00-\x02]")


@functools.lru_cache(maxsize=8192)
def _term_or_break(token: str) -> str | None:
    return token if _is_break(token) else term_key(token)


# ASCII that _WORD never takes (all but letters, ' and -) becomes a space, a break a token of
# its own: the text's whitespace-separated tokens are then _WORD's words, each with its
# leading and trailing ' and - still on (`_token_or_break` strips them).
_NOT_IN_WORDS = str.maketrans(
    {
        code: " "
        for code in range(128)
        if not (chr(code).isalpha() or chr(code) in "'-" or chr(code) in _BREAKS)
    }
)


@functools.lru_cache(maxsize=16384)
def _token_or_break(token: str) -> str | None:
    if _is_break(token):
        return token
    word = token.strip("'-")
    return term_key(word) if word else None


def may_stutter(words: Sequence[str]) -> bool:
    """False when `words` (content words, in order) certainly hold no stutter `clean` would
    take out. It removes a word said twice at once, or a pair: among the content words that
    leaves a word next to itself, or a pair next to itself ("remote control remote control")."""
    return any(map(operator.eq, words, words[1:])) or any(
        map(operator.eq, itertools.pairwise(words), itertools.pairwise(words[2:]))
    )


def is_backchannel(text: str | None) -> bool:
    """True for "yeah", "Hmm hmm hmm .", "I think so, yeah." and anything else that has
    no word naming a subject."""
    return not content_words(text or "")


def keyphrase_candidates(text: str) -> list[str]:
    """Content words and pairs of adjacent content words ("remote control"), in order.

    A pair never spans a stopword or punctuation, so "control the budget" gives no
    "control budget".
    """
    candidates: list[str] = []
    for piece in _PHRASE_BREAK.split(scrub_ids(text)):
        previous: str | None = None
        for word in _WORD.findall(piece):
            key = content_key(word)
            if key is None:
                previous = None
                continue
            candidates.append(key)
            if previous is not None and previous != key:
                candidates.append(f"{previous} {key}")
            previous = key
    return candidates


# --------------------------------------------------------------------------- keyphrases

KEYPHRASE_CAPACITY = 64
# A phrase of two words is more specific than either word alone.
_PAIR_WEIGHT = 2.0

KeyphraseCounts = dict[str, list[int]]


def count_keyphrases(
    counts: Mapping[str, Sequence[int]],
    text: str,
    capacity: int = KEYPHRASE_CAPACITY,
) -> KeyphraseCounts:
    """`counts` with the keyphrases of `text` added, keeping at most `capacity` entries.

    Space-saving counting (Metwally et al.): a new phrase in a full table takes the place
    of the least counted one and inherits its count as its error, so each entry is
    `[count, error]` and `count - error` is a guaranteed lower bound. Heavy phrases stay,
    however long the channel grows, and the bound is what ranks them.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    updated: KeyphraseCounts = {key: [v[0], v[1]] for key, v in counts.items()}
    while len(updated) > capacity:
        del updated[min(updated, key=lambda k: (updated[k][0], k))]
    # The entry evicted is the least counted, the first in key order among equals; keys by
    # count find it without a scan of the table per new phrase (a message has dozens). Once
    # the table is full the least count never falls (a newcomer counts one more than it), so
    # the least-counted keys, sorted once, give each eviction in turn until that count is
    # gone; a key that was counted up since is skipped.
    by_count: dict[int, set[str]] = {}
    for key, (count, _) in updated.items():
        by_count.setdefault(count, set()).add(key)
    floor_keys: list[str] = []  # the keys at `floor_count`, largest first
    floor_count = -1
    for phrase in keyphrase_candidates(text):
        entry = updated.get(phrase)
        if entry is not None:
            _recount(by_count, phrase, entry[0], entry[0] + 1)
            entry[0] += 1
            continue
        floor = 0
        if len(updated) >= capacity:
            floor = min(by_count)
            if floor != floor_count:
                floor_keys, floor_count = sorted(by_count[floor], reverse=True), floor
            evicted = floor_keys.pop()
            while evicted not in by_count[floor]:
                evicted = floor_keys.pop()
            _recount(by_count, evicted, floor, None)
            del updated[evicted]
        updated[phrase] = [floor + 1, floor]
        by_count.setdefault(floor + 1, set()).add(phrase)
    return updated


def _recount(by_count: dict[int, set[str]], key: str, old: int, new: int | None) -> None:
    keys = by_count[old]
    keys.discard(key)
    if not keys:
        del by_count[old]
    if new is not None:
        by_count.setdefault(new, set()).add(key)


def _guaranteed(counts: Mapping[str, Sequence[int]]) -> dict[str, int]:
    return {key: int(v[0]) - int(v[1]) for key, v in counts.items()}


def top_keyphrases(counts: Mapping[str, Sequence[int]], limit: int = 4) -> list[str]:
    """The most salient phrases, most salient first, none repeating another's words.

    A phrase must have been seen at least twice: a single mention does not say what a
    channel is about.
    """
    sure = _guaranteed(counts)
    ranked = sorted(
        sure.items(), key=lambda kv: (-kv[1] * (_PAIR_WEIGHT if " " in kv[0] else 1.0), kv[0])
    )
    chosen: list[str] = []
    used: set[str] = set()
    for phrase, count in ranked:
        if len(chosen) >= limit or count < 2:
            break
        words = set(phrase.split())
        if words & used:
            continue
        chosen.append(phrase)
        used |= words
    return chosen


TITLE_MAX_CHARS = 60


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def title(
    counts: Mapping[str, Sequence[int]], fallback: str | None = None, max_chars: int = 60
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
    return cut(scrub_ids(fallback), max_chars)


def salience(text: str, counts: Mapping[str, Sequence[int]]) -> float:
    """How much of the channel's subject `text` carries: the guaranteed counts of its
    keyphrases over the square root of its length, so long rambles do not win by size."""
    candidates = keyphrase_candidates(text)
    if not candidates:
        return 0.0
    sure = _guaranteed(counts)
    score = sum(sure.get(phrase, 0) for phrase in candidates)
    return float(score / len(_WORD.findall(text)) ** 0.5)


# --------------------------------------------------------------------------- transcripts

_MARKUP = re.compile(r"\{[a-z_]+\}|<[^<>]{1,40}>")
# The lookaheads name each pattern's possible first letters and the possessive `\w++` skips
# backtracking that can never match: the same matches, found in about half the time (the
# cleaner runs on every message summarised).
_FILLER = re.compile(
    r"\b(?=[uhmaoe])(?:u+m+|u+h+|h+m+|m+-?h+m+|m+|uh-huh|um-hmm|ah+|oh+|er+|erm|eh|huh|mm-hmm)\b[\s,]*",
    re.IGNORECASE,
)
_HEDGE = re.compile(
    r"\b(?=[yiksuo])(?:you know|i mean|kind of|sort of|i guess|i think|i dunno|or something|"
    r"or whatever)\b[\s,]*",
    re.IGNORECASE,
)
_REPEATED_WORD = re.compile(r"\b(\w++(?:\s++\w++)?)(?:\s+\1\b)+", re.IGNORECASE)
# What `clean` looks for before a pass: the \w tokens (a filler or a repeat is made of them);
# a token that is a filler, or starts one ("uh" of "uh-huh"); the hedges' words.
_TOKEN = re.compile(r"\w+")
_FILLER_TOKEN = re.compile(r"u+m+|u+h+|h+m+|m+h+m+|m+|ah+|oh+|er+|erm|eh|huh")
_filler_token = functools.lru_cache(maxsize=4096)(_FILLER_TOKEN.fullmatch)
_HEDGES = (
    "you know",
    "i mean",
    "kind of",
    "sort of",
    "i guess",
    "i think",
    "i dunno",
    "or something",
    "or whatever",
)
# These two run once spaces are normalised (one space between words), so a literal space
# is every space they can meet, and the engine scans for it instead of trying `\s` anywhere.
_SPLIT_CONTRACTION = re.compile(r" ('(?:re|s|ll|ve|d|m)|n't)\b", re.IGNORECASE)
_SPACED_PUNCT = re.compile(r" ([,.?!;:])")
# The same as _SPLIT_CONTRACTION before spaces are normalised (for `term_words`).
_SPLIT_CONTRACTION_ANY = re.compile(r"\s+('(?:re|s|ll|ve|d|m)|n't)\b", re.IGNORECASE)
_REPEATED_PUNCT = re.compile(r"([,.?!;:])(?:\s*[,.;:])+")
# `sub` with a template such as r"\1" expands it in Python for every match; a C callable
# returning the group does the same without a Python frame.
_FIRST_GROUP = operator.methodcaller("group", 1)
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
_LEADING_DISCOURSE = re.compile(
    r"^(?:(?:so|well|okay|ok|yeah|yes|right|and|but|alright|now|anyway|like|actually|then)"
    r"\b[\s,]*)+",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(?:agreed|agree on|decided|decide on|decision|settled|let's go with|we'll go with|"
    r"we will|we're going to|conclusion|final|chose|choose|done|finished|completed|fixed)\b",
    re.IGNORECASE,
)


def clean(text: str) -> str:
    """Transcript noise out: markup, fillers, stutters, spaces before punctuation.

    A pass that cannot match is skipped (each is looked for in the words first): the same
    text, at about half the cost on a sentence (the digest cleans the ones it may show).
    """
    if "{" in text or "<" in text:
        text = _MARKUP.sub(" ", text)
    low = text.lower()
    tokens = _TOKEN.findall(low)
    if any(map(_filler_token, tokens)):
        text = _FILLER.sub(" ", text)
    if any(hedge in low for hedge in _HEDGES):
        text = _HEDGE.sub(" ", text)
    if len(text) != len(low):  # a filler or a hedge went: what is left may repeat
        tokens = _TOKEN.findall(text.lower())
    text = " ".join(text.split())
    if "'" in text:
        text = _SPLIT_CONTRACTION.sub(_FIRST_GROUP, text)
    # A repeat is a word, or two, again at once: some token equals the next or the one after.
    if any(map(operator.eq, tokens, tokens[1:])) or any(map(operator.eq, tokens, tokens[2:])):
        text = _REPEATED_WORD.sub(_FIRST_GROUP, text)
    text = _SPACED_PUNCT.sub(_FIRST_GROUP, text)
    text = _REPEATED_PUNCT.sub(_FIRST_GROUP, text)
    return text.strip(" ,;:")


def rough_sentences(text: str) -> list[str]:
    """The pieces `sentences(text)` would come from, without the cleaner (fillers, hedges,
    stutters, spacing: 150 µs or more for a 1 KB transcript): markup out, cut where a
    sentence ends. For reading the words of every message (`term_words`); a piece is
    cleaned (`sentences`) only when it is to be shown."""
    if "{" in text or "<" in text:
        text = _MARKUP.sub(" ", text)
    if "'" in text:  # "that 's" -> "that's", as the cleaner joins them
        text = _SPLIT_CONTRACTION_ANY.sub(_FIRST_GROUP, text)
    return _SENTENCE_END.split(text)


def sentences(text: str) -> list[str]:
    """Cleaned sentences of a message, leading discourse markers removed, capitalised."""
    return split_sentences(clean(text))


def split_sentences(cleaned: str) -> list[str]:
    """`sentences` of a text already `clean`ed."""
    out = []
    for raw in _SENTENCE_END.split(cleaned):
        sentence = _LEADING_DISCOURSE.sub("", raw).strip(" ,;:")
        if any(ch.isalpha() for ch in sentence):
            out.append(sentence[0].upper() + sentence[1:])
    return out


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


def states_a_decision(sentence: str) -> bool:
    """True for a sentence that says something was agreed, decided or done."""
    low = sentence.lower()
    if not any(hint in low for hint in _DECISION_HINTS):
        return False
    return _DECISION.search(sentence) is not None
