"""Caches for text functions, bounded in characters as well as in entries.

Text comes from whatever a message holds (a base64 blob, a minified line, a pasted log), so a
cache bounded only by its entry count is bounded in bytes only by the largest message. What
`short_texts` caches is at most `maxsize` texts of at most `max_chars` characters: a longer
argument is computed each time, as if there were no cache.

The word caches are asked once per word of every message summarised (about 270 times a
message in the bench, 99 % of them hits), so a hit must cost no Python frame: the cache is a
dict whose call is the dict's own lookup, in C, and only a miss runs Python
(`__missing__`); a hot loop maps the lookup itself (`cache.__getitem__`), which skips the
call's indirection. When full it lets the older half of its entries go (in the order they came),
not the least recently used: the same results, and no bookkeeping on a hit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

Result = TypeVar("Result")

# The longest word a word cache keeps: longer than English words get, hyphenated ones too.
WORD_CHARS = 48


class CacheInfo(NamedTuple):
    misses: int
    """Texts computed and kept (a longer text, computed each time, is not counted)."""
    maxsize: int
    currsize: int


class ShortTextCache(dict[str, Result], Generic[Result]):
    """`function` of one text, its results for texts of at most `max_chars` characters kept
    (at most `maxsize` of them). Call it as the function."""

    __slots__ = ("function", "max_chars", "maxsize", "misses")

    def __init__(self, function: Callable[[str], Result], maxsize: int, max_chars: int) -> None:
        super().__init__()
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.function = function
        self.maxsize = maxsize
        self.max_chars = max_chars
        self.misses = 0

    if TYPE_CHECKING:

        def __call__(self, text: str, /) -> Result: ...

    else:
        # A hit is the dict's lookup and nothing more; a miss calls `__missing__`.
        __call__ = dict.__getitem__

    def __missing__(self, text: str) -> Result:
        result = self.function(text)
        if len(text) <= self.max_chars:
            if len(self) >= self.maxsize:
                for older in list(itertools.islice(self, max(len(self) // 2, 1))):
                    self.pop(older, None)
            self[text] = result
            self.misses += 1
        return result

    def cache_info(self) -> CacheInfo:
        return CacheInfo(self.misses, self.maxsize, len(self))

    def cache_clear(self) -> None:
        self.clear()
        self.misses = 0

    # Two caches are the same only if they are one object: a dict's equality and hash would
    # compare what they hold.
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__  # type: ignore[assignment]


def short_texts(
    maxsize: int, max_chars: int
) -> Callable[[Callable[[str], Result]], ShortTextCache[Result]]:
    """`function` cached for the texts of at most `max_chars` characters, at most `maxsize`
    of them (`ShortTextCache`)."""

    def decorate(function: Callable[[str], Result]) -> ShortTextCache[Result]:
        return ShortTextCache(function, maxsize, max_chars)

    return decorate
