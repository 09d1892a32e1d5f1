"""Text a person reads: ids scrubbed, backchannel skipped, what a channel is about.

Recaps, titles and the agent context all show channel content to someone who was not
there. Raw message and correlation ids mean nothing to them, "yeah" and "hmm hmm" say
nothing, and a channel's first message rarely names what it turned out to be about. The
helpers here are pure and deterministic; the keyphrase counts are bounded so a channel of
any length keeps a record of fixed size.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "KEYPHRASE_CAPACITY",
    "OUTCOME_WORDS",
    "TITLE_MAX_CHARS",
    "CommitmentView",
    "commitment_views",
    "content_words",
    "count_keyphrases",
    "cut",
    "ended_commitments",
    "is_agent",
    "is_backchannel",
    "keyphrase_candidates",
    "open_commitments",
    "person",
    "salience",
    "scrub_ids",
    "title",
    "top_keyphrases",
]

# --------------------------------------------------------------------------- ids

_UUID = re.compile(
    r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b", re.IGNORECASE
)
# A run of 8+ hex characters with both a digit and a letter: message ids (uuid4 hex), short
# commit-like hashes, expiry-event digests. Plain numbers and ordinary words stay.
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.IGNORECASE)
_EMPTY_BRACKETS = re.compile(r"[(\[{<]\s*[)\]}>]")
_DANGLING = re.compile(r"[-_:/#]+(?=\s|$|[,.;)])")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)])")
# Both id patterns need eight hex characters in a row; most messages have none, and this
# one scan is cheaper than either pattern (scrub_ids runs on every message, for titles).
# Both cases spelled out rather than IGNORECASE, which scans at half the speed.
_HEX_RUN = re.compile(r"[0-9a-fA-F]{8}")


def scrub_ids(text: str) -> str:
    """`text` without UUIDs or hex ids, on one line. What an id named is lost on purpose:
    a person cannot act on it, and the surrounding words usually say what it was."""
    cleaned = _HEX_ID.sub("", _UUID.sub("", text)) if _HEX_RUN.search(text) else text
    if cleaned != text:
        cleaned = _DANGLING.sub("", _EMPTY_BRACKETS.sub("", cleaned))
        cleaned = _SPACE_BEFORE_PUNCT.sub(r"\1", cleaned)
    return " ".join(cleaned.split())


_ADDRESS = re.compile(r"^(?:instance|capability|role):")


def person(name: str | None) -> str:
    """A sender or target as a person reads it: `role:reviewer` -> `reviewer`."""
    if not name:
        return "anyone"
    return scrub_ids(_ADDRESS.sub("", name.strip())).strip("-_ ") or "an agent"


# --------------------------------------------------------------------------- words

# Function words plus what people say while thinking: none of it names a subject.
_STOPWORD_TEXT = """
    a about above after again against all also am an and any are aren as at be because been
    before being below between both but by can cannot could did do does doing done don down
    during each either else few for from further had has have having he her here hers herself
    him himself his how however i if in into is isn it its itself just me more most my myself
    no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this
    those though through to too under until up upon very was we were what whatever when where
    whether which while who whom whose why will with within without would you your yours
    yourself yourselves yeah yes yep yup nope okay ok oh uh um umm hmm hm mm mmm mhm huh ah
    eh er erm uhhuh alright right well like really actually basically probably maybe perhaps
    guess think thinking thought know knew known mean means meant say said says saying see
    seen saw look looks looking looked get gets got getting go goes going gone went gonna
    gotta wanna kinda sorta come comes came coming want wants wanted need needs needed kind
    sort thing things stuff something anything everything nothing lot lots bit way ways time
    times one two three four five six seven eight nine ten zero first second third still even
    already much many quite pretty sure fine good great nice cool anyway anyways course make
    makes made making take takes took put puts use uses used using try tries tried trying
    talk talks talking talked tell tells told seem seems seemed people person guys guy
    someone somebody everybody anybody everyone anyone thank thanks please sorry wow hey hello
    hi bye let lets may might must shall wo today tomorrow yesterday ago back another
    different new old big small little long short high low next last better best bad give
    gives gave work works working worked start started stop yet far set point part fact
    question idea ideas able fewer less stuff exactly definitely certainly totally whole
    couple meeting meetings agree sounds sound mine yours ours week weeks day days minute
    minutes hour hours year years number numbers keep kept call called find found feel felt
    check checked run running ran move moving moved read reading wait waiting every
    around across away already enough maybe unless anything since whatsoever interesting
    available important possible real lose
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# A letter, or letters with inner apostrophes and hyphens; written as one branch, not two,
# so a one-letter word is not matched twice (the same matches, about a third faster).
_WORD = re.compile(r"[A-Za-z](?:[A-Za-z'’-]*[A-Za-z])?")
_PHRASE_BREAK = re.compile(r"[.,;:!?()\[\]{}\"“”<>|/\\]+|\s[-–—]+\s")


