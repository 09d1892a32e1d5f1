"""Text caches bounded in characters: short texts cached, longer ones computed each time."""

from __future__ import annotations

from projections.text.memo import short_texts


def test_short_texts_are_cached_and_longer_ones_computed_each_time() -> None:
    calls: list[str] = []

    @short_texts(maxsize=2, max_chars=5)
    def shout(text: str) -> str:
        calls.append(text)
        return text.upper()

    assert [shout("abcde"), shout("abcde")] == ["ABCDE", "ABCDE"]
    assert calls == ["abcde"]  # five characters: cached
    assert [shout("abcdef"), shout("abcdef")] == ["ABCDEF", "ABCDEF"]
    assert calls == ["abcde", "abcdef", "abcdef"]  # six: computed each time, never kept
    assert shout.cache_info().currsize == 1
    shout("x"), shout("y"), shout("z")
    assert shout.cache_info().currsize == 2  # and never more entries than maxsize


def test_a_full_cache_lets_its_older_entries_go_and_keeps_answering() -> None:
    calls: list[str] = []

    @short_texts(maxsize=4, max_chars=5)
    def shout(text: str) -> str:
        calls.append(text)
        return text.upper()

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
