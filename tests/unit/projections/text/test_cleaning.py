"""The transcript cleaner: markup, fillers, hedges, stutters and spacing out, the words left
as they were said."""

from __future__ import annotations

from projections.text.cleaning import clean
from tests.unit.projections.text.support import TRANSCRIPT


def test_clean_takes_the_noise_of_a_transcript_out() -> None:
    assert clean(TRANSCRIPT) == (
        "so the remote control the remote control needs fewer buttons. yeah. "
        "the battery is fine, why. We decided on rubber! what about 9f8e7d6c5b4a3f2e ids?"
    )


def test_clean_joins_split_contractions_and_repeated_punctuation() -> None:
    assert clean("that 's it , we 're done , , right ?") == "that's it, we're done, right?"