@functools.lru_cache(maxsize=8192)
def _content_key(word: str) -> str | None:
    low = word.lower()
    if len(low) < 3 or low in _STOPWORDS or "'" in low or "’" in low:
        return None
    if "-" in low and all(part in _STOPWORDS or len(part) < 3 for part in low.split("-")):
        return None  # "mm-hmm", "uh-huh", "so-so"
    # A light plural fold so "buttons" and "button" count together; -ss/-us/-is stay.
    if len(low) > 4 and low.endswith("s") and not low.endswith(("ss", "us", "is")):
        low = low[:-1]
    return low


def content_words(text: str) -> list[str]:
    """The words of `text` that can name a subject (normalised), in order."""
    keys = (_content_key(word) for word in _WORD.findall(scrub_ids(text)))
    return [key for key in keys if key is not None]


def is_backchannel(text: str | None) -> bool:
    """True for "yeah", "Hmm hmm hmm .", "I think so, yeah." and anything else that has
    no word naming a subject."""
    return not content_words(text or "")


def keyphrase_candidates(text: str) -> list[str]:
    """Content words and pairs of adjacent content words ("remote control"), in order.

    A pair never spans a stopword or punctuation, so "control the budget" gives no
    "control budget".
    """
    candidates: list[str] = []
    for piece in _PHRASE_BREAK.split(scrub_ids(text)):
        previous: str | None = None
        for word in _WORD.findall(piece):
            key = _content_key(word)
            if key is None:
                previous = None
                continue
            candidates.append(key)
            if previous is not None and previous != key:
                candidates.append(f"{previous} {key}")
            previous = key
    return candidates


# --------------------------------------------------------------------------- keyphrases

KEYPHRASE_CAPACITY = 64
# A phrase of two words is more specific than either word alone.
_PAIR_WEIGHT = 2.0

KeyphraseCounts = dict[str, list[int]]


