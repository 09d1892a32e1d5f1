"""What a channel keeps talking about, in a record of fixed size: `keyphrase_candidates`
reads the content words of a text and the pairs of adjacent ones ("remote control"),
`count_keyphrases` adds them to bounded space-saving counts (at most `KEYPHRASE_CAPACITY`
entries however long the channel grows), `top_keyphrases` ranks the phrases the counts
guarantee, and `salience` says how much of that subject a text carries."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from projections.text.ids import scrub_ids
from projections.text.words import WORD, content_key

__all__ = [
    "KEYPHRASE_CAPACITY",
    "KeyphraseCounts",
    "count_keyphrases",
    "keyphrase_candidates",
    "salience",
    "top_keyphrases",
]

KEYPHRASE_CAPACITY = 64
# A phrase of two words is more specific than either word alone.
_PAIR_WEIGHT = 2.0
# Where a pair of words stops: punctuation, brackets, quotes, a spaced dash.
_PHRASE_BREAK = re.compile(r"[.,;:!?()\[\]{}\"“”<>|/\\]+|\s[-–—]+\s")

KeyphraseCounts = dict[str, list[int]]


def keyphrase_candidates(text: str) -> list[str]:
    """Content words and pairs of adjacent content words ("remote control"), in order.

    A pair never spans a stopword or punctuation, so "control the budget" gives no
    "control budget".
    """
    candidates: list[str] = []
    for piece in _PHRASE_BREAK.split(scrub_ids(text)):
        previous: str | None = None
        for word in WORD.findall(piece):
            key = content_key(word)
            if key is None:
                previous = None
                continue
            candidates.append(key)
            if previous is not None and previous != key:
                candidates.append(f"{previous} {key}")
            previous = key
    return candidates


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
    # Filtered before the ranking, not cut off in it: a pair seen once ranks as high as a
    # word seen twice (the pair weight), so the first phrase seen once is no bound.
    seen = {phrase: count for phrase, count in _guaranteed(counts).items() if count >= 2}
    ranked = sorted(
        seen.items(), key=lambda kv: (-kv[1] * (_PAIR_WEIGHT if " " in kv[0] else 1.0), kv[0])
    )
    chosen: list[str] = []
    used: set[str] = set()
    for phrase, _ in ranked:
        if len(chosen) >= limit:
            break
        words = set(phrase.split())
        if words & used:
            continue
        chosen.append(phrase)
        used |= words
    return chosen


def salience(text: str, counts: Mapping[str, Sequence[int]]) -> float:
    """How much of the channel's subject `text` carries: the guaranteed counts of its
    keyphrases over the square root of its length, so long rambles do not win by size."""
    candidates = keyphrase_candidates(text)
    if not candidates:
        return 0.0
    sure = _guaranteed(counts)
    score = sum(sure.get(phrase, 0) for phrase in candidates)
    return float(score / len(WORD.findall(text)) ** 0.5)
