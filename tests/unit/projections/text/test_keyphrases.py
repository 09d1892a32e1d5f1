"""Keyphrase counting for titles: bounded space-saving counts, the same as the textbook
algorithm however it is computed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.text.keyphrases import count_keyphrases, keyphrase_candidates, top_keyphrases


def space_saving(
    counts: Mapping[str, Sequence[int]], text: str, capacity: int
) -> dict[str, list[int]]:
    """Metwally et al. as written: the least counted entry (first in key order) makes room."""
    table = {key: [int(v[0]), int(v[1])] for key, v in counts.items()}
    while len(table) > capacity:
        del table[min(table, key=lambda k: (table[k][0], k))]
    for phrase in keyphrase_candidates(text):
        if phrase in table:
            table[phrase][0] += 1
        elif len(table) < capacity:
            table[phrase] = [1, 0]
        else:
            evicted = min(table, key=lambda k: (table[k][0], k))
            floor = table.pop(evicted)[0]
            table[phrase] = [floor + 1, floor]
    return table


WORDS = ["budget", "remote", "control", "battery", "design", "button", "screen", "voice", "the"]
texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=40).map(" ".join)


@given(st.lists(texts, min_size=1, max_size=8), st.integers(1, 12))
def test_counts_equal_the_textbook_algorithm_and_stay_within_capacity(
    messages: list[str], capacity: int
) -> None:
    ours: dict[str, list[int]] = {}
    reference: dict[str, list[int]] = {}
    for text in messages:
        ours = count_keyphrases(ours, text, capacity)
        reference = space_saving(reference, text, capacity)
        assert ours == reference and list(ours) == list(reference)
        assert len(ours) <= capacity


def test_heavy_phrases_survive_a_stream_of_one_off_words() -> None:
    counts: dict[str, list[int]] = {}
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(300):
        one_off = "zeta" + letters[i // 26 % 26] + letters[i % 26]
        counts = count_keyphrases(counts, f"remote control, {one_off}", capacity=16)
    assert len(counts) == 16
    assert top_keyphrases(counts, limit=1) == ["remote control"]
    assert counts["remote control"] == [300, 0]


def test_a_table_over_capacity_is_cut_first_and_capacity_must_be_positive() -> None:
    big = {f"w{i}": [i + 1, 0] for i in range(10)}
    assert set(count_keyphrases(big, "", capacity=3)) == {"w7", "w8", "w9"}
    with pytest.raises(ValueError, match="capacity"):
        count_keyphrases({}, "x", capacity=0)


def test_a_pair_seen_once_does_not_hide_a_word_seen_twice() -> None:
    # "battery button" (seen once, weighted as a pair) ranks level with "button" (seen
    # twice) and before it by key; being seen once, it must be passed over, not end the list.
    counts: dict[str, list[int]] = {}
    for text in ("remote control button", "remote control battery", "battery button"):
        counts = count_keyphrases(counts, text)
    assert top_keyphrases(counts) == ["remote control", "battery", "button"]
