"""The digest tier: a bounded, extractive summary that says what was said, rewritten each run.

No model. Each run rebuilds the summary from the previous result and the new batch:

- a running term model (content-word counts over everything seen, the most frequent
  `max_terms` kept) says what the channel is about;
- a bounded pool of candidate sentences (the best `pool_size` so far) is re-scored against
  it, so an early sentence can win once the channel's topic is clear;
- the text is re-selected from the pool (salience, a prior for the channel's opening, a
  redundancy penalty) and cut to `max_tokens` (estimated at about four characters a token).

Both live in the annotations (`digestTerms`, `digestPool`, a few KB at most), so the state
crosses runs through the summary record itself and nothing grows with the channel.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import operator
from collections import Counter
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import ClassVar

import orjson

from projections.model import Message
from projections.summarise.heuristic import merge_list_annotation
from projections.summarise.pending import spoken, told_request
from projections.summarise.result import (
    SUMMARY_MAX_TOKENS,
    SummaryResult,
    base_annotations,
    previous_text,
)
from projections.text.ids import has_ids
from projections.text.lines import ELLIPSIS, cut, message_line, parse_message_line
from projections.text.sentences import rough_sentences, sentences, states_a_decision
from projections.text.words import content_words, sentence_words

TERMS_KEY = "digestTerms"
POOL_KEY = "digestPool"
# Annotations of an earlier digest that tracked commitments itself; dropped when read, since
# what is open or ended is the commitments projection's to say.
RETIRED_KEYS = ("digestOpen", "digestDone")
SEEN_KEY = "digestSeen"
TEXT_HASH_KEY = "digestTextHash"
# The `participants` and `topics` annotations keep the first names seen, up to this many.
MAX_NAMES = 40
SHOWN_NAMES = 12
# A sentence this much of whose content words the chosen ones already say adds nothing new.
NEAR_DUPLICATE = 0.9

PARTICIPANTS_HEADER = "Participants: "
KEY_TERMS_HEADER = "Key terms: "
DISCUSSED_HEADER = "Discussed:"
# Lines of a previous text that are structure (the digest's, the grouped tier's, the state
# part's, or an earlier digest's commitment sections), not material.
STRUCTURE_LINES = (
    PARTICIPANTS_HEADER,
    KEY_TERMS_HEADER,
    DISCUSSED_HEADER,
    "Decided or done:",
    "Open:",
    "Open (",
    "Ended",
    "--- Update (",
    "Period: ",
    "Topics: ",
    "Opened: ",
    "Closed: ",
)


def terms(text: str) -> tuple[str, ...]:
    """Content words of `text`, normalised (`projections.text.words.content_words`)."""
    return tuple(content_words(text))


# A pool sentence is scored on every run that keeps it and selected against every other one,
# so the same few hundred candidate texts come back batch after batch. Candidates are cut to
# `DigestWeights.max_sentence_chars`, so the cache holds at most CANDIDATE_TERMS_CACHED short
# texts; whole messages go through `terms` uncached.
CANDIDATE_TERMS_CACHED = 4096
_candidate_terms = functools.lru_cache(maxsize=CANDIDATE_TERMS_CACHED)(terms)


def features(text: str) -> list[str]:
    """Content words and the pairs of adjacent content words (`a_b`): the term model's keys."""
    return _features_of(terms(text))


def _features_of(words: Sequence[str]) -> list[str]:
    return [*words, *map("_".join, itertools.pairwise(words))]


@dataclass(frozen=True, slots=True)
class Candidate:
    position: int
    """The channel-wide index of the message it came from (messages seen before it)."""
    speaker: str
    text: str


# A sentence of this batch as read (`rough_sentences`), not yet cleaned: (position, speaker,
# raw text, how many words it has, its features: words and pairs). Its words rank it; only a
# piece that may enter the pool is cleaned into candidates. A plain tuple: a batch makes
# hundreds.
Piece = tuple[int, str, str, int, set[str]]


