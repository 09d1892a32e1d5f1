"""Split storage of commitments folds: written in proportion to the change, read back whole."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.commitments import CommitmentProjection
from projections.model import Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded, advance, canonical_hash, dump_state, fold
from streams.fold_store import (
    ACTIVE_IDS,
    ACTIVE_KEY_PREFIX,
    ENDED_SEQS,
    PARTICIPANT_PARTS,
    TOPICS_VERSION,
    MemoryFoldStore,
    StoredFold,
    active_key,
    bucket_part,
    ended_key,
    part_key,
    record_deadline,
    split_record,
    stored_fold,
    topics_part,
    whole_fold,
)
from tests.sample_projections import WordCountProjection
from tests.unit.projections.test_commitments import CHANNEL, conversations, make

SMALL = CommitmentProjection(keep_terminal=3)


def active_ids(writes: StoredFold) -> list[str]:
    """The ids of the active commitments among a fold's written parts."""
    return [
        part.removeprefix(ACTIVE_KEY_PREFIX)
        for part in writes.parts
        if part.startswith(ACTIVE_KEY_PREFIX)
    ]


def ended_seqs(writes: StoredFold) -> list[int]:
    return [int(part) for part in writes.parts if part.isdigit()]


class Store:
    """A fold table and the commitments' table (`ended`, named for the worker's table) as
    dicts, written in the fold stage's order: commitments, the record, the deletions."""

    def __init__(self) -> None:
        self.record: dict[str, Any] | None = None
        self.ended: dict[str, Any] = {}
        self.written: list[int] = []  # bytes of each fold's writes
        self.active_written: list[list[str]] = []  # ids of the active ones each fold wrote

    def write(self, folded: Folded, previous_fold: Folded | None = None) -> None:
        writes = split_record(folded, self.record, previous_fold)
        assert ENDED_SEQS in writes.record  # stored split, not kept whole
        assert writes.record["state"]["commitments"] == {}
        size = len(orjson.dumps(writes.record))
        for part, value in writes.parts.items():
            self.ended[part_key(CHANNEL, part)] = value
            size += len(orjson.dumps(value))
        self.record = writes.record
        for part in writes.removed:
            del self.ended[part_key(CHANNEL, part)]
        self.written.append(size)
        self.active_written.append(active_ids(writes))

    def whole(self) -> Folded | None:
        if self.record is None:
            return None
        return whole_fold(self.record, self.ended.get, CHANNEL)


@settings(max_examples=200)
@given(conversations())
def test_a_fold_read_back_from_split_tables_is_the_whole_state(messages: list[Message]) -> None:
    """Each message folds into the state read back from the tables (every read a cache
    miss): the same states as the pure fold; the second table holds the kept ended and the
    active ones only, and the record the earliest deadline."""
    store = Store()
    for offset, message in enumerate(messages):
        before = store.whole()
        folded, _, _, applied = advance(SMALL, before, message, offset)
        if applied:
            store.write(folded, before)
        whole = store.whole()
        assert whole is not None
        expected = fold(SMALL, messages[: offset + 1])
        assert canonical_hash(whole.state) == canonical_hash(expected)
        kept_ended = [c for c in expected.commitments.values() if not c.is_active]
        active = [c for c in expected.commitments.values() if c.is_active]
        assert len(kept_ended) <= SMALL.keep_terminal
        # the second table holds exactly the kept ended ones and the active ones
        assert sorted(store.ended) == sorted(
            [ended_key(CHANNEL, seq) for seq in range(*store.record[ENDED_SEQS])]  # type: ignore[index]
            + [active_key(CHANNEL, c.id) for c in active]
        )
        deadlines = [c.expires_at for c in active if c.expires_at is not None]
        assert record_deadline(store.record) == (min(deadlines) if deadlines else None)  # type: ignore[arg-type]


def test_an_ended_commitment_is_written_once_and_the_record_holds_the_counters_and_ids() -> None:
    store = Store()
    messages = []
    for n in range(20):
        messages += [make(MessageType.COMMAND, f"c{n}"), make(MessageType.DONE, f"c{n}")]
    messages.append(make(MessageType.QUERY, "still-open", id="open-q"))
    state = SMALL.identity()
    for offset, message in enumerate(messages):
        state = SMALL.apply(state, message)
        store.write(
            Folded(projection="commitments", version=2, offset=offset, state=dump_state(state))
        )
    assert store.record is not None
    assert store.record[ACTIVE_IDS] == ["open-q"]
    assert store.record[ENDED_SEQS] == [17, 20]  # 20 ended, 17 evicted, 3 kept
    assert sorted(store.ended) == sorted(
        [ended_key(CHANNEL, seq) for seq in (17, 18, 19)] + [active_key(CHANNEL, "open-q")]
    )
    # Ending a commitment writes the record and that one commitment; late writes are no
    # larger than early ones, however many commitments ended before.
    closing = store.written[1::2][:20]
    assert max(closing[10:]) <= max(closing[:3]) + 20


def test_a_whole_record_is_read_as_it_is_and_its_ended_ones_are_written_on_the_next_fold() -> None:
    state = fold(SMALL, [make(MessageType.COMMAND, "a"), make(MessageType.DONE, "a")])
    whole = Folded(projection="commitments", version=2, offset=1, state=dump_state(state))
    assert whole_fold(whole.as_record(), {}.get, CHANNEL) == whole
    after = SMALL.apply(state, make(MessageType.QUERY, "b"))
    folded = Folded(projection="commitments", version=2, offset=2, state=dump_state(after))
    writes = split_record(folded, whole.as_record())
    assert ended_seqs(writes) == [0] and not writes.removed


