"""Text caches bounded in characters: short texts cached, longer ones computed each time."""

from __future__ import annotations

from projections.text.memo import ShortTextCache, short_texts


def shouting(maxsize: int, max_chars: int) -> tuple[ShortTextCache[str], list[str]]:
    """`str.upper` cached, and the texts it was computed for."""
    calls: list[str] = []

    @short_texts(maxsize=maxsize, max_chars=max_chars)
    def shout(text: str) -> str:
        calls.append(text)
        return text.upper()

    return shout, calls


def test_short_texts_are_cached_and_longer_ones_computed_each_time() -> None:
    shout, calls = shouting(maxsize=2, max_chars=5)
    assert [shout("abcde"), shout("abcde")] == ["ABCDE", "ABCDE"]
    assert calls == ["abcde"]  # five characters: cached
    assert [shout("abcdef"), shout("abcdef")] == ["ABCDEF", "ABCDEF"]
    assert calls == ["abcde", "abcdef", "abcdef"]  # six: computed each time, never kept
    assert shout.cache_info().currsize == 1
    shout("x"), shout("y"), shout("z")
    assert shout.cache_info().currsize == 2  # and never more entries than maxsize


def test_a_full_cache_lets_its_older_entries_go_and_keeps_answering() -> None:
    shout, calls = shouting(maxsize=4, max_chars=5)
    for text in ["a", "b", "c", "d"]:
        shout(text)
    assert shout("e") == "E"  # full: the older half went, in the order they came
    assert shout.cache_info().currsize == 3
    assert [shout("c"), shout("d"), shout("e")] == ["C", "D", "E"]
    assert calls == ["a", "b", "c", "d", "e"]  # the newer ones answered from the cache
    assert shout("a") == "A"
    assert calls[-1] == "a"  # an entry let go is computed again
    assert shout.cache_info().misses == 6
    shout.cache_clear()
    assert shout.cache_info() == (0, 4, 0)


def test_the_lookup_itself_computes_what_is_missing() -> None:
    shout, calls = shouting(maxsize=4, max_chars=5)
    lookup = shout.__getitem__  # how a hot loop maps it
    assert list(map(lookup, ["ab", "abcdef", "ab"])) == ["AB", "ABCDEF", "AB"]
    assert calls == ["ab", "abcdef"]
    assert shout.cache_info().currsize == 1