@dataclass(frozen=True, slots=True)
class DigestWeights:
    """Scoring knobs, tuned on QMSum train (see bench/summary_quality.py). Selection weighs
    a sentence's value against the characters it costs (`cost_exponent`, 0.5): with it the
    pool ranks long sentences less harshly (`length_exponent` 0.1, 0.55 before), and on
    train ROUGE-1/2 rose from 26.0/5.5 to 26.4/5.7 once hedges and contrast were kept.
    Redundancy is the share of a sentence's words already said (0.9 of it off), not its
    likeness to the closest chosen sentence: train 26.44/5.77 to 26.74/5.74."""

    length_exponent: float = 0.1
    opening_messages: int = 40
    opening_bonus: float = 0.3
    decision_bonus: float = 0.15
    redundancy: float = 0.9
    min_terms: int = 2
    spread: float = 0.5
    topic_terms: int = 8
    max_sentence_chars: int = 240
    cost_exponent: float = 0.5
    # A key term shows as its pair ("pull request") when the pair is this share of its uses.
    pair_share: float = 0.5


class DigestSummariser:
    """A bounded summary that carries content, rewritten from the previous one each run.

    Text (sections left out when empty; the whole within `max_tokens`, estimated as
    chars/4):

        Participants: alice, bob
        Key terms: parser, lexer, ...
        Discussed:
        - [alice] <salient sentence>            (in the order they were said)

    It says what was said, never what is open or how a request ended: that is the
    commitments projection's to say (the summaries stage adds it from that state).

    A previous text the digest did not write (another tier, a person) is read as material:
    its sentences join the candidate pool. An empty batch returns `previous` itself.

    Annotations: previous ones, plus `tier=digest`, `itemCount`, `participants` and
    `topics` (comma-separated, the first `MAX_NAMES` seen), and the
    digest's own state: `digestTerms`, `digestPool`, `digestSeen` and `digestTextHash`.
    """

    tier: ClassVar[str] = "digest"

    def __init__(
        self,
        max_tokens: int = SUMMARY_MAX_TOKENS,
        *,
        pool_size: int = 24,
        max_terms: int = 200,
        weights: DigestWeights | None = None,
    ) -> None:
        if max_tokens < 16:
            raise ValueError(f"max_tokens must be >= 16, got {max_tokens}")
        self.max_tokens = max_tokens
        self.pool_size = pool_size
        self.max_terms = max_terms
        self.weights = weights or DigestWeights()

    async def summarise(
        self, items: list[Message], previous: SummaryResult | None = None
    ) -> SummaryResult:
        return self.digest(items, previous)

    def digest(self, items: list[Message], previous: SummaryResult | None = None) -> SummaryResult:
        if not items:
            return previous if previous is not None else SummaryResult("")
        annotations = base_annotations(previous)
        for retired in RETIRED_KEYS:
            annotations.pop(retired, None)
        seen = _int(annotations.get(SEEN_KEY))
        counts = _load_terms(annotations.get(TERMS_KEY))
        pool = _load_pool(annotations.get(POOL_KEY))
        foreign = self._foreign_material(previous, annotations, seen)
        for candidate in foreign:
            counts.update(features(candidate.text))
        pool.extend(foreign)

        speakers: list[str] = []
        pieces: list[Piece] = []
        for message in items:
            for sender, content in spoken(message):
                speakers.append(sender)
                pieces.extend(self._read(content, seen, sender, counts))
                seen += 1

        counts = _top(counts, self.max_terms)
        pool, scores = self._best(pool, pieces, counts, self.pool_size)
        participants = _capped(
            merge_list_annotation(annotations.get("participants"), speakers), MAX_NAMES
        )
        topics = _capped(
            merge_list_annotation(annotations.get("topics"), (m.topic for m in items)), MAX_NAMES
        )
        text = self.render(pool, scores, counts, participants, seen)

        annotations["tier"] = self.tier
        annotations["itemCount"] = str(len(items))
        if participants:
            annotations["participants"] = participants
        if topics:
            annotations["topics"] = topics
        annotations[SEEN_KEY] = str(seen)
        annotations[TERMS_KEY] = _dump_terms(counts)
        rows = [[c.position, c.speaker, c.text] for c in pool]
        annotations[POOL_KEY] = orjson.dumps(rows).decode()
        annotations[TEXT_HASH_KEY] = text_hash(text)
        return SummaryResult(text, annotations)

    def render(
        self,
        pool: list[Candidate],
        scores: dict[int, float],
        counts: Counter[str],
        participants: str,
        seen: int,
    ) -> str:
        budget = self.max_tokens * 4
        names = participants.split(",") if participants else []
        head = PARTICIPANTS_HEADER + ", ".join(names[:SHOWN_NAMES]) if names else ""
        if len(names) > SHOWN_NAMES:
            head += f" and {len(names) - SHOWN_NAMES} more"
        top = _key_terms(counts, self.weights.topic_terms, self.weights.pair_share)
        if top:
            head = "\n".join(filter(None, [head, f"{KEY_TERMS_HEADER}{', '.join(top)}"]))
        room = budget - len(head) - len(DISCUSSED_HEADER) - 2
        chosen = self._select(pool, scores, room, seen)
        discussed = [f"- {message_line(speaker, said)}" for speaker, said in _runs(chosen)]
        parts = [head] if head else []
        if discussed:
            parts.extend([DISCUSSED_HEADER, *discussed])
        text = "\n".join(parts)
        return cut(text, budget)

    def _shown(self, raw: str) -> list[str]:
        """`sentences(raw)` as far as they can be shown: a candidate is cut to
        `max_sentence_chars`, so a long piece is cleaned only as far as that (and as much
        again), unless what that gives is no longer than can be shown."""
        limit = self.weights.max_sentence_chars
        if len(raw) <= limit * RAW_CHARS_CLEANED:
            return sentences(raw)
        found = sentences(raw[: limit * RAW_CHARS_CLEANED])
        if len(found) == 1 and len(found[0]) > limit + CLEANED_MARGIN:
            return found  # cut to the same candidate as the whole piece would be
        return sentences(raw)

    def _bounded(self, sentence: str) -> str:
        return cut(sentence, self.weights.max_sentence_chars, at_word=True)

    def _read(self, content: str, position: int, speaker: str, counts: Counter[str]) -> list[Piece]:
        """Count the words of one message's `content` and return its pieces worth ranking.

        The digest's work per message, kept light: the message is cut into sentences and
        its words read (`rough_sentences`, `term_words`), not cleaned; the term model counts
        the content words and the pairs of adjacent ones, across the message as before.
        """
        # A narrated request counts its words, not the "asked worker-a: " that frames them
        # (the framing stays on the sentence, as it will be shown).
        framing, content = told_request(content)
        rough = rough_sentences(content)
        said = sentence_words(rough, ids=has_ids(content))
        words = list(itertools.chain.from_iterable(said))
        pairs = list(map("_".join, itertools.pairwise(words)))  # across sentences too
        counts.update(words)
        counts.update(pairs)
        min_terms = self.weights.min_terms
        pieces: list[Piece] = []
        first = 0  # the index of the piece's first word in `words`
        for piece, piece_words in zip(rough, said, strict=True):
            length = len(piece_words)
            if length >= min_terms:
                distinct = set(piece_words)
                if len(distinct) >= min_terms:
                    own = pairs[first : first + length - 1]
                    told = framing + piece if first == 0 else piece
                    pieces.append((position, speaker, told, length, distinct.union(own)))
            first += length
        return pieces

    def _score(self, candidate: Candidate, counts: Counter[str], total: int | None = None) -> float:
        """`total`: `sum(counts.values())`, when the caller scores many candidates at once."""
        total = (sum(counts.values()) if total is None else total) or 1
        return self._scored(candidate, _logs(counts, total))

    def _scored(self, candidate: Candidate, logs: dict[str, float]) -> float:
        length, unique, distinct, decides = _candidate_facts(candidate.text)
        if unique < self.weights.min_terms:
            return 0.0
        return self._score_features(length, distinct, candidate.position, decides, logs)

    def _score_features(
        self,
        length: int,
        distinct: Set[str],
        position: int,
        decides: bool,
        logs: dict[str, float],
    ) -> float:
        """The score of a sentence of `length` words whose features are `distinct`; `logs`:
        each counted term's `log1p(count * 1000 / total)` (`_logs`)."""
        # Exactly rounded, so the same in any order: a set's order changes with the hash seed.
        salience = math.fsum(map(logs.get, distinct, itertools.repeat(0.0)))
        score = salience / math.pow(length, self.weights.length_exponent)
        if position < self.weights.opening_messages:
            score *= 1 + self.weights.opening_bonus
        if decides:
            score *= 1 + self.weights.decision_bonus
        return score

    def _best(
        self, pool: list[Candidate], pieces: list[Piece], counts: Counter[str], size: int
    ) -> tuple[list[Candidate], dict[int, float]]:
        """The `size` best-scored candidates, in said order, and the score of each (by id).

        The pool's candidates are scored as they read; this batch's pieces first by their
        rough words, and only those among the best `size` places (with the pool's
        candidates) are cleaned into candidates and scored as they will read: a piece's
        rough words rank it about as its cleaned text will. Cleaning twice as many places
        made the digest 15 % slower for the same ROUGE on QMSum train (26.74 / 5.74 / 13.71
        against 26.75 / 5.72 / 13.75; val 25.32 / 5.24 / 13.07 against 25.24 / 5.18 / 13.11).
        """
        total = sum(counts.values()) or 1
        logs = _logs(counts, total)
        known = {id(c): self._scored(c, logs) for c in pool}
        ranked: list[tuple[float, int, Candidate | Piece]] = [
            (known[id(c)], i, c) for i, c in enumerate(pool)
        ]
        # A piece is ranked as `_score_features` would score it, inline (a batch has hundreds),
        # without its decision bonus: that is read once it is cleaned.
        exponent, opening = self.weights.length_exponent, self.weights.opening_messages
        bonus, salience, zero = 1 + self.weights.opening_bonus, logs.get, itertools.repeat(0.0)
        ranked += [
            (
                math.fsum(map(salience, piece[4], zero))
                / math.pow(piece[3], exponent)
                * (bonus if piece[0] < opening else 1.0),
                len(pool) + i,
                piece,
            )
            for i, piece in enumerate(pieces)
        ]
        ranked.sort(key=lambda entry: (-entry[0], entry[1]))
        chosen: list[tuple[int, Candidate]] = []
        for score, order, item in ranked[:size]:
            if score <= 0:
                break
            if isinstance(item, Candidate):
                chosen.append((order, item))
            else:
                position, speaker, raw = item[:3]
                chosen.extend(
                    (order, Candidate(position, speaker, self._bounded(sentence)))
                    for sentence in self._shown(raw)
                )
        chosen.sort(key=lambda entry: entry[0])  # said order, as the pool was built
        unique: dict[str, Candidate] = {}
        for _, candidate in chosen:
            unique.setdefault(candidate.text.lower(), candidate)
        scores = {id(c): known.get(id(c)) or self._scored(c, logs) for c in unique.values()}
        scored = sorted(unique.values(), key=lambda c: -scores[id(c)])
        kept = [c for c in scored if scores[id(c)] > 0][:size]
        return sorted(kept, key=lambda c: c.position), {id(c): scores[id(c)] for c in kept}

    def _select(
        self, pool: list[Candidate], scores: dict[int, float], room: int, seen: int
    ) -> list[Candidate]:
        """Greedy maximal marginal relevance within `room` characters, in said order.

        Each remaining candidate keeps the share of its content words that what was chosen
        so far already says (the union of theirs: a word said once is not worth saying
        again, whichever sentence said it) and its closeness to them, updated as each one is
        chosen, in a pass over the pool per round. What a candidate costs is what it adds
        to the lines as rendered (`_runs`): its text, and a line of its own unless it joins
        its speaker's line.
        """
        score = [scores[id(c)] for c in pool]
        words = [frozenset(_candidate_terms(c.text)) for c in pool]
        sizes = [len(w) for w in words]
        positions = [c.position for c in pool]
        per_cost = [
            math.pow(_line_chars(c.speaker, c.text), self.weights.cost_exponent) for c in pool
        ]
        least = [len(c.text) + 1 for c in pool]  # joining a line of its speaker
        overlap = [0.0] * len(pool)
        said: set[str] = set()  # the content words of the chosen candidates
        nearby = [0.0] * len(pool)
        redundancy, spread = self.weights.redundancy, self.weights.spread
        scale = max(seen, 1)

        def value(i: int) -> float:
            kept = (1 - redundancy * overlap[i]) * (1 - spread * nearby[i])
            return score[i] * kept / per_cost[i]

        remaining = list(range(len(pool)))
        chosen: list[int] = []
        used = 0
        # Once nothing left fits, every later round would pass over the rest.
        while remaining and used + min(map(least.__getitem__, remaining)) <= room:
            best = max(remaining, key=value)  # the first of equals, in said order
            remaining.remove(best)
            if overlap[best] >= NEAR_DUPLICATE:
                continue
            with_best = sorted([*chosen, best])  # the pool is in said order
            cost = _rendered_chars([pool[i] for i in with_best])
            if cost > room:
                continue
            chosen, used = with_best, cost
            chosen_words, at = words[best], positions[best]
            said |= chosen_words
            for i in remaining:
                # Words already said and closeness (1 at the same position, falling off
                # over about a twelfth of the channel), inline: this runs for every pair.
                other = words[i]
                if other and not other.isdisjoint(chosen_words):
                    overlap[i] = len(other & said) / sizes[i]
                close = math.exp(-abs(positions[i] - at) * 12 / scale)
                if close > nearby[i]:
                    nearby[i] = close
        return [pool[i] for i in chosen]

    def _foreign_material(
        self, previous: SummaryResult | None, annotations: dict[str, str], seen: int
    ) -> list[Candidate]:
        """Sentences of a previous text the digest did not write (or of what was added to it)."""
        before = previous_text(previous)
        if not before:
            return []
        written = annotations.get(TEXT_HASH_KEY)
        if written and text_hash(before) == written:
            return []
        own = _own_prefix(before, written)
        added = before[len(own) :]
        out: list[Candidate] = []
        for line in added.splitlines():
            line = line.strip().removeprefix("- ")
            if line.startswith(STRUCTURE_LINES):
                continue
            name, content = parse_message_line(line) or ("summary", line)
            position = max(seen - 1, 0)
            out.extend(Candidate(position, name, self._bounded(s)) for s in sentences(content))
        return out