def test_a_missing_ended_record_is_skipped() -> None:
    state = fold(SMALL, [make(MessageType.COMMAND, "a"), make(MessageType.DONE, "a")])
    folded = Folded(projection="commitments", version=2, offset=1, state=dump_state(state))
    writes = split_record(folded, None)
    assert whole_fold(writes.record, {}.get, CHANNEL).state["commitments"] == {}


def test_other_projections_are_stored_whole() -> None:
    words = WordCountProjection()
    folded = Folded(
        projection="word-count", version=1, offset=0, state=dump_state(words.identity())
    )
    writes = stored_fold(words, folded, None)
    assert writes.record == folded.as_record() and not writes.parts and not writes.removed


# --- the overview: participants in versioned buckets -----------------------------------------

OVERVIEW = ChannelOverviewProjection(max_participants=12, max_topics=3)


def on_topic(message: Message, topic: str) -> Message:
    return message.model_copy(update={"topic": topic})


@st.composite
def chatter(draw: st.DrawFn) -> list[Message]:
    """Messages from a pool of senders larger than the bound (so some are evicted and come
    back), on more topics than kept, EVENTs among them."""
    messages = []
    for i in range(draw(st.integers(0, 80))):
        kind = draw(st.sampled_from([MessageType.QUERY, MessageType.RESPONSE, MessageType.EVENT]))
        messages.append(
            on_topic(
                make(kind, f"c{i}", sender=f"agent-{draw(st.integers(0, 20))}"),
                f"topic-{draw(st.integers(0, 5))}",
            )
        )
    return messages


@settings(max_examples=150)
@given(chatter())
def test_an_overview_read_back_from_its_parts_is_the_whole_state(messages: list[Message]) -> None:
    """Every fold, read back from the tables (no cache), is the pure fold; the second table
    holds exactly the versions the record names; a message writes at most two buckets."""
    store = MemoryFoldStore()
    for offset, message in enumerate(messages):
        before = store.whole("overview", CHANNEL)
        folded, _, _, applied = advance(OVERVIEW, before, message, offset)
        assert applied
        store.write(OVERVIEW, CHANNEL, folded, before)
        whole = store.whole("overview", CHANNEL)
        assert whole is not None
        assert whole.state == dump_state(fold(OVERVIEW, messages[: offset + 1]))
        record = store.record("overview", CHANNEL)
        assert record is not None and record["state"]["participants"] == {}
        named = {
            part_key(CHANNEL, bucket_part(bucket, version))
            for bucket, version in enumerate(record[PARTICIPANT_PARTS])
            if version is not None
        } | {part_key(CHANNEL, topics_part(record[TOPICS_VERSION]))}
        assert set(store.parts["overview"]) == named
        written_now = [key for key in named if key.endswith(f"@{offset}") and "#p:" in key]
        assert len(written_now) <= 2 or offset == 0


def test_a_message_writes_its_senders_bucket_not_every_participant() -> None:
    """With 200 participants, a message costs the record and one bucket: a small fraction
    of the whole overview, and about as much at the 10,000th message as at the 300th."""
    overview = ChannelOverviewProjection()
    store = MemoryFoldStore()
    state, before, written = overview.identity(), None, []
    for offset in range(10_000):
        state = overview.apply(
            state,
            make(MessageType.QUERY, f"c{offset}", sender=f"participant-number-{offset % 250:04d}"),
        )
        folded = Folded(projection="overview", version=2, offset=offset, state=dump_state(state))
        written.append(store.write(overview, CHANNEL, folded, before))
        before = folded
    whole = len(orjson.dumps(dump_state(state)))
    assert max(written[300:]) < whole / 4
    # Flat: only the offsets' digits grow (the record names each bucket's version by offset).
    assert sum(written[-1000:]) <= 1.1 * sum(written[300:1300])


def test_an_overview_record_that_names_a_missing_part_is_written_whole_again() -> None:
    store = MemoryFoldStore()
    messages = [make(MessageType.QUERY, f"c{n}", sender=f"a-{n}") for n in range(5)]
    before = None
    for offset, message in enumerate(messages):
        folded, _, _, _ = advance(OVERVIEW, before, message, offset)
        store.write(OVERVIEW, CHANNEL, folded, before)
        before = folded
    store.parts["overview"].clear()  # lost, say: the next fold cannot build on them
    after, _, _, _ = advance(OVERVIEW, before, make(MessageType.QUERY, "c9", sender="a-0"), 5)
    store.write(OVERVIEW, CHANNEL, after, before)
    whole = store.whole("overview", CHANNEL)
    assert whole is not None and whole.state == after.state


def test_a_record_stands_for_its_own_state_whatever_was_written_after_it() -> None:
    """Parts are never changed in place, and the fold stage deletes replaced ones only once
    the records after them are acknowledged: after a crash that kept the record of offset
    20 and the parts written after it (not their records, not their deletions), the record
    still reads back as the state it was written with, so the messages after it fold again
    onto exactly that state."""
    store = MemoryFoldStore()
    before = None
    kept: tuple[Folded, dict[Any, Any], dict[str, Any]] | None = None
    for offset in range(30):
        message = make(MessageType.QUERY, f"c{offset}", sender=f"a-{offset % 7}")
        folded, _, _, _ = advance(OVERVIEW, before, message, offset)
        store.write(OVERVIEW, CHANNEL, folded, before)
        if offset == 20:
            kept = (folded, dict(store.records), dict(store.parts["overview"]))
        before = folded
    assert kept is not None
    folded, records, parts = kept
    store.records = records
    store.parts["overview"] = {**parts, **store.parts["overview"]}
    whole = store.whole("overview", CHANNEL)
    assert whole is not None and whole.state == folded.state
