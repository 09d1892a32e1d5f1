"""Split storage of commitments folds: written in proportion to the change, read back whole."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings

from projections.commitments import CommitmentProjection
from projections.model import Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded, advance, canonical_hash, dump_state, fold
from streams.fold_store import (
    ENDED_SEQS,
    ended_key,
    split_record,
    stored_fold,
    whole_fold,
)
from tests.unit.projections.test_commitments import CHANNEL, conversations, make

SMALL = CommitmentProjection(keep_terminal=3)


class Store:
    """A fold table and an ended table as dicts, written as the fold stage writes them."""

    def __init__(self) -> None:
        self.record: dict[str, Any] | None = None
        self.ended: dict[str, Any] = {}
        self.written: list[int] = []  # bytes of each fold's writes

    def write(self, folded: Folded) -> None:
        writes = split_record(folded, self.record)
        assert ENDED_SEQS in writes.record  # stored split, not kept whole
        size = len(orjson.dumps(writes.record))
        for seq, value in writes.ended.items():
            self.ended[ended_key(CHANNEL, seq)] = value
            size += len(orjson.dumps(value))
        self.record = writes.record
        for seq in writes.dropped:
            del self.ended[ended_key(CHANNEL, seq)]
        self.written.append(size)

    def whole(self) -> Folded | None:
        if self.record is None:
            return None
        return whole_fold(self.record, self.ended.get, CHANNEL)


@settings(max_examples=200)
@given(conversations())
def test_a_fold_read_back_from_split_tables_is_the_whole_state(messages: list[Message]) -> None:
    """Each message folds into the state read back from the tables (every read a cache
    miss): the same states as the pure fold, and the ended table holds the kept ones only."""
    store = Store()
    for offset, message in enumerate(messages):
        folded, _, _, applied = advance(SMALL, store.whole(), message, offset)
        if applied:
            store.write(folded)
        whole = store.whole()
        assert whole is not None
        expected = fold(SMALL, messages[: offset + 1])
        assert canonical_hash(whole.state) == canonical_hash(expected)
        kept_ended = [c for c in expected.commitments.values() if not c.is_active]
        assert len(store.ended) == len(kept_ended) <= SMALL.keep_terminal


def test_an_ended_commitment_is_written_once_and_the_record_holds_the_live_part() -> None:
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
    assert list(store.record["state"]["commitments"]) == ["open-q"]
    assert store.record[ENDED_SEQS] == [17, 20]  # 20 ended, 17 evicted, 3 kept
    assert sorted(store.ended) == sorted(ended_key(CHANNEL, seq) for seq in (17, 18, 19))
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
