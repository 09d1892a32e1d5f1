"""streams.fold_store: a fold is stored whole, one record per channel and projection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from projections.commitments import CommitmentProjection
from projections.model import Message, MessageType
from projections.projection import Folded, dump_state, fold
from streams.fold_store import earliest_deadline, stored_folded


def test_a_stored_record_is_the_fold_it_was_written_from() -> None:
    messages = [
        Message(channel="a/b", sender="ann", type=MessageType.COMMAND, correlation_id="x"),
        Message(channel="a/b", sender="bob", type=MessageType.STATUS, content="on it"),
    ]
    state = dump_state(fold(CommitmentProjection(), messages))
    folded = Folded(projection="commitments", version=3, offset=1, state=state)
    assert stored_folded(folded.as_record()) == folded


def test_the_earliest_deadline_is_among_the_active_commitments_only() -> None:
    soon = datetime(2026, 1, 1, 9, tzinfo=UTC)
    later = soon + timedelta(hours=1)
    commitments = [
        {"state": "FULFILLED", "expires_at": (soon - timedelta(hours=1)).isoformat()},
        {"state": "OPEN", "expires_at": later.isoformat()},
        {"state": "ACKNOWLEDGED", "expires_at": soon.isoformat()},
        {"state": "OPEN", "expires_at": None},
    ]
    assert earliest_deadline(commitments) == soon
    assert earliest_deadline(commitments[:1]) is None
