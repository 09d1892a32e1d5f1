"""The transcript cleaner: markup, fillers, hedges, stutters and spacing out, the words left
as they were said."""

from __future__ import annotations

import pytest

from projections.text.cleaning import clean, joined_contractions
from tests.unit.projections.text.support import TRANSCRIPT


def test_clean_takes_the_noise_of_a_transcript_out() -> None:
    assert clean(TRANSCRIPT) == (
        "so the remote control the remote control needs fewer buttons. yeah. "
        "the battery is fine, I dunno why. We decided on rubber! what about 9f8e7d6c5b4a3f2e ids?"
    )


def test_clean_joins_split_contractions_and_repeated_punctuation() -> None:
    assert clean("that 's it , we 're done , , right ?") == "that's it, we're done, right?"


def test_a_filler_is_a_word_of_its_own_never_part_of_one() -> None:
    assert clean("Um I 'm sure , mm-hmm , it 's a u-turn") == "I'm sure, it's a u-turn"
    assert clean("uh I'm here, hmm, I'd go") == "I'm here, I'd go"


def test_laughter_is_a_filler_and_you_know_or_i_mean_only_where_they_stand_apart() -> None:
    assert clean("Haha, would you review it lol?") == "would you review it?"
    assert clean("You know , the parser never handled tabs , you know .") == (
        "the parser never handled tabs."
    )
    assert clean("you know what adobe illustrator is right?") == (
        "you know what adobe illustrator is right?"
    )
    assert clean("Yeah , I mean , what I mean is it is slow") == "Yeah, what I mean is it is slow"


def test_hedges_and_a_trailing_off_stay() -> None:
    assert clean("I think it 's kind of slow , I guess ...") == (
        "I think it's kind of slow, I guess..."
    )


def test_a_false_start_goes_and_a_short_word_stays() -> None:
    assert clean("So it th they don't all , for the s sort of stuff") == (
        "So it they don't all, for the sort of stuff"
    )
    assert clean("are u up? go to today , a anything") == "are u up? go to today, a anything"


@pytest.mark.parametrize(
    ("text", "joined"),
    [
        ("that 's it, we 're done", "that's it, we're done"),
        ("it\t'LL be, do N'T go", "it'LL be, doN'T go"),  # any space, either case
        ("I do n't know", "I don't know"),
        ("'s at the start 's", "'s at the start's"),
        ("don't, it's, O'Brien's 'quoted'", "don't, it's, O'Brien's 'quoted'"),
        ("a 'quote' and an ' apostrophe", "a 'quote' and an ' apostrophe"),
        ("no apostrophe", "no apostrophe"),
    ],
)
def test_joined_contractions_joins_only_split_ones(text: str, joined: str) -> None:
    assert joined_contractions(text) == joined


def test_a_stutter_of_words_with_apostrophes_goes_whatever_else_the_text_holds() -> None:
    """ "I don't I don't" is said once with or without another repeat in the text: the
    check that skips the repeat pass reads words as the pass does ("don't" one word)."""
    assert clean("I don't I don't think so") == "I don't think so"
    assert clean("So that's So that's our three prototypes") == "So that's our three prototypes"
    assert clean("So that's So that's our prototypes, the the end") == (
        "So that's our prototypes, the end"
    )