def count_keyphrases(
    counts: Mapping[str, Sequence[int]],
    text: str,
    capacity: int = KEYPHRASE_CAPACITY,
) -> KeyphraseCounts:
    """`counts` with the keyphrases of `text` added, keeping at most `capacity` entries.

    Space-saving counting (Metwally et al.): a new phrase in a full table takes the place
    of the least counted one and inherits its count as its error, so each entry is
    `[count, error]` and `count - error` is a guaranteed lower bound. Heavy phrases stay,
    however long the channel grows, and the bound is what ranks them.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    updated: KeyphraseCounts = {key: [v[0], v[1]] for key, v in counts.items()}
    while len(updated) > capacity:
        del updated[min(updated, key=lambda k: (updated[k][0], k))]
    # The entry evicted is the least counted, the first in key order among equals; keys by
    # count find it without a scan of the table per new phrase (a message has dozens). Once
    # the table is full the least count never falls (a newcomer counts one more than it), so
    # the least-counted keys, sorted once, give each eviction in turn until that count is
    # gone; a key that was counted up since is skipped.
    by_count: dict[int, set[str]] = {}
    for key, (count, _) in updated.items():
        by_count.setdefault(count, set()).add(key)
    floor_keys: list[str] = []  # the keys at `floor_count`, largest first
    floor_count = -1
    for phrase in keyphrase_candidates(text):
        entry = updated.get(phrase)
        if entry is not None:
            _recount(by_count, phrase, entry[0], entry[0] + 1)
            entry[0] += 1
            continue
        floor = 0
        if len(updated) >= capacity:
            floor = min(by_count)
            if floor != floor_count:
                floor_keys, floor_count = sorted(by_count[floor], reverse=True), floor
            evicted = floor_keys.pop()
            while evicted not in by_count[floor]:
                evicted = floor_keys.pop()
            _recount(by_count, evicted, floor, None)
            del updated[evicted]
        updated[phrase] = [floor + 1, floor]
        by_count.setdefault(floor + 1, set()).add(phrase)
    return updated


def _recount(by_count: dict[int, set[str]], key: str, old: int, new: int | None) -> None:
    keys = by_count[old]
    keys.discard(key)
    if not keys:
        del by_count[old]
    if new is not None:
        by_count.setdefault(new, set()).add(key)


def _guaranteed(counts: Mapping[str, Sequence[int]]) -> dict[str, int]:
    return {key: int(v[0]) - int(v[1]) for key, v in counts.items()}


def top_keyphrases(counts: Mapping[str, Sequence[int]], limit: int = 4) -> list[str]:
    """The most salient phrases, most salient first, none repeating another's words.

    A phrase must have been seen at least twice: a single mention does not say what a
    channel is about.
    """
    sure = _guaranteed(counts)
    ranked = sorted(
        sure.items(), key=lambda kv: (-kv[1] * (_PAIR_WEIGHT if " " in kv[0] else 1.0), kv[0])
    )
    chosen: list[str] = []
    used: set[str] = set()
    for phrase, count in ranked:
        if len(chosen) >= limit or count < 2:
            break
        words = set(phrase.split())
        if words & used:
            continue
        chosen.append(phrase)
        used |= words
    return chosen


TITLE_MAX_CHARS = 60


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def title(
    counts: Mapping[str, Sequence[int]], fallback: str | None = None, max_chars: int = 60
) -> str | None:
    """What the channel is about, from its keyphrases: "Remote control, button, battery".

    Before any phrase repeats, the first message with content words (`fallback`) stands in,
    cut to `max_chars`; a channel of nothing but backchannel has no title.
    """
    phrases = top_keyphrases(counts)
    shown: list[str] = []
    for phrase in phrases:
        if len(", ".join([*shown, phrase])) <= max_chars:
            shown.append(phrase)
    if shown:
        return _capitalised(", ".join(shown))
    if fallback is None or is_backchannel(fallback):
        return None
    text = scrub_ids(fallback)
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"


def salience(text: str, counts: Mapping[str, Sequence[int]]) -> float:
    """How much of the channel's subject `text` carries: the guaranteed counts of its
    keyphrases over the square root of its length, so long rambles do not win by size."""
    candidates = keyphrase_candidates(text)
    if not candidates:
        return 0.0
    sure = _guaranteed(counts)
    score = sum(sure.get(phrase, 0) for phrase in candidates)
    return float(score / len(_WORD.findall(text)) ** 0.5)


# --------------------------------------------------------------------------- commitments

_EXCERPT_CHARS = 200

# How an ended commitment ended, as a line says it; every terminal state has a word.
OUTCOME_WORDS = {
    "FULFILLED": "fulfilled",
    "DECLINED": "declined",
    "FAILED": "failed",
    "EXPIRED": "expired",
    "DELEGATED": "delegated",
}
_ACTIVE_STATES = frozenset({"OPEN", "ACKNOWLEDGED"})


@dataclass(frozen=True)
class CommitmentView:
    """A commitment as a person reads it: what was asked, by whom, who owes it, and where
    it stands as the fold holds it (`state`: OPEN, ACKNOWLEDGED or how it ended)."""

    correlation_id: str
    kind: str
    state: str
    requester: str
    obligor: str | None
    asked: str | None
    since: datetime
    expires_at: datetime | None = None
    ended_at: datetime | None = None
    delegated_to: str | None = None
    id: str | None = None

    @property
    def is_open(self) -> bool:
        return self.state in _ACTIVE_STATES

    @property
    def outcome(self) -> str | None:
        """How it ended ("declined", ...), None while it is open."""
        return None if self.is_open else OUTCOME_WORDS.get(self.state, self.state.lower())

    def owes(self) -> str:
        """ "reviewer owes planner" / "someone owes planner" when nobody was named."""
        owner = person(self.obligor) if self.obligor else "someone"
        return f"{owner} owes {person(self.requester)}"

    def what(self, max_chars: int = _EXCERPT_CHARS) -> str:
        if not self.asked:
            return f"a {self.kind.lower()}"
        return f"“{cut(scrub_ids(self.asked), max_chars)}”"

    def involves(self, agent: str) -> bool:
        """True when `agent` owes it, asked for it or was handed it (`role:worker-a` is
        worker-a's)."""
        return any(
            is_agent(who, agent) for who in (self.obligor, self.requester, self.delegated_to)
        )

    def line(self) -> str:
        """One line for a prompt or a context: no ids, times to the minute in UTC. An ended
        commitment's line starts with how it ended."""
        if self.is_open:
            due = f", due {_clock(self.expires_at)}" if self.expires_at else ""
            status = "acknowledged" if self.state == "ACKNOWLEDGED" else "open"
            return f"{self.owes()}: {self.what()} ({status} since {_clock(self.since)}{due})"
        outcome = self.outcome or ""
        if self.state == "DELEGATED" and self.delegated_to:
            outcome = f"delegated to {person(self.delegated_to)}"
        owner = person(self.obligor) if self.obligor else "someone"
        ended = f", {_clock(self.ended_at)}" if self.ended_at else ""
        return f"{outcome}: {self.what()} (owed by {owner} to {person(self.requester)}{ended})"

    def as_json(self) -> dict[str, Any]:
        return {
            "correlation_id": self.correlation_id,
            "kind": self.kind,
            "state": self.state,
            "requester": self.requester,
            "obligor": self.obligor,
            "asked": self.asked,
            "since": self.since.isoformat(),
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "delegated_to": self.delegated_to,
        }


def cut(text: str, max_chars: int) -> str:
    """`text` at most `max_chars` long: cut at the limit with "…" when longer."""
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1].rstrip() + "…"


