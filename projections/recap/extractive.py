"""The extractive recap, for when no model is configured: what the channel is about, what
was done and what went wrong, its salient points and the next step someone said, stitched
from the channel's own words.

It is history only: what was said stays true. What was asked and where it stands (the goal,
what is open and who owes it, the next step it implies) is the commitments fold's to say,
rendered beside the recap when it is read (`projections.recap.state`)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from projections.commitments import states_a_request
from projections.model import ActorType, Message, MessageType
from projections.recap.prompt import BULLET, clean_recap, one_line
from projections.summarise.llm import UnusableAnswer
from projections.text.cleaning import clean
from projections.text.ids import person, scrub_ids
from projections.text.keyphrases import KeyphraseCounts, count_keyphrases, salience, top_keyphrases
from projections.text.lines import ELLIPSIS, merged
from projections.text.memo import short_texts
from projections.text.sentences import SENTENCE_END
from projections.text.words import content_words, is_backchannel

_SETBACK_TYPES = frozenset({MessageType.DECLINE, MessageType.FAILURE})
_NEXT_STEP = re.compile(
    r"\b(?:next|need to|needs to|have to|has to|should|going to|gonna|will|'ll|let's|"
    r"plan to|todo|to do|action item|by (?:monday|tuesday|wednesday|thursday|friday|tomorrow))\b",
    re.IGNORECASE,
)
# Words of a message a recap's point quotes at most.
POINT_WORDS = 14
RECAP_MIN_WORDS = 40
RECAP_MAX_WORDS = 80
NOTHING_TO_RECAP = "Nothing to recap yet."


def _tidy(text: str) -> str:
    """Spoken text as it reads: no ids, no "uh"/"um", no stutter, no detached "' s" (the
    one cleaner, `projections.text.cleaning.clean`)."""
    return one_line(clean(scrub_ids(text))).strip(" ,;")


def sentence(text: str) -> str:
    """`text` ending as a sentence does."""
    text = text.rstrip(" ,;:-–—")
    return text if text.endswith((".", "!", "?", ELLIPSIS)) else text + "."


def clip(text: str, words: int) -> str:
    try:
        clipped = clean_recap(text, max_words=words, max_chars=600)
    except UnusableAnswer:
        # Content that is nothing but a bullet marker is still what was said.
        return one_line(text)
    return clipped


def _said(message: Message) -> str | None:
    """The message's content as a person reads it, or None when it says nothing."""
    content = message.content
    if not content:
        return None
    # A recap asks this of each message of its window several times (to rank, to pick, to
    # quote) and cleaning is most of its cost, so short texts (the stage's window cuts every
    # message to 300 characters) are cached; a longer one is cleaned each time, so the cache
    # holds at most SAID_CACHED texts of SAID_CACHED_CHARS.
    return _said_text(content)


SAID_CACHED = 2048
SAID_CACHED_CHARS = 1000


@short_texts(maxsize=SAID_CACHED, max_chars=SAID_CACHED_CHARS)
def _said_text(content: str) -> str | None:
    if is_backchannel(content):
        return None
    return _tidy(content) or None


# A goal or a point needs this many words that name something; "Digits?" is not a goal.
_SUBSTANTIAL_WORDS = 3


def _substantial(text: str | None) -> bool:
    return text is not None and len(content_words(text)) >= _SUBSTANTIAL_WORDS


def _sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_END.split(text) if not is_backchannel(s)] or [text]


def _rank(text: str, counts: KeyphraseCounts) -> tuple[float, int]:
    # Salience first; among equally salient (often: none) the one with more to say.
    return salience(text, counts), len(content_words(text))


def _bestsentence(text: str, counts: KeyphraseCounts, words: int) -> str:
    return clip(max(_sentences(text), key=lambda s: _rank(s, counts)), words)


