"""The short lines a person reads."""

from __future__ import annotations

from projections.text.lines import ELLIPSIS, closing, counted, cut, is_balanced, merged


def test_a_count_takes_the_plural_unless_it_is_one() -> None:
    assert counted(1, "commitment") == "1 commitment"
    assert [counted(n, "message") for n in (0, 2)] == ["0 messages", "2 messages"]
    assert counted(3, "reply", "replies") == "3 replies"


def test_a_cut_closes_the_quotes_and_brackets_it_opened_and_shows_it_cut() -> None:
    said = "“Fix the sample service config (and rerun the migration example) for the guide”"
    for limit in range(2, len(said)):
        shown = cut(said, limit, at_word=True)
        assert len(shown) <= limit, shown
        assert ELLIPSIS in shown and is_balanced(shown), shown
    assert cut(said, 40, at_word=True) == "“Fix the sample service config (and…)”"
    assert cut('He said "ship it (today', 18) == 'He said "ship it…"'
    assert cut(said, len(said)) == said


def test_balanced_ignores_apostrophes_and_reads_straight_quotes_in_pairs() -> None:
    assert is_balanced("it's Jane’s “draft” (v2) and 'x'")
    assert not is_balanced("“open") and not is_balanced("(a [b)") and not is_balanced('say "x')
    assert closing("“a (b ‘c") == "’)”" and closing("done") == ""


def test_an_entry_said_again_is_merged_and_counted() -> None:
    said = ["ana docs/changelog.md", "ben tests", "Ana  docs/changelog.md", "ana docs/changelog.md"]
    assert merged(said) == ["ana docs/changelog.md (3 times)", "ben tests"]
    assert merged(["a", "b", "a"]) == ["a (twice)", "b"] and merged([]) == []
