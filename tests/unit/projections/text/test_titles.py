"""A channel's title: its top keyphrases, else its first message with a subject."""

from __future__ import annotations

from projections.text.keyphrases import KeyphraseCounts, count_keyphrases
from projections.text.titles import title


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
