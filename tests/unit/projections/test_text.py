"""Keyphrase counting for titles: bounded space-saving counts, the same as the textbook
algorithm however it is computed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.text import count_keyphrases, counted, keyphrase_candidates, top_keyphrases


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


# --------------------------------------------------------------------------- rough reading

TRANSCRIPT = (
    "Um , so the remote control {disfmarker} the remote control needs fewer buttons . "
    "Uhh , yeah . I mean , the the battery battery is fine , I dunno why . "
    "We decided on rubber ! Hmmm what about 9f8e7d6c5b4a3f2e ids ?"
)


def test_rough_sentences_are_the_pieces_the_cleaned_sentences_come_from_nearly() -> None:
    from projections.text import rough_sentences, sentences

    pieces = rough_sentences(TRANSCRIPT)
    assert "disfmarker" not in " ".join(pieces) and len(pieces) == 5
    assert [s for piece in pieces for s in sentences(piece)] == sentences(TRANSCRIPT)


def test_term_words_read_the_words_the_cleaner_would_leave() -> None:
    from projections.text import clean, content_words, rough_sentences, term_words

    pieces = rough_sentences(TRANSCRIPT)
    read = [term_words(piece) for piece in pieces]
    assert read[0] == ["remote", "control", "remote", "control", "button"]
    assert read[1] == [] and read[2] == ["battery"]  # fillers, hedges, "the the", a stutter
    assert read[3] == ["decided", "rubber"] and read[4] == ["ids"]  # the id is out
    assert [w for words in read for w in words] == content_words(clean(TRANSCRIPT))
    # A stutter is what the cleaner says it is: a word said again at once, not after
    # another word or a comma; and a split contraction's stem is no word ("Adam 's").
    assert term_words("the button button") == ["button"]
    assert term_words("button the button, button") == ["button"] * 3
    assert term_words("Adam 's laptop , Adam") == ["laptop", "adam"]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("no digits here at all, deadbeefcafe", False),
        ("ten 10 and 2026", False),
        ("message 9f8e7d6c5b4a3f2e1d0c came in", True),
        ("id 123e4567-e89b-12d3-a456-426614174000", True),
    ],
)
def test_has_ids_is_false_only_when_no_id_can_be_there(text: str, found: bool) -> None:
    from projections.text import has_ids, scrub_ids

    assert has_ids(text) is found
    if not found:
        assert scrub_ids(text) == " ".join(text.split())


@pytest.mark.parametrize(
    "sentence",
    [
        "We agreed on the plan.",
        "Let's go with rubber.",
        "It is DONE now",
        "Finally some rest",
        "we will see",
        "we're going to ship",
        "nothing happened here",
        "the agreement is pending",
        "undone work",
    ],
)
def test_states_a_decision_is_the_pattern_whatever_the_shortcut(sentence: str) -> None:
    from projections.text import _DECISION, states_a_decision

    assert states_a_decision(sentence) is (_DECISION.search(sentence) is not None)


@pytest.mark.parametrize(
    "text",
    [
        TRANSCRIPT,
        "Plain words. More plain words here? Yes!",
        "Café naïve façade — the résumé’s owner said: don't-stop. Next one.",  # not ASCII
        "A break \x00 of its own. And \x01 another.",
        "the the remote remote. control control? x - y -- 'quoted' words.",
        "",
    ],
)
def test_sentence_words_read_each_sentence_as_term_words_does(text: str) -> None:
    from projections.text import has_ids, rough_sentences, sentence_words, term_words

    pieces = rough_sentences(text)
    ids = has_ids(text)
    assert sentence_words(pieces, ids=ids) == [term_words(p, ids=ids) for p in pieces]


def test_a_count_takes_the_plural_unless_it_is_one() -> None:
    assert counted(1, "commitment") == "1 commitment"
    assert [counted(n, "message") for n in (0, 2)] == ["0 messages", "2 messages"]
    assert counted(3, "reply", "replies") == "3 replies"


UUID = "123e4567-e89b-12d3-a456-426614174000"


def test_scrub_ids_closes_the_space_an_id_leaves_before_punctuation() -> None:
    from projections.text import clean, scrub_ids

    # The space before a comma or a closing bracket, however wide, as the id left it.
    assert scrub_ids(f"fixed in , see run {UUID} )") == "fixed in, see run)"
    assert clean(scrub_ids(f"fixed in , see run {UUID} )")) == "fixed in, see run)"
    assert scrub_ids("see (id 3fa85f64b)") == "see (id)"
    assert scrub_ids("sha 3fa85f64b , next") == "sha, next"


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        # What framed an id goes with it ...
        ("reviewer-3fa85f64", "reviewer"),
        ("commit #3fa85f64b, next", "commit, next"),
        ("see (3fa85f64b) now", "see now"),
        ("job 3fa85f64b: it failed", "job it failed"),
        (f"id: {UUID}", "id"),
        ("url https://x.org/3fa85f64b/ ok", "url https://x.org ok"),
        # ... and no other punctuation of the text: a digest line's bullet, a heading's
        # colon, a dash between words, a call's brackets (the recap prompt scrubs each line
        # of the digest).
        ("- [planner] rerun job 3fa85f64b", "- [planner] rerun job"),
        ("Opened: review of 9f8e7d6c5b4a", "Opened: review of"),
        ("a - b, see 3fa85f64b", "a - b, see"),
        ("call foo() after 3fa85f64b", "call foo() after"),
    ],
)
def test_scrub_ids_takes_out_the_punctuation_around_an_id_and_no_other(
    text: str, scrubbed: str
) -> None:
    from projections.text import scrub_ids

    assert scrub_ids(text) == scrubbed
