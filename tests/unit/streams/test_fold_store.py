"""streams.fold_store: a fold is stored whole, one record per channel and projection."""

from __future__ import annotations

from projections.commitments import CommitmentProjection
from projections.model import Message, MessageType
from projections.projection import Folded, dump_state, fold
from streams.fold_store import stored_folded


def test_a_stored_record_is_the_fold_it_was_written_from() -> None:
    messages = [
        Message(channel="a/b", sender="ann", type=MessageType.COMMAND, correlation_id="x"),
        Message(channel="a/b", sender="bob", type=MessageType.STATUS, content="on it"),
    ]
    state = dump_state(fold(CommitmentProjection(), messages))
    folded = Folded(projection="commitments", version=3, offset=1, state=state)
    assert stored_folded(folded.as_record()) == folded