def _listed(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _progress(spoken: Sequence[Message], used: set[str]) -> list[str]:
    """What was done: the latest results, and the setback that followed them if any."""
    done = [m for m in spoken if m.type is MessageType.DONE][-2:]
    found: list[str] = []
    if done:
        results = [f"{person(m.sender)} {clip(_said(m) or 'finished', 12)}" for m in done]
        found.append(sentence("Done: " + "; ".join(merged([r.rstrip(".") for r in results]))))
    last_done = max((spoken.index(m) for m in done), default=-1)
    setbacks = [m for m in spoken[last_done + 1 :] if m.type in _SETBACK_TYPES]
    if setbacks:
        latest = setbacks[-1]
        verb = "declined" if latest.type is MessageType.DECLINE else "failed"
        reason = _said(latest)
        found.append(
            sentence(
                f"{person(latest.sender)} {verb}" + (f": {clip(reason, 12)}" if reason else "")
            )
        )
    used.update(m.id for m in done + setbacks[-1:])
    return found


def _points(spoken: Sequence[Message], counts: KeyphraseCounts, used: set[str]) -> list[Message]:
    """The discussion's points, most salient first, alternating speakers where it can: a
    discussion has more than one side. What was said again is one point, its first saying."""
    said_before: set[str] = set()
    fresh = []
    for message in spoken:
        said = _said(message) if message.id not in used else None
        if said and said.casefold() not in said_before:
            said_before.add(said.casefold())
            fresh.append(message)
    # Only short remarks in view: they are still what was said last.
    substantial = [m for m in fresh if _substantial(_said(m))] or fresh
    ranked = sorted(substantial, key=lambda m: _rank(_said(m) or "", counts), reverse=True)
    if not ranked:
        return []
    others = [m for m in ranked[1:] if m.sender != ranked[0].sender]
    head = [ranked[0], *others[:1]]
    return head + [m for m in ranked if m not in head]


def _point(message: Message, counts: KeyphraseCounts) -> str:
    return sentence(
        f"{person(message.sender)}: {_bestsentence(_said(message) or '', counts, POINT_WORDS)}"
    )


def _summary_points(summary: str | None, counts: KeyphraseCounts, seen: str) -> list[str]:
    """Salient sentences of the running summary that the recap does not already say."""
    if not summary:
        return []
    lines = (BULLET.sub("", line) for line in summary.splitlines())
    sentences = [
        _tidy(s) for line in lines for s in _sentences(line) if _substantial(s) and s not in seen
    ]
    ranked = sorted(sentences, key=lambda s: _rank(s, counts), reverse=True)
    return [sentence(f"Earlier: {clip(s, 16)}") for s in ranked if s]


def _extended(text: str, extra: str) -> str:
    """`text` and `extra`, if that stays within RECAP_MAX_WORDS."""
    if extra and len(text.split()) + len(extra.split()) <= RECAP_MAX_WORDS:
        return f"{text} {extra}"
    return text


def _said_next(spoken: Sequence[Message], used: set[str]) -> str | None:
    """The latest next step someone said ("we should…", "next: …"), as who said it."""
    for message in reversed(spoken):
        said = _said(message) if message.id not in used else None
        steps = [s for s in _sentences(said) if _NEXT_STEP.search(s)] if said else []
        if steps and _substantial(steps[-1]):
            used.add(message.id)
            return sentence(f"Planned ({person(message.sender)}): {clip(steps[-1], 16)}")
    return None


def extractive_recap(
    messages: Sequence[Message],
    keyphrases: KeyphraseCounts | None = None,
    summary: str | None = None,
) -> str:
    """A recap stitched from the log itself, for when no model is configured.

    It says what the channel is about, what was done (and the setback after it, if any),
    its most salient points and the next step someone said, in the channel's own words
    without ids or backchannel. A request's own words are left to the state part (what was
    asked is the commitments fold's, with where it stands). `keyphrases` are the channel's
    keyphrase counts (see `projections.recap.title`); without them the recent messages
    alone rank what is salient. A recap short of 40 words is filled from the channel's other
    points and the running `summary`; it is one line of at most 80 words.
    """
    spoken = [
        m
        for m in messages
        if m.actor_type is not ActorType.SYSTEM and m.type is not MessageType.EVENT
    ]
    counts = keyphrases
    if counts is None:
        counts = {}
        for message in spoken:
            counts = count_keyphrases(counts, message.content or "")
    topics = top_keyphrases(counts, 6)
    told = [m for m in spoken if not states_a_request(m)]
    if not told and not topics:
        return NOTHING_TO_RECAP
    used: set[str] = set()
    about = f"The channel is about {_listed(topics[:3])}." if topics else None
    progress = _progress(told, used)
    points = [] if progress else _points(told, counts, used)
    used.update(m.id for m in points[:2])
    parts = [
        about,
        *progress,
        *(_point(m, counts) for m in points[:2]),
        _said_next(told, used),
    ]
    text = " ".join(p for p in parts if p)
    said = text  # what the summary's points must not repeat
    # Below the lower bound: more of what the channel said, then what else it is about;
    # each built only while the recap is still short.

    def extras() -> Iterator[str]:
        yield from (_point(m, counts) for m in points[2:] if m.id not in used)
        yield from _summary_points(summary, counts, said)
        if topics[3:]:
            yield sentence(f"Also discussed: {_listed(topics[3:])}")

    for extra in extras():
        if len(text.split()) >= RECAP_MIN_WORDS:
            break
        text = _extended(text, extra)
    return clean_recap(text or NOTHING_TO_RECAP, max_words=RECAP_MAX_WORDS)