def _key_terms(counts: Counter[str], limit: int, pair_share: float) -> list[str]:
    """The channel's most frequent content words, most frequent first; a word said in one
    pair at least `pair_share` of the times ("request" of "pull request") shows as that
    pair. No word shows twice."""
    pairs: dict[str, tuple[int, str, str]] = {}  # word -> its most frequent pair
    for term, count in counts.items():
        first, joined, second = term.partition("_")
        if not joined or first == second:
            continue
        for word in (first, second):
            if count >= pair_share * counts[word] and count > pairs.get(word, (0, "", ""))[0]:
                pairs[word] = (count, first, second)
    out: list[str] = []
    used: set[str] = set()
    for term, _ in counts.most_common():
        if len(out) >= limit:
            break
        if "_" in term or term in used:
            continue
        _, first, second = pairs.get(term, (0, term, ""))
        words = {first, second} - {""}
        if words & used:
            words, first, second = {term}, term, ""
        out.append(f"{first} {second}".strip())
        used |= words
    return out


def _runs(chosen: Sequence[Candidate]) -> list[tuple[str, str]]:
    """`(speaker, text)` of each line the `chosen` candidates (in said order) render as: a
    speaker's sentences in a row are one line, so no entry repeats its speaker; a narrated
    request ("asked worker-a: …") is a line of its own, as the request it tells."""
    lines: list[tuple[str, str]] = []
    joins = False
    for candidate in chosen:
        told = bool(told_request(candidate.text)[0])
        if joins and not told and lines[-1][0] == candidate.speaker:
            lines[-1] = (candidate.speaker, _sentence_after(lines[-1][1], candidate.text))
        else:
            lines.append((candidate.speaker, candidate.text))
        joins = not told
    return lines


