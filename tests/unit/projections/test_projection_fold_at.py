from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.commitments import CommitmentProjection, CommitmentsState
from projections.model import Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import (
    Folded,
    StaleFoldError,
    dump_state,
    fold,
    fold_at,
    load_state,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
P = CommitmentProjection()


def status(n: int, cid: str | None = None) -> Message:
    return Message(
        id=f"m{n}",
        channel="c",
        sender="alice",
        type=MessageType.STATUS,
        content="busy",
        correlation_id=cid,
        created_at=T0 + timedelta(minutes=n),
    )


def query(n: int, cid: str) -> Message:
    return Message(
        id=f"m{n}",
        channel="c",
        sender="alice",
        type=MessageType.QUERY,
        correlation_id=cid,
        created_at=T0 + timedelta(minutes=n),
    )


class Boom:
    name = "commitments"
    version = CommitmentProjection.version

    def identity(self) -> CommitmentsState:
        return CommitmentsState()

    def apply(self, state: CommitmentsState, message: Message) -> CommitmentsState:
        raise RuntimeError("projection bug")


def test_first_message_starts_from_identity() -> None:
    folded, applied = fold_at(P, None, query(0, "q"), 0)
    assert applied
    assert (folded.projection, folded.version, folded.offset) == ("commitments", 3, 0)
    state = load_state(P, folded.state)
    assert state.active("q") is not None
    assert folded.state == dump_state(state)


def test_default_offset_is_before_the_log() -> None:
    assert Folded(projection="x", version=1, state={}).offset == -1


def test_replayed_offsets_are_not_applied_twice() -> None:
    folded, _ = fold_at(P, None, query(0, "q"), 10)
    folded, _ = fold_at(P, folded, status(1, "q"), 11)
    for offset in (0, 10, 11):
        again, applied = fold_at(P, folded, status(99, "q"), offset)
        assert not applied
        assert again is folded


def test_offsets_may_have_gaps() -> None:
    folded, _ = fold_at(P, None, query(0, "a"), 5)
    folded, applied = fold_at(P, folded, query(1, "b"), 42)
    assert applied and folded.offset == 42
    assert len(load_state(P, folded.state).open_commitments()) == 2


def test_ignored_message_advances_the_offset_and_keeps_the_state() -> None:
    folded, _ = fold_at(P, None, query(0, "q"), 0)
    after, applied = fold_at(P, folded, status(1), 1)
    assert applied and after.offset == 1
    assert after.state == folded.state


def test_exceptions_propagate_and_leave_the_fold_alone() -> None:
    folded, _ = fold_at(P, None, query(0, "q"), 0)
    snapshot = folded.model_copy(deep=True)
    with pytest.raises(RuntimeError, match="projection bug"):
        fold_at(Boom(), folded, status(1, "q"), 1)
    assert folded == snapshot


def test_fold_from_another_projection_or_version_is_refused() -> None:
    folded, _ = fold_at(P, None, query(0, "q"), 0)
    with pytest.raises(StaleFoldError, match="rebuild"):
        fold_at(ChannelOverviewProjection(), folded, status(1), 1)
    old = folded.model_copy(update={"version": 0})
    with pytest.raises(StaleFoldError, match="v0"):
        fold_at(P, old, status(1), 1)


def test_folded_roundtrips_as_json() -> None:
    folded, _ = fold_at(ChannelOverviewProjection(), None, query(0, "q"), 3)
    restored = Folded.model_validate_json(folded.model_dump_json())
    assert restored == folded
    again, applied = fold_at(ChannelOverviewProjection(), restored, query(0, "q"), 3)
    assert again is restored and not applied


@settings(max_examples=200)
@given(
    st.lists(st.integers(0, 19), max_size=30),
    st.lists(st.tuples(st.integers(0, 29), st.integers(1, 5)), max_size=10),
)
def test_at_least_once_delivery_equals_exactly_once(
    picks: list[int], redeliveries: list[tuple[int, int]]
) -> None:
    log: list[Message] = []
    for n, pick in enumerate(picks):
        cid = f"c{pick % 3}"
        log.append(query(n, cid) if pick < 10 else status(n, cid if pick < 15 else None))
    # A consumer that crashes before committing re-reads a window it already folded.
    delivered = list(enumerate(log))
    for at, length in redeliveries:
        if at < len(delivered):
            start = max(0, at - length)
            delivered[at:at] = delivered[start:at]
    folded: Folded | None = None
    applied_offsets = []
    for offset, message in delivered:
        folded, applied = fold_at(P, folded, message, offset)
        if applied:
            applied_offsets.append(offset)
    assert applied_offsets == list(range(len(log)))
    expected = fold(P, log)
    if folded is None:
        assert log == []
    else:
        assert folded.offset == len(log) - 1
        assert load_state(P, folded.state) == expected
