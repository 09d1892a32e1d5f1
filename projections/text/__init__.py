"""The one text engine: how chorus reads what people wrote.

Every text view (the digest's term model, titles and keyphrases, recaps, the context)
reads words through here, one module per job: `lines` (cut a text, count a noun, the
`[sender] text` line), `ids` (ids out, addresses as names), `cleaning` (the transcript
cleaner), `sentences` (split, rough pieces, decisions), `words` (stopwords, content and
term words), `keyphrases` (bounded space-saving counts) and `titles`. Pure and
deterministic; the keyphrase counts are bounded so a channel of any length keeps a record
of fixed size. The names below are re-exported for callers of the former single module;
code of this repository imports each from the module that owns it.
"""

from projections.text.cleaning import clean
from projections.text.ids import address_name, has_ids, person, scrub_ids
from projections.text.keyphrases import (
    KEYPHRASE_CAPACITY,
    KeyphraseCounts,
    count_keyphrases,
    keyphrase_candidates,
    salience,
    top_keyphrases,
)
from projections.text.lines import ELLIPSIS, counted, cut, message_line, parse_message_line
from projections.text.sentences import (
    rough_sentences,
    sentences,
    split_sentences,
    states_a_decision,
)
from projections.text.titles import TITLE_MAX_CHARS, title
from projections.text.words import (
    STOPWORDS,
    content_key,
    content_words,
    is_backchannel,
    may_stutter,
    sentence_words,
    term_words,
)

__all__ = [
    "ELLIPSIS",
    "KEYPHRASE_CAPACITY",
    "STOPWORDS",
    "TITLE_MAX_CHARS",
    "KeyphraseCounts",
    "address_name",
    "clean",
    "content_key",
    "content_words",
    "count_keyphrases",
    "counted",
    "cut",
    "has_ids",
    "is_backchannel",
    "keyphrase_candidates",
    "may_stutter",
    "message_line",
    "parse_message_line",
    "person",
    "rough_sentences",
    "salience",
    "scrub_ids",
    "sentence_words",
    "sentences",
    "split_sentences",
    "states_a_decision",
    "term_words",
    "title",
    "top_keyphrases",
]