def _sentence_after(text: str, sentence: str) -> str:
    """`sentence` after `text`, which ends as a sentence does first."""
    ends = text.endswith((".", "?", "!", ELLIPSIS, '"', "”", ")"))
    return f"{text} {sentence}" if ends else f"{text}. {sentence}"


def _line_chars(speaker: str, text: str) -> int:
    """The characters of a Discussed line, `- [speaker] text` and its line break."""
    return len(speaker) + len(text) + 6


def _rendered_chars(chosen: Sequence[Candidate]) -> int:
    return sum(_line_chars(speaker, text) for speaker, text in _runs(chosen))


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _own_prefix(text: str, written: str | None) -> str:
    """The longest prefix of `text`, ending at a line break, whose hash the digest wrote."""
    if not written:
        return ""
    for end in (i for i in range(len(text), 0, -1) if i == len(text) or text[i] == "\n"):
        if text_hash(text[:end].rstrip()) == written:
            return text[:end]
    return ""


# A long piece is cleaned up to this many times `max_sentence_chars` of its raw text; what
# that gives stands when it is longer than `max_sentence_chars` by CLEANED_MARGIN (far from
# where the raw text was cut, the cleaner reads the same text).
RAW_CHARS_CLEANED = 2
CLEANED_MARGIN = 60


