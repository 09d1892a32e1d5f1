"""Term words: what the cleaner would leave, read sentence by sentence or in one scan."""

from __future__ import annotations

import pytest

from projections.text import words
from projections.text.cleaning import clean
from projections.text.ids import has_ids, scrub_ids
from projections.text.sentences import rough_sentences
from projections.text.words import WORD, content_key, content_words, sentence_words, term_words
from tests.unit.projections.text.support import TRANSCRIPT


def test_term_words_read_the_words_the_cleaner_would_leave() -> None:
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
    pieces = rough_sentences(text)
    ids = has_ids(text)
    assert sentence_words(pieces, ids=ids) == [term_words(p, ids=ids) for p in pieces]


@pytest.mark.parametrize(
    "text",
    [
        TRANSCRIPT,
        "Café naïve façade — the résumé’s owner: O’Reilly's don’t-stop cafés. Next one.",
        "A break \x00of its\x01own, 'quoted' --dashes-- and-hyphens-",
        "ids 3f9a2b7c1d and 123e4567-e89b-12d3-a456-426614174000 go",
        "",
    ],
)
def test_content_words_are_the_keys_of_word_matches(text: str) -> None:
    # Read in C where it can (`_as_ascii`, split on what WORD never takes): the same words.
    keys = [content_key(word) for word in WORD.findall(scrub_ids(text))]
    assert content_words(text) == [key for key in keys if key is not None]


def test_a_long_token_is_read_but_never_cached() -> None:
    # Tokens come from whatever a message holds (a base64 blob, a minified line): caching
    # them would bound each cache by entries but not by bytes.
    blob = "Z" + "a" * 200_000
    content_words("server server")  # the short word cached before counting
    cached = [words.content_key, words.term_key, words._token_or_break, words._content_token]
    before = [function.cache_info().currsize for function in cached]
    assert content_key(blob) == blob.lower()
    assert words.term_key(blob) == blob.lower()
    assert words._token_or_break(blob) == blob.lower()
    assert words._content_token(blob) == blob.lower()
    assert content_words(f"server {blob} server") == ["server", blob.lower(), "server"]
    assert [function.cache_info().currsize for function in cached] == before
