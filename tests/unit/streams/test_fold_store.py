"""Split storage of commitments folds: written in proportion to the change, read back whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from hypothesis import given, settings

from projections.commitments import CommitmentProjection
from projections.model import Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded, advance, canonical_hash, dump_state, fold
from streams.fold_store import (
    ACTIVE_IDS,
    EARLIEST_DEADLINE,
    ENDED_SEQS,
    active_key,
    ended_key,
    record_deadline,
    split_record,
    stored_fold,
    whole_fold,
)
from tests.unit.projections.test_commitments import CHANNEL, conversations, make

SMALL = CommitmentProjection(keep_terminal=3)


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
        for seq, value in writes.ended.items():
            self.ended[ended_key(CHANNEL, seq)] = value
            size += len(orjson.dumps(value))
        for commitment_id, value in writes.active.items():
            self.ended[active_key(CHANNEL, commitment_id)] = value
            size += len(orjson.dumps(value))
        self.record = writes.record
        for seq in writes.dropped:
            del self.ended[ended_key(CHANNEL, seq)]
        for commitment_id in writes.closed:
            del self.ended[active_key(CHANNEL, commitment_id)]
        self.written.append(size)
        self.active_written.append(list(writes.active))

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
    assert list(writes.ended) == [0] and not writes.dropped


def test_a_missing_ended_record_is_skipped() -> None:
    state = fold(SMALL, [make(MessageType.COMMAND, "a"), make(MessageType.DONE, "a")])
    folded = Folded(projection="commitments", version=2, offset=1, state=dump_state(state))
    writes = split_record(folded, None)
    assert whole_fold(writes.record, {}.get, CHANNEL).state["commitments"] == {}


def test_other_projections_are_stored_whole() -> None:
    overview = ChannelOverviewProjection()
    folded = Folded(
        projection="overview", version=2, offset=0, state=dump_state(overview.identity())
    )
    writes = stored_fold(overview, folded, None)
    assert writes.record == folded.as_record() and not writes.ended


def test_an_active_commitment_is_written_when_it_changes_and_deleted_when_it_ends() -> None:
    store = Store()
    messages = [
        make(MessageType.COMMAND, "a", id="open-a"),
        make(MessageType.QUERY, "b", id="open-b"),
        make(MessageType.EVENT, None),  # changes no commitment
        make(MessageType.STATUS, "a"),  # acknowledges a
        make(MessageType.DONE, "b"),  # ends b
    ]
    state = SMALL.identity()
    before = None
    for offset, message in enumerate(messages):
        state = SMALL.apply(state, message)
        folded = Folded(projection="commitments", version=2, offset=offset, state=dump_state(state))
        store.write(folded, before)
        before = folded
    assert store.active_written == [["open-a"], ["open-b"], [], ["open-a"], []]
    assert store.record is not None and store.record[ACTIVE_IDS] == ["open-a"]
    assert active_key(CHANNEL, "open-b") not in store.ended  # ended: in the ended records
    assert store.ended[active_key(CHANNEL, "open-a")]["commitment"]["state"] == "ACKNOWLEDGED"
    # Without the previous whole fold (not known), every active one is written.
    assert list(split_record(before, store.record).active) == ["open-a"]  # type: ignore[arg-type]


def test_the_record_keeps_the_earliest_deadline_of_its_active_commitments() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    soon, later = now + timedelta(minutes=5), now + timedelta(hours=1)
    state = fold(
        SMALL,
        [
            make(MessageType.COMMAND, "late", deadline=later),
            make(MessageType.COMMAND, "soon", deadline=soon),
        ],
    )
    folded = Folded(projection="commitments", version=2, offset=1, state=dump_state(state))
    record = split_record(folded, None).record
    assert record[EARLIEST_DEADLINE] == soon.isoformat()
    assert record_deadline(record) == soon
    assert record_deadline(folded.as_record()) == soon  # a whole record: read from its state
    ended = SMALL.apply(state, make(MessageType.DONE, "soon"))
    after = Folded(projection="commitments", version=2, offset=2, state=dump_state(ended))
    assert record_deadline(split_record(after, record).record) == later


def test_a_record_split_before_active_ones_were_stored_apart_is_read_and_rewritten() -> None:
    state = fold(SMALL, [make(MessageType.COMMAND, "a", id="open-a")])
    folded = Folded(projection="commitments", version=2, offset=0, state=dump_state(state))
    older = {**folded.as_record(), ENDED_SEQS: [0, 0]}  # its active ones in its own state
    assert whole_fold(older, {}.get, CHANNEL) == folded
    writes = split_record(folded, older, folded)
    assert list(writes.active) == ["open-a"] and not writes.closed