def is_agent(address: str | None, agent: str) -> bool:
    """True when `address` (a sender or a target) names `agent`: `role:worker-a`,
    `instance:worker-a` and `worker-a` all name worker-a."""
    if not address or not agent:
        return False
    return address == agent or _ADDRESS.sub("", address.strip()) == _ADDRESS.sub("", agent.strip())


def _clock(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value)
    return None


def _field(raw: Any, name: str) -> Any:
    return raw.get(name) if isinstance(raw, Mapping) else getattr(raw, name, None)


def _view(raw: Any, excerpts: Mapping[str, str] | None) -> CommitmentView | None:
    state = _field(raw, "state")
    state = str(getattr(state, "value", state) or "")
    since = _when(_field(raw, "opened_at"))
    if not state or since is None:
        return None
    asked = _field(raw, "excerpt") or (excerpts or {}).get(str(_field(raw, "opened_by")))
    kind = _field(raw, "opened_by_type")
    return CommitmentView(
        correlation_id=str(_field(raw, "correlation_id")),
        kind=str(getattr(kind, "value", kind) or "request"),
        state=state,
        requester=str(_field(raw, "requester") or "someone"),
        obligor=_field(raw, "obligor"),
        asked=asked if isinstance(asked, str) and asked.strip() else None,
        since=since,
        expires_at=_when(_field(raw, "expires_at")),
        ended_at=None if state in _ACTIVE_STATES else _when(_field(raw, "resolved_at")),
        delegated_to=_field(raw, "delegated_to"),
        id=_field(raw, "id"),
    )


def _commitments_of(state: Any) -> list[Any]:
    """The commitments of a commitments state: the model, or its dump as a table holds it."""
    if state is None:
        return []
    found = state.get("commitments") if isinstance(state, Mapping) else state.commitments
    return list((found or {}).values())


def commitment_views(state: Any, excerpts: Mapping[str, str] | None = None) -> list[CommitmentView]:
    """Every commitment of a commitments state (the model or its dump), in the state's
    order: opened order, an ended one moved last when it ended."""
    views = (_view(raw, excerpts) for raw in _commitments_of(state))
    return [view for view in views if view is not None]


def open_commitments(state: Any, excerpts: Mapping[str, str] | None = None) -> list[CommitmentView]:
    """The active commitments of a commitments state (the model or its dump), oldest first.

    What was asked comes from the commitment's `excerpt` when the state has one, else from
    `excerpts` (message id -> content, e.g. the recent-message ring), else it stays None.
    """
    return [view for view in commitment_views(state, excerpts) if view.is_open]


def ended_commitments(
    state: Any, *, limit: int | None = None, include_fulfilled: bool = True
) -> list[CommitmentView]:
    """The ended commitments the state still holds, the most recently ended first."""
    ended = [view for view in reversed(commitment_views(state)) if not view.is_open]
    if not include_fulfilled:
        ended = [view for view in ended if view.state != "FULFILLED"]
    return ended if limit is None else ended[:limit]
