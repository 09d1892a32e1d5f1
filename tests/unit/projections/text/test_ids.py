"""Id scrubbing: the cheap check never misses an id, and an id goes with what framed it
and nothing else."""

from __future__ import annotations

import pytest

from projections.text.cleaning import clean
from projections.text.ids import has_ids, scrub_ids

UUID = "123e4567-e89b-12d3-a456-426614174000"


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
    assert has_ids(text) is found
    if not found:
        assert scrub_ids(text) == " ".join(text.split())


def test_scrub_ids_closes_the_space_an_id_leaves_before_punctuation() -> None:
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
    assert scrub_ids(text) == scrubbed