def _logs(counts: Counter[str], total: int) -> dict[str, float]:
    return {term: math.log1p(count * 1000 / total) for term, count in counts.items()}


@functools.lru_cache(maxsize=CANDIDATE_TERMS_CACHED)
def _candidate_facts(text: str) -> tuple[int, int, frozenset[str], bool]:
    """What scoring reads of a candidate's text: how many words, how many distinct, its
    distinct features (words and pairs), and whether it states a decision."""
    words = _candidate_terms(text)
    distinct = frozenset(_features_of(words))
    return len(words), len(set(words)), distinct, states_a_decision(text)


def _top(counts: Counter[str], n: int) -> Counter[str]:
    """`Counter(dict(counts.most_common(n)))`, without sorting every term: a batch adds
    thousands, mostly counted once, and only those at or above the n-th count can stay."""
    if len(counts) <= n:
        return Counter(dict(counts.most_common()))
    histogram = Counter(counts.values())
    at_least, floor = 0, 0
    for value in sorted(histogram, reverse=True):
        at_least += histogram[value]
        if at_least >= n:
            floor = value
            break
    kept = itertools.compress(counts.items(), map(floor.__le__, counts.values()))
    # A stable sort by count of those, in insertion order: the order most_common gives.
    return Counter(dict(sorted(kept, key=operator.itemgetter(1), reverse=True)[:n]))


def _capped(names: str, limit: int) -> str:
    return ",".join(names.split(",")[:limit]) if names else names


def _int(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


def _load_terms(raw: str | None) -> Counter[str]:
    return Counter(_parsed_terms(raw or ""))


# The term model a run wrote is what the channel's next run reads: parsed once.
@functools.lru_cache(maxsize=1024)
def _parsed_terms(raw: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pair in raw.split(","):
        term, _, count = pair.rpartition(":")
        if term and count.isdigit():
            counts[term] = int(count)
    return counts


def _dump_terms(counts: Counter[str]) -> str:
    return ",".join(f"{term}:{count}" for term, count in counts.most_common())


def _load_pool(raw: str | None) -> list[Candidate]:
    rows = _load_json_list(raw)
    return [
        Candidate(int(row[0]), str(row[1]), str(row[2]))
        for row in rows
        if isinstance(row, list) and len(row) == 3 and isinstance(row[0], int)
    ]


def _load_json_list(raw: str | None) -> list[object]:
    if not raw:
        return []
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []
