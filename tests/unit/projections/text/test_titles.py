"""A channel's title: its top keyphrases, else its first message with a subject."""

from __future__ import annotations

from projections.text.cleaning import clean
from projections.text.ids import scrub_ids
from projections.text.keyphrases import KeyphraseCounts, count_keyphrases
from projections.text.lines import cut
from projections.text.titles import TITLE_MAX_CHARS, title
from projections.text.words import is_backchannel


def test_a_title_is_the_top_keyphrases() -> None:
    counts: KeyphraseCounts = {}
    for text in (
        "remote control button",
        "remote control battery",
        "the button on the remote control",
        "battery button",
    ):
        counts = count_keyphrases(counts, text)
    assert title(counts) == "Remote control, button, battery"


def test_before_a_phrase_repeats_the_first_message_stands_in_without_its_ids() -> None:
    fallback = "Fix run 3fa85f64b: the remote control has a title that goes on"
    assert title({}, fallback, max_chars=30) == "Fix run the remote control ha…"
    assert title({}, "yeah okay") is None and title({}, None) is None


def _full_fallback(text: str, max_chars: int = TITLE_MAX_CHARS) -> str | None:
    """The fallback as the whole text cleaned gives it: what reading a head must equal."""
    if is_backchannel(text):
        return None
    return cut(clean(scrub_ids(text)), max_chars)


def test_a_long_first_message_stands_in_as_its_whole_text_cleaned_would() -> None:
    """Only the head of a long message can show: it is what is read, and the title is the
    one the whole text cleaned gives, whatever cleaning meets where the head ends (a
    repeat, markup, a filler, a parenthetical, an id, a false start)."""
    noises = (
        "the plan the plan the plan",
        "<laughter is here>",
        "um, uh",
        "slow, you know",
        "id 3fa85f64b ( 1234abcd9 )",
        "th the",
        "so so so so",
        "a really-long-hyphenated-word-that-goes-on-and-on-for-a-while again",
    )
    words = [
        "we",
        "should",
        "ship",
        "the",
        "parser",
        "before",
        "the",
        "review",
        "and",
        "write",
        "its",
        "changelog",
    ]
    for noise in noises:
        for start in range(0, 1_200, 37):
            filler = " ".join(words[i % len(words)] for i in range(start // 5 + 1))
            text = f"{filler} {noise} {' '.join(words * 30)}"
            assert title({}, text) == _full_fallback(text), (noise, start)


def test_a_long_first_message_whose_head_cleans_to_little_is_read_whole() -> None:
    """A head of fillers, repeats or backchannel says nothing: the words after it do."""
    for head in ("um " * 400, "yeah okay " * 120, "the plan " * 150):
        text = head + "the parser ships on friday after the review"
        assert title({}, text) == _full_fallback(text) is not None
    assert title({}, "yeah okay " * 300) is None


def test_a_long_first_message_cut_inside_a_repeat_stands_in_as_its_whole_text_would() -> None:
    """The head's end anywhere in a repeated pair of words ("W ab W ab … W"): the head
    cleans to the pair and a stray word, which is not what shows."""
    for word in ("Supercalifragilistic", "SupercalifragilisticExpialidociousParser"):
        for shift in range(1, len(word) + 6):
            text = f"{'7' * shift} " + f"{word} ab " * 100 + "the parser ships on friday"
            assert title({}, text) == _full_fallback(text), (word, shift)
