"""What must survive every path that shortens a sentence (the cleaner every tier reads a
message through, the digest's sentences, a recap's point, a title before any phrase
repeats): negations, hedges and modality, contrast, question form, the verb of "you know
what X is"; only fillers and backchannels go, and only where they are fillers.

The table holds real sentences (QMSum train and val from ../shared/data, read there at test
time and skipped when absent; the chitchat dataset, installed with the demo extra) and
sentences written for it. Each row names the words that must stay, in order."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import pytest

from projections.model import ActorType, Message, MessageType
from projections.recap.extractive import NOTHING_TO_RECAP, POINT_WORDS, extractive_recap
from projections.text.cleaning import clean
from projections.text.sentences import sentences
from projections.text.titles import TITLE_MAX_CHARS, title
from streams.conversations import (
    Conversation,
    chitchat_conversations,
    qmsum_meetings,
    shared_data_dir,
)

# (split, meeting, turn index, words that must stay in order)
QMSUM = [
    ("train", "Bdb001", 26, ["you mean", "I guess I am gonna"]),
    ("train", "Bdb001", 174, ["but", "people don't typically share this kind of stuff", "right?"]),
    ("train", "Bed011", 22, ["but I think that might be overdoing it"]),
    ("train", "Bed013", 476, ["I hope not"]),
    ("train", "Bmr003", 1209, ["maybe we should"]),
    ("train", "Bmr003", 748, ["no, but", "won't", "will refuse", "this kind of material"]),
    ("train", "Bmr009", 678, ["I guess we don't really know"]),
    ("train", "Bmr013", 450, ["won't help at all, but they might not be horrible"]),
    ("train", "Bmr013", 461, ["but I hope that I don't need to do it"]),
    ("train", "Bmr016", 1366, ["I guess we're not done"]),
    ("train", "Bmr024", 933, ["but", "probably not it"]),
    ("train", "Bmr024", 839, ["I'm actually re - optimizing", "although that hasn't shown"]),
    ("val", "Bro022", 433, ["that might not be optimal"]),
    ("val", "ES2006a", 155, ["I hope you don't like snakes, do you?"]),
    ("val", "ES2006b", 371, ["although I only watch", "I wouldn't know"]),
    ("val", "ES2006b", 317, ["it might not even function"]),
    ("val", "ES2009a", 361, ["are they?", "I dunno"]),
    ("val", "ES2009d", 454, ["I dunno", "I'm not sure what"]),
    ("val", "IS1006c", 131, ["I hope that's not too much"]),
    ("val", "TS3009b", 50, ["I disagree, but", "it's not my place to disagree I guess"]),
]
# (conversation key prefix, turn index, words that must stay in order)
CHITCHAT = [
    ("a07edb12", 7, ["you still feel tired", "?"]),
    ("a07edb12", 19, ["you know what adobe illustrator is", "right?"]),
    ("a07edb12", 29, ["its a deadline I set"]),
    ("a07edb12", 30, ["but I think Ill be able to finish"]),
    ("a07edb12", 31, ["I hope..."]),
    ("a07edb12", 47, ["maybe", "people need pictures everywhere"]),
    ("58a21226", 56, ["kind of started", "you know what I mean?"]),
    ("da66eeae", 73, ["maybe we'll run into each other later?"]),
    ("3a70241f", 105, ["so maybe not"]),
    ("3a70241f", 222, ["what does that mean?"]),
    ("5c03cb92", 86, ["I'm terrified but I think I'll be ok"]),
    ("c33e823d", 20, ["it cant be calculated", "although I wish it could"]),
    ("474a5721", 141, ["you probably have a soul"]),
    ("d787efd1", 68, ["maybe not necessarily"]),
    ("d787efd1", 110, ["but I probably wouldn't have followed it"]),
]
# Written for the table: (text, words that must stay in order)
OWN = [
    ("Um, I don't think we should ship it on Friday.", ["I don't think we should ship it"]),
    ("We could, uh, maybe move it to Monday, although QA might object.", ["maybe move it"]),
    ("Though it passed, the build is probably not reproducible.", ["though it passed"]),
    ("It's sort of working, but the cache might be stale.", ["sort of working, but"]),
    ("Yeah, I mean, it is kind of slow, isn't it?", ["kind of slow, isn't it?"]),
    ("You know, the parser never handled tabs.", ["the parser never handled tabs"]),
    ("Do you know what the budget is?", ["do you know what the budget is?"]),
    ("So far nobody has answered the question.", ["so far nobody has answered"]),
    ("Like the old remote, it needs no batteries.", ["like the old remote", "no batteries"]),
    ("I'm not sure I can finish, I hope so.", ["I'm not sure I can finish, I hope so"]),
    ("Well done, the demo works now.", ["well done"]),
    ("Haha, would you review it before noon?", ["would you review it before noon?"]),
    ("I think it's fine, or something like that.", ["I think it's fine, or something"]),
    ("Right now the worker won't restart.", ["right now the worker won't restart"]),
]
# Never left by a path: fillers and laughter where they were fillers.
FILLERS = re.compile(r"\b(?:um+|uh+|haha+|lol)\b", re.IGNORECASE)


def _spoken(text: str) -> Message:
    return Message(
        channel="table/sentences",
        sender="person-1",
        type=MessageType.STATUS,
        actor_type=ActorType.HUMAN,
        content=text,
    )


def _recap_point(text: str) -> str:
    recap = extractive_recap([_spoken(text)])
    return "" if recap == NOTHING_TO_RECAP else recap


def _title(text: str) -> str:
    return title({}, fallback=text) or ""


# Each path that shortens a sentence, and when it shows a row whole: a recap's point is one
# sentence of a message cut to POINT_WORDS words, a title a text cut to TITLE_MAX_CHARS
# (`test_lines` and `test_prompt` say what a cut keeps).
PATHS: dict[str, Callable[[str], str]] = {
    "cleaned (every tier reads a message so)": clean,
    "the digest's sentences": lambda text: " ".join(sentences(text)),
    "a recap's point": _recap_point,
    "a title before any phrase repeats": _title,
}
WHOLE: dict[str, Callable[[str], bool]] = {
    "a recap's point": lambda text: (
        len(sentences(text)) == 1 and len(clean(text).split()) <= POINT_WORDS
    ),
    "a title before any phrase repeats": lambda text: len(clean(text)) <= TITLE_MAX_CHARS,
}


def _words(text: str) -> str:
    flat = " ".join(text.replace("’", "'").lower().split())
    return re.sub(r"\s+([,?!.…])", r"\1", flat)


def _kept_in_order(output: str, phrases: list[str]) -> list[str]:
    """The phrases of `phrases` missing from `output`, read in order."""
    said, at, missing = _words(output), 0, []
    for phrase in phrases:
        found = said.find(_words(phrase), at)
        if found < 0:
            missing.append(phrase)
        else:
            at = found + len(_words(phrase))
    return missing


@functools.cache
def _qmsum() -> dict[tuple[str, str], Conversation]:
    root = shared_data_dir()
    if root is None or not (root / "qmsum").is_dir():
        return {}
    wanted = {(split, name) for split, name, _, _ in QMSUM}
    return {
        (split, meeting.name): meeting
        for split in ("train", "val")
        for meeting in qmsum_meetings(root, split)
        if (split, meeting.name) in wanted
    }


@functools.cache
def _chitchat() -> dict[str, Conversation]:
    pytest.importorskip("chitchat_dataset")
    wanted = {key for key, _, _ in CHITCHAT}
    return {c.name: c for c in chitchat_conversations() if c.name in wanted}


def _qmsum_row(split: str, name: str, index: int) -> str:
    meetings = _qmsum()
    if not meetings:
        pytest.skip("no QMSum meetings in ../shared/data")
    return meetings[(split, name)].turns[index].text


def _check(text: str, keep: list[str]) -> None:
    said = set(re.findall(r"[\w']+", _words(text).replace(" '", "'").replace(" n't", "n't")))
    assert said >= set(re.findall(r"[\w']+", _words(" ".join(keep)))), f"not the row: {text!r}"
    for name, path in PATHS.items():
        output = path(text)
        if not output:
            continue  # the path shows nothing of it (a backchannel): nothing was trimmed
        if not WHOLE.get(name, bool)(text):
            continue  # a sentence chosen, or a cut: not this test's to judge
        missing = _kept_in_order(output, keep)
        assert not missing, f"{name} lost {missing}: {text!r} -> {output!r}"
        leftover = FILLERS.search(output)
        assert leftover is None, f"{name} kept the filler {leftover[0]!r}: {output!r}"


@pytest.mark.parametrize(("split", "name", "index", "keep"), QMSUM)
def test_real_meeting_sentences_keep_what_was_meant(
    split: str, name: str, index: int, keep: list[str]
) -> None:
    _check(_qmsum_row(split, name, index), keep)


@pytest.mark.parametrize(("key", "index", "keep"), CHITCHAT)
def test_real_chat_sentences_keep_what_was_meant(key: str, index: int, keep: list[str]) -> None:
    _check(_chitchat()[key].turns[index].text, keep)


@pytest.mark.parametrize(("text", "keep"), OWN)
def test_written_sentences_keep_what_was_meant(text: str, keep: list[str]) -> None:
    _check(text, keep)
