"""Sentences: the rough pieces are the cleaned sentences' pieces, and the decision
shortcut says what the pattern says."""

from __future__ import annotations

import pytest

from projections.text.sentences import _DECISION, rough_sentences, sentences, states_a_decision
from tests.unit.projections.text.support import TRANSCRIPT


def test_rough_sentences_are_the_pieces_the_cleaned_sentences_come_from_nearly() -> None:
    pieces = rough_sentences(TRANSCRIPT)
    assert "disfmarker" not in " ".join(pieces) and len(pieces) == 5
    assert [s for piece in pieces for s in sentences(piece)] == sentences(TRANSCRIPT)


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
    assert states_a_decision(sentence) is (_DECISION.search(sentence) is not None)
