"""Caches for text functions, bounded in characters as well as in entries.

Text comes from whatever a message holds (a base64 blob, a minified line, a pasted log), so a
cache bounded only by its entry count is bounded in bytes only by the largest message. What
`short_texts` caches is at most `maxsize` texts of at most `max_chars` characters: a longer
argument is computed each time, as if there were no cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol, TypeVar

Result = TypeVar("Result", covariant=True)

# The longest word a word cache keeps: longer than English words get, hyphenated ones too.
WORD_CHARS = 48


class ShortTextCache(Protocol[Result]):
    """A function of one text, its short arguments cached (`cache_info` and `cache_clear`
    as functools')."""

    def __call__(self, text: str, /) -> Result: ...

    def cache_info(self) -> functools._CacheInfo: ...

    def cache_clear(self) -> None: ...


def short_texts(
    maxsize: int, max_chars: int
) -> Callable[[Callable[[str], Result]], ShortTextCache[Result]]:
    """`functools.lru_cache(maxsize)` for the texts of at most `max_chars` characters."""

    def decorate(function: Callable[[str], Result]) -> ShortTextCache[Result]:
        cached = functools.lru_cache(maxsize=maxsize)(function)

        @functools.wraps(function)
        def lookup(text: str) -> Result:
            return cached(text) if len(text) <= max_chars else function(text)

        lookup.cache_info = cached.cache_info  # type: ignore[attr-defined]
        lookup.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return lookup  # type: ignore[return-value]

    return decorate
