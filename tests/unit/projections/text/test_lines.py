"""The short lines a person reads."""

from __future__ import annotations

from projections.text.lines import counted


def test_a_count_takes_the_plural_unless_it_is_one() -> None:
    assert counted(1, "commitment") == "1 commitment"
    assert [counted(n, "message") for n in (0, 2)] == ["0 messages", "2 messages"]
    assert counted(3, "reply", "replies") == "3 replies"
